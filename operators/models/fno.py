"""The FNO baseline: neuraloperator's ``FNO`` used as it is, behind a small frozen config.

Mode convention. In the FNO paper (Li et al. 2021) ``modes = k`` keeps the wavenumbers
``-k..k-1`` along every leading axis and ``0..k-1`` along the last (real-FFT) axis. neuraloperator
2.0.0 counts differently: its ``n_modes = M`` keeps ``M`` centred modes on leading axes and
``M // 2 + 1`` on the last axis (``SpectralConv.n_modes`` setter). :func:`neuralop_modes` converts,
so ``FNOConfig(n_modes=12)`` keeps exactly the paper's 12 modes per dimension.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from neuralop.layers.spectral_convolution import SpectralConv
from neuralop.models import FNO
from torch import nn

from pde_data.core.params import ParameterError

__all__ = ["FNOConfig", "build_fno", "neuralop_modes", "expand_modes", "check_padding", "spectral_in_float32"]


@dataclass(frozen=True)
class FNOConfig:
    """Baseline FNO: ``n_modes`` modes kept per dimension (FNO-paper meaning), ``width`` channels; ``padding``: the
    fraction of each axis zero-padded on both sides of the lifted field before the Fourier layers and cut off before
    the projection (neuraloperator's ``domain_padding``; 0: none), so a grid that is not periodic is not wrapped
    edge onto edge by the FFT (the FNO paper pads its Darcy grids)."""

    n_modes: int | tuple[int, ...] = 12
    width: int = 20
    n_layers: int = 4
    n_dim: int = 2
    lifting_ratio: float = 2.0
    projection_ratio: float = 2.0
    padding: float = 0.0


def expand_modes(n_modes: int | tuple[int, ...], n_dim: int) -> tuple[int, ...]:
    """``12`` → ``(12, 12)`` for 2D; a tuple must have ``n_dim`` entries."""
    modes = (int(n_modes),) * n_dim if isinstance(n_modes, int) else tuple(int(m) for m in n_modes)
    if len(modes) != n_dim or any(m < 1 for m in modes):
        raise ValueError(f"n_modes: expected {n_dim} positive integers, found {n_modes!r}")
    return modes


def neuralop_modes(modes: tuple[int, ...]) -> tuple[int, ...]:
    """FNO-paper modes per dimension → the ``n_modes`` neuraloperator 2.0.0 expects.

    Leading axes: ``2k`` centred entries = wavenumbers ``-k..k-1``. Last axis: neuraloperator keeps
    ``M // 2 + 1`` real-FFT entries, so ``M = 2(k - 1)`` keeps ``0..k-1``.
    """
    return tuple(2 * k for k in modes[:-1]) + (2 * (modes[-1] - 1),)


def build_fno(in_channels: int, out_channels: int, config: FNOConfig) -> nn.Module:
    """neuraloperator's FNO on ``(batch, in_channels, *spatial)`` → ``(batch, out_channels, *spatial)``.

    Example:
        >>> model = build_fno(1, 1, FNOConfig(n_modes=4, width=8))
        >>> model(torch.zeros(2, 1, 16, 16)).shape
        torch.Size([2, 1, 16, 16])
    """
    modes = expand_modes(config.n_modes, config.n_dim)
    return FNO(
        n_modes=neuralop_modes(modes),
        in_channels=in_channels,
        out_channels=out_channels,
        hidden_channels=config.width,
        n_layers=config.n_layers,
        lifting_channel_ratio=config.lifting_ratio,
        projection_channel_ratio=config.projection_ratio,
        domain_padding=check_padding(config.padding) or None,
    )


def check_padding(padding: float, name: str = "padding") -> float:
    """``padding`` when it is a fraction in [0, 1).

    Raises:
        ParameterError: otherwise, naming ``name``.
    """
    if not 0 <= padding < 1:
        raise ParameterError(name, "a fraction of each axis in [0, 1)", repr(padding))
    return padding


def spectral_in_float32(model: nn.Module) -> nn.Module:
    """``model`` with every neuraloperator ``SpectralConv`` in it fed float32 (a forward pre-hook): under
    bfloat16 autocast (``train --amp``) a layer's input may be bfloat16, which torch.fft does not take on CUDA
    (cuFFT has no bfloat16). The FFTs and the complex mode contraction, which autocast leaves alone, then run in
    float32, and the layers around them in bfloat16. Weights and state dict are unchanged."""
    for module in model.modules():
        if isinstance(module, SpectralConv):
            module.register_forward_pre_hook(_float32_input)
    return model


def _float32_input(module: nn.Module, args: tuple) -> tuple | None:
    x, *rest = args
    return (x.float(), *rest) if x.dtype in (torch.float16, torch.bfloat16) else None
