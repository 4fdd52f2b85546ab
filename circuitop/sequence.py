"""A sequence model for classification and regression: linear encoder -> sequence core -> readout -> head.

The core is any module mapping ``(batch, time, d_in)`` to ``(batch, time, d_out)`` (or a tuple whose first
element is that): :class:`LTC`, :class:`CfC`, :class:`PDNA`, :class:`CascadedKirchhoffBlock` (which take step
sizes ``dt`` ``(batch, time)``) or :class:`NeuronalAttentionCircuit` (which takes timestamps ``t``; it gets
``t - t_0``). ``d_in`` / ``d_out`` are read from the core's ``in_channels`` / ``out_channels`` (or
``d_model``) attributes unless given.

Padding: a ``mask`` ``(batch, time)`` marks each sample's valid steps, a non-empty prefix (padding at the
end). Cores whose ``forward`` takes ``mask`` (attention: :class:`NeuronalAttentionCircuit`) get it as a
key-padding mask; every other core must be causal (recurrent, scans, causal convolutions), so its outputs at
valid steps never see the padding. The readouts then use valid steps only: ``"last"`` the output at each
sample's last valid step, ``"mean"`` the mean over valid steps, ``"steps"`` every step (padded steps 0).

Example:
    >>> model = SequenceModel(CfC(32, 64), in_features=8, out_features=10)
    >>> logits = model(torch.randn(4, 8, 8))                       # (4, 10)
    >>> logits = model(torch.randn(4, 8, 8), timestamps=torch.rand(4, 8).cumsum(1))
    >>> logits = model(torch.randn(4, 8, 8), mask=torch.arange(8) < torch.tensor([[8], [5], [3], [1]]))
"""

from __future__ import annotations

import inspect

import torch
from torch import nn

__all__ = ["SequenceModel", "READOUTS", "steps_from_timestamps", "check_sequence", "check_mask", "check_step",
           "initial_state", "pool"]

#: how per-step core outputs become predictions (see the module docstring)
READOUTS = ("last", "mean", "steps")


def check_sequence(x: torch.Tensor, dt: torch.Tensor | None, in_channels: int) -> torch.Tensor:
    """Validate ``x`` ``(batch, time, in_channels)`` and ``dt`` ``(batch, time)``; return ``dt`` (ones if None).

    Raises:
        ValueError: naming ``x`` or ``dt`` with the expected and found shape, or a non-positive step.
    """
    if x.dim() != 3 or x.shape[-1] != in_channels:
        raise ValueError(f"x: expected shape (batch, time, {in_channels}), found {tuple(x.shape)}")
    if dt is None:
        return x.new_ones(x.shape[:2])
    dt = torch.as_tensor(dt, dtype=x.dtype, device=x.device)
    if dt.dim() == 1 and dt.shape[0] == x.shape[1]:
        dt = dt.expand(x.shape[0], -1)
    if dt.shape != x.shape[:2]:
        raise ValueError(f"dt: expected shape (batch, time) = {tuple(x.shape[:2])}, found {tuple(dt.shape)}")
    if not bool((dt > 0).all()):
        raise ValueError(f"dt: time spans must be positive; found minimum {dt.min().item():.3g}")
    return dt


def check_mask(x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor | None:
    """Validate ``mask`` ``(batch, time)`` for ``x`` ``(batch, time, ...)``: bool, True on a non-empty prefix.

    Raises:
        ValueError: naming ``mask``, with the expected and found dtype, shape or pattern.
    """
    if mask is None:
        return None
    if mask.dtype != torch.bool or mask.shape != x.shape[:2]:
        raise ValueError(f"mask: expected a bool tensor of shape (batch, time) = {tuple(x.shape[:2])}, "
                         f"found {mask.dtype} {tuple(mask.shape)}")
    gaps = ~mask[:, 0] | (mask[:, 1:] & ~mask[:, :-1]).any(1)
    if bool(gaps.any()):
        raise ValueError(f"mask: expected valid steps as a non-empty prefix of each sample (padding at the end), "
                         f"found samples {gaps.nonzero().flatten().tolist()} without")
    return mask


def pool(y: torch.Tensor, mask: torch.Tensor | None, readout: str) -> torch.Tensor:
    """Readout of core outputs ``y`` ``(batch, time, d)`` over the valid steps of ``mask`` (None: all).

    Returns ``(batch, d)`` for ``"last"`` (output at each sample's last valid step) and ``"mean"`` (mean over
    valid steps), ``y`` itself ``(batch, time, d)`` for ``"steps"``.
    """
    if readout == "steps":
        return y
    if mask is None:
        return y[:, -1] if readout == "last" else y.mean(1)
    lengths = mask.sum(1)
    if readout == "last":
        return y[torch.arange(y.shape[0], device=y.device), lengths - 1]
    return torch.where(mask[..., None], y, 0.0).sum(1) / lengths[:, None].to(y.dtype)


def initial_state(x: torch.Tensor, h0: torch.Tensor | None, units: int) -> torch.Tensor:
    """``h0`` checked against ``(batch, units)``, or zeros of that shape when None."""
    if h0 is None:
        return x.new_zeros(x.shape[0], units)
    if h0.shape != (x.shape[0], units):
        raise ValueError(f"h0: expected shape (batch, units) = {(x.shape[0], units)}, found {tuple(h0.shape)}")
    return h0


def check_step(x: torch.Tensor, dt: torch.Tensor | float) -> torch.Tensor:
    """One step's ``dt`` (scalar or ``(batch,)``) as a positive ``(batch,)`` tensor for ``x`` ``(batch, ...)``."""
    dt = torch.as_tensor(dt, dtype=x.dtype, device=x.device)
    if dt.dim() > 1 or (dt.dim() == 1 and dt.shape[0] != x.shape[0]):
        raise ValueError(f"dt: expected a scalar or shape ({x.shape[0]},), found {tuple(dt.shape)}")
    if not bool((dt > 0).all()):
        raise ValueError(f"dt: time spans must be positive; found minimum {dt.min().item():.3g}")
    return dt.expand(x.shape[0])


def steps_from_timestamps(timestamps: torch.Tensor) -> torch.Tensor:
    """Step sizes ``(batch, time)`` from strictly increasing ``timestamps`` ``(batch, time)``.

    ``dt[:, k] = t[:, k] - t[:, k-1]``; the first step repeats the second (1 for length 1), as
    :func:`pde_data.core.model.time_steps` does without an origin.
    """
    if timestamps.dim() != 2:
        raise ValueError(f"timestamps: expected shape (batch, time), found {tuple(timestamps.shape)}")
    if timestamps.shape[1] == 1:
        return torch.ones_like(timestamps)
    diffs = timestamps.diff(dim=1)
    return torch.cat([diffs[:, :1], diffs], 1)


class SequenceModel(nn.Module):
    """``head(readout(core(encoder(x), dt)))``: ``(batch, time, in_features)`` -> ``(batch, out_features)``.

    Args:
        core: the sequence module (see the module docstring).
        in_features: input features per step. out_features: classes (logits) or regression targets.
        readout: one of :data:`READOUTS`; ``"steps"`` returns ``(batch, time, out_features)``.
        dropout: dropout before the head. core_in / core_out: the core's widths if it lacks the attributes.
        time_feature: append the step size ``dt`` to each step's input features (for cores that take no
            time input, e.g. discrete-time baselines, so that they see the same information).
    """

    def __init__(self, core: nn.Module, in_features: int, out_features: int, *, readout: str = "last",
                 dropout: float = 0.0, core_in: int | None = None, core_out: int | None = None,
                 time_feature: bool = False):
        super().__init__()
        if readout not in READOUTS:
            raise ValueError(f"readout: expected one of {READOUTS}, found {readout!r}")
        width = getattr(core, "d_model", None)
        core_in = core_in if core_in is not None else getattr(core, "in_channels", width)
        core_out = core_out if core_out is not None else getattr(core, "out_channels", width)
        if core_in is None or core_out is None:
            raise ValueError(f"core: expected in_channels/out_channels attributes or core_in/core_out, "
                             f"found {core_in}/{core_out}")
        self.in_features, self.out_features, self.readout = in_features, out_features, readout
        self.time_feature = time_feature
        self.encoder = nn.Linear(in_features + int(time_feature), core_in)
        self.core = core
        self.dropout = nn.Dropout(dropout)
        self.head = nn.Linear(core_out, out_features)
        params = inspect.signature(core.forward).parameters
        self.time_arg = "dt" if "dt" in params else "t" if "t" in params else None
        self.takes_mask = "mask" in params

    def forward(self, x: torch.Tensor, dt: torch.Tensor | None = None, mask: torch.Tensor | None = None, *,
                timestamps: torch.Tensor | None = None) -> torch.Tensor:
        """Logits or predictions ``(batch, out_features)`` (readout ``"steps"``: ``(batch, time, out_features)``).

        Args:
            x: ``(batch, time, in_features)``. dt: step sizes ``(batch, time)`` (> 0), or
            timestamps: ``(batch, time)``, strictly increasing (not both).
            mask: ``(batch, time)`` bool, True on valid steps, a prefix of each sample (None: all valid).
        """
        if timestamps is not None:
            if dt is not None:
                raise ValueError("dt, timestamps: expected at most one of them, found both")
            dt = steps_from_timestamps(timestamps)
        steps = check_sequence(x, dt, self.in_features)
        mask = check_mask(x, mask)
        if self.time_feature:
            x = torch.cat([x, steps[..., None]], -1)
        y = self._core(self.encoder(x), None if dt is None else steps, mask)
        out = self.head(self.dropout(pool(y, mask, self.readout)))
        return out if self.readout != "steps" or mask is None else out.masked_fill(~mask[..., None], 0.0)

    def _core(self, z: torch.Tensor, dt: torch.Tensor | None, mask: torch.Tensor | None) -> torch.Tensor:
        """The core's outputs ``(batch, time, core_out)`` with its time input and (if it takes one) mask."""
        kwargs = {"mask": mask} if self.takes_mask and mask is not None else {}
        if dt is not None and self.time_arg == "dt":
            kwargs["dt"] = dt
        elif dt is not None and self.time_arg == "t":  # timestamps relative to the first step
            kwargs["t"] = dt.cumsum(1) - dt[:, :1]
        elif dt is not None and not self.time_feature:
            raise ValueError(f"dt: the core {type(self.core).__name__} takes no time input, found step sizes")
        y = self.core(z, **kwargs)
        return y[0] if isinstance(y, tuple) else y
