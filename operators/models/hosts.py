"""Host backbones assembled from neuraloperator's ``SpectralConv``: a thin FNO layer stack that can
carry a block (CKB, NAC) in each Fourier layer.

One Fourier layer (Li et al. 2021, Eq. 2, with the hosted block ``B`` on the local branch)::

    v ← σ( K(v) + W(B(v)) )        K = SpectralConv, W = 1×1 convolution, B = block or identity
    v ← σ( K(v) + B(v) )           with ``replace_local``: the block replaces W

With ``B = identity`` this is exactly the FNO-paper layer. The CHONN paper's FNO variant "replaces the
w0 convolutional branch" with the cascaded evolution operator (CHONN, Methods, Navier–Stokes): that is
``replace_local``; the first form keeps W after the block. Because the block is
an identity when absent, a host built with no block and one built with an order-0 block have the
same parameters and compute the same function.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from neuralop.layers.embeddings import GridEmbeddingND
from neuralop.layers.padding import DomainPadding
from neuralop.layers.spectral_convolution import SpectralConv
from torch import nn
from torch.nn import functional as F

from operators.models.fno import check_padding, expand_modes, neuralop_modes
from operators.models.resample import pool2x, upsample2x

__all__ = ["SpectralFNOConfig", "SpectralFNO", "Coarsened", "coarsened", "conv_nd", "BlockFactory"]

#: ``make_block(channels) -> nn.Module`` mapping ``(batch, channels, *spatial)`` to the same shape.
BlockFactory = Callable[[int], nn.Module]


@dataclass(frozen=True)
class SpectralFNOConfig:
    """Host FNO: ``n_modes`` kept per dimension (FNO-paper meaning), ``width`` latent channels, ``padding`` as
    :class:`~operators.models.fno.FNOConfig`'s (the hosted blocks run on the padded field too)."""

    n_modes: int | tuple[int, ...] = 12
    width: int = 20
    n_layers: int = 4
    n_dim: int = 2
    projection_ratio: float = 2.0
    grid: bool = True
    padding: float = 0.0


def conv_nd(n_dim: int, in_channels: int, out_channels: int, kernel_size: int = 1, **kwargs) -> nn.Module:
    """``nn.Conv1d`` / ``nn.Conv2d`` / ``nn.Conv3d`` by ``n_dim``."""
    if n_dim not in (1, 2, 3):
        raise ValueError(f"n_dim: expected 1, 2 or 3 spatial dimensions, found {n_dim}")
    cls = (nn.Conv1d, nn.Conv2d, nn.Conv3d)[n_dim - 1]
    return cls(in_channels, out_channels, kernel_size, **kwargs)


class SpectralFNO(nn.Module):
    """FNO built of ``SpectralConv`` + 1×1 skip layers, optionally hosting a block in each layer.

    Args:
        in_channels, out_channels: channels of the input ``(batch, in_channels, *spatial)`` and the
            output ``(batch, out_channels, *spatial)``.
        config: the host's sizes.
        make_block: builds the hosted block for ``width`` channels; ``None`` = plain FNO.
        replace_local: the block replaces the local 1×1 branch W instead of feeding it (no effect without
            a block: the layer keeps W).
    """

    def __init__(self, in_channels: int, out_channels: int, config: SpectralFNOConfig,
                 make_block: BlockFactory | None = None, *, replace_local: bool = False):
        super().__init__()
        self.config = config
        n_dim, width = config.n_dim, config.width
        modes = neuralop_modes(expand_modes(config.n_modes, n_dim))
        self.grid = GridEmbeddingND(in_channels, dim=n_dim, grid_boundaries=[[0.0, 1.0]] * n_dim) if config.grid else None
        self.lift = conv_nd(n_dim, in_channels + (n_dim if config.grid else 0), width)
        self.padding = DomainPadding(config.padding) if check_padding(config.padding) else None
        self.spectral = nn.ModuleList(SpectralConv(width, width, modes) for _ in range(config.n_layers))
        replaced = replace_local and make_block is not None
        self.skips = nn.ModuleList((nn.Identity() if replaced else conv_nd(n_dim, width, width))
                                   for _ in range(config.n_layers))
        self.blocks = nn.ModuleList(
            (make_block(width) if make_block else nn.Identity()) for _ in range(config.n_layers)
        )
        #: each Fourier layer's output before its activation, as a module (an identity) a conditioned model modulates
        #: (:class:`operators.models.conditioning.Conditioned`); no weights
        self.layer_outputs = nn.ModuleList(nn.Identity() for _ in range(config.n_layers))
        hidden = int(config.projection_ratio * width)
        self.project = nn.Sequential(conv_nd(n_dim, width, hidden), nn.GELU(), conv_nd(n_dim, hidden, out_channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(batch, in_channels, *spatial)`` → ``(batch, out_channels, *spatial)``."""
        _check_input(x, self.config.n_dim, self.lift.in_channels - (self.config.n_dim if self.grid else 0))
        if self.grid is not None:
            x = self.grid(x)
        v = self.lift(x)
        if self.padding is not None:
            v = self.padding.pad(v)
        last = len(self.spectral) - 1
        layers = zip(self.spectral, self.skips, self.blocks, self.layer_outputs)
        for i, (spectral, skip, block, out) in enumerate(layers):
            v = out(spectral(v) + skip(block(v)))
            if i < last:
                v = F.gelu(v)
        if self.padding is not None:
            v = self.padding.unpad(v)
        return self.project(v)


class Coarsened(nn.Module):
    """Run a residual block on a grid coarsened ``factor`` times: ``v + up(B(c) − c)``, ``c = pool(v)``.

    The CHONN paper's FNO variant for shallow water evolves its cascaded branch at "downsampling
    factor 2" (CHONN, Methods); a scan over the flattened grid costs (more than) its length, so this
    is what keeps the CKB affordable at 64² and above. ``pool`` is area averaging, ``up`` is
    (bi)linear interpolation back to the input size; any grid size works.
    """

    def __init__(self, block: nn.Module, factor: int):
        super().__init__()
        if factor < 1:
            raise ValueError(f"downsample: expected a positive integer factor, found {factor}")
        self.block, self.factor = block, factor

    def forward(self, v: torch.Tensor) -> torch.Tensor:
        """``(batch, channels, *spatial)`` → the same shape."""
        if self.factor == 1:
            return self.block(v)
        size = tuple(max(1, n // self.factor) for n in v.shape[2:])
        halves = all(2 * c == n for c, n in zip(size, v.shape[2:]))  # factor 2, even sizes: exact
        if halves:                                                       # stencils, cheaper on CPU
            coarse = pool2x(v)
        else:
            coarse = F.adaptive_avg_pool2d(v, size) if v.ndim == 4 else F.adaptive_avg_pool1d(v, size)
        delta = self.block(coarse) - coarse
        if halves:
            return upsample2x(delta, add_to=v)  # v + up(delta) in one pass
        mode = "bilinear" if v.ndim == 4 else "linear"
        return v + F.interpolate(delta, size=v.shape[2:], mode=mode, align_corners=False)


def coarsened(make_block: BlockFactory | None, factor: int) -> BlockFactory | None:
    """``make_block`` whose blocks run on a grid coarsened ``factor`` times (unchanged for factor 1)."""
    if make_block is None or factor == 1:
        return make_block
    return lambda channels: Coarsened(make_block(channels), factor)


def _check_input(x: torch.Tensor, n_dim: int, channels: int) -> None:
    if x.ndim != n_dim + 2 or x.shape[1] != channels:
        raise ValueError(
            f"input: expected shape (batch, {channels}, {', '.join(['n'] * n_dim)}), found {tuple(x.shape)}"
        )
