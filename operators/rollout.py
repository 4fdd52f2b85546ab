"""Autoregressive prediction: ``window`` given frames → the next frame, fed back for any number of steps.

A one-step model maps the last ``window`` frames stacked along channels, ``(batch, window·channels, *spatial)``,
to the next frame ``(batch, channels, *spatial)``. :func:`rollout` slides that window forward; it is
vectorized over the batch (one model call per step for the whole batch).
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["step", "rollout", "call"]


def call(model: nn.Module, x: torch.Tensor, params: torch.Tensor | None) -> torch.Tensor:
    """``model(x)``, or ``model(x, params)`` for a conditioned model's batch (``params`` not None:
    :class:`operators.models.conditioning.Conditioned`)."""
    return model(x) if params is None else model(x, params)


def step(model: nn.Module, frames: torch.Tensor, params: torch.Tensor | None = None) -> torch.Tensor:
    """One step: ``frames (batch, window, channels, *spatial)`` → next frame ``(batch, channels, *spatial)``; a
    conditioned model's parameters ``params`` ``(batch, P)``."""
    if frames.ndim < 4:
        raise ValueError(f"frames: expected (batch, window, channels, *spatial), found shape {tuple(frames.shape)}")
    out = call(model, frames.flatten(1, 2), params)
    if out.shape[1:] != frames.shape[2:]:
        raise ValueError(
            f"model: expected a next frame of shape (batch, {', '.join(map(str, frames.shape[2:]))}), "
            f"found {tuple(out.shape)}; build it with in_channels = window·channels and out_channels = channels"
        )
    return out


def rollout(model: nn.Module, given: torch.Tensor, steps: int, *, pushforward: bool = False,
            params: torch.Tensor | None = None) -> torch.Tensor:
    """Predict ``steps`` frames autoregressively from the ``window`` given ones.

    Args:
        model: one-step model, ``(batch, window·channels, *spatial)`` → ``(batch, channels, *spatial)``.
        given: the given frames ``(batch, window, channels, *spatial)``, oldest first.
        steps: number of frames to predict (any length).
        pushforward: compute every step but the last without gradient (the pushforward trick of
            Brandstetter et al. 2022: train on the model's own inputs, back-propagate one step).
        params: a conditioned model's parameters ``(batch, P)``, the same at every step (None: unconditioned).

    Returns:
        ``(batch, steps, channels, *spatial)``.

    Example:
        >>> pred = rollout(model, given, 40)      # given: (batch, 10, 1, 64, 64)
    """
    if steps < 1:
        raise ValueError(f"steps: expected a positive number of steps, found {steps}")
    window, out = given, []
    for k in range(steps):
        if pushforward and k < steps - 1:
            with torch.no_grad():
                nxt = step(model, window, params)
        else:
            nxt = step(model, window, params)
        out.append(nxt)
        window = torch.cat([window[:, 1:], nxt.unsqueeze(1)], dim=1)
    return torch.stack(out, dim=1)
