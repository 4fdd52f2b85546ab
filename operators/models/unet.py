"""A U-Net neural-operator backbone (Ronneberger et al. 2015, in the CNO benchmark's form) that can
host a block (CKB, NAC) in its deepest encoder and decoder stages.

Sizes follow the CHONN paper's Darcy/Poisson settings (CHONN, Methods): ``n_layers`` down-sampling
stages, ``n_res`` residual blocks per stage, ``n_res_neck`` in the bottleneck, ``channel_multiplier``
channels at the finest stage (doubled at each coarser one) and ``kernel_size`` convolutions. Residual
blocks are group-normalized, as the U-Nets of PDEArena and CNO are: without normalization the paper-size
model (8.4 M parameters) diverged on Darcy 16² at lr 3e-3. With no block the hosted positions are
identities, so ``make_block=None`` is the plain U-Net exactly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from operators.models.hosts import BlockFactory, conv_nd

__all__ = ["UNetConfig", "UNet"]


@dataclass(frozen=True)
class UNetConfig:
    """U-Net sizes; the paper's Darcy model: ``n_layers=3, n_res=4, n_res_neck=4, channel_multiplier=32``.
    ``norm``: group-normalized residual blocks (default); ``False`` is the earlier U-Net without them."""

    n_layers: int = 3
    n_res: int = 4
    n_res_neck: int = 4
    channel_multiplier: int = 32
    kernel_size: int = 3
    n_dim: int = 2
    norm: bool = True


def _groups(channels: int) -> int:
    """Groups of the group normalization: 8 (as PDEArena's and CNO's U-Nets), fewer for narrow layers."""
    return math.gcd(channels, 8)


class _ResBlock(nn.Module):
    """``v + conv(σ(GN(conv(σ(GN(v))))))`` at fixed channels (pre-activation, group-normalized); GroupNorm
    keeps no batch statistics, so it is safe under DDP and independent of the batch size."""

    def __init__(self, n_dim: int, channels: int, kernel_size: int, norm: bool = True):
        super().__init__()
        pad = kernel_size // 2
        self.norm1 = nn.GroupNorm(_groups(channels), channels) if norm else nn.Identity()
        self.conv1 = conv_nd(n_dim, channels, channels, kernel_size, padding=pad)
        self.norm2 = nn.GroupNorm(_groups(channels), channels) if norm else nn.Identity()
        self.conv2 = conv_nd(n_dim, channels, channels, kernel_size, padding=pad)

    def forward(self, v: torch.Tensor) -> torch.Tensor:
        return v + self.conv2(F.gelu(self.norm2(self.conv1(F.gelu(self.norm1(v))))))


def _res_stack(n_dim: int, channels: int, kernel_size: int, n: int, norm: bool) -> nn.Sequential:
    return nn.Sequential(*(_ResBlock(n_dim, channels, kernel_size, norm) for _ in range(n)))


class UNet(nn.Module):
    """U-Net on ``(batch, in_channels, *spatial)`` → ``(batch, out_channels, *spatial)``.

    Any grid size works: decoder stages up-sample to the size of their skip connection.

    Args:
        config: the sizes.
        make_block: builds the block hosted in the deepest encoder and decoder stages for the
            channels there; ``None`` = plain U-Net.
    """

    def __init__(self, in_channels: int, out_channels: int, config: UNetConfig,
                 make_block: BlockFactory | None = None):
        super().__init__()
        if config.n_layers < 1 or config.kernel_size % 2 == 0:
            raise ValueError(f"UNetConfig: expected n_layers >= 1 and an odd kernel_size, found {config}")
        self.config = config
        d, k, L = config.n_dim, config.kernel_size, config.n_layers
        widths = [config.channel_multiplier * 2**i for i in range(L + 1)]
        self.in_channels = in_channels
        self.lift = conv_nd(d, in_channels, widths[0], k, padding=k // 2)
        self.encoders = nn.ModuleList(_res_stack(d, widths[i], k, config.n_res, config.norm) for i in range(L))
        self.downs = nn.ModuleList(conv_nd(d, widths[i], widths[i + 1], 2, stride=2) for i in range(L))
        self.neck = _res_stack(d, widths[L], k, config.n_res_neck, config.norm)
        self.ups = nn.ModuleList(conv_nd(d, widths[i + 1], widths[i], k, padding=k // 2) for i in range(L))
        self.fuses = nn.ModuleList(conv_nd(d, 2 * widths[i], widths[i], 1) for i in range(L))
        self.decoders = nn.ModuleList(_res_stack(d, widths[i], k, config.n_res, config.norm) for i in range(L))
        self.enc_block = make_block(widths[L - 1]) if make_block else nn.Identity()
        self.dec_block = make_block(widths[L - 1]) if make_block else nn.Identity()
        self.project = conv_nd(d, widths[0], out_channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(batch, in_channels, *spatial)`` → ``(batch, out_channels, *spatial)``."""
        d, L = self.config.n_dim, self.config.n_layers
        if x.ndim != d + 2 or x.shape[1] != self.in_channels:
            raise ValueError(f"input: expected shape (batch, {self.in_channels}, {d} spatial axes), found {tuple(x.shape)}")
        v = self.lift(x)
        skips = []
        for i in range(L):
            v = self.encoders[i](v)
            if i == L - 1:
                v = self.enc_block(v)
            skips.append(v)
            v = self.downs[i](F.gelu(v))
        v = self.neck(v)
        for i in reversed(range(L)):
            skip = skips[i]
            v = self.ups[i](F.interpolate(v, size=skip.shape[2:], mode="nearest"))
            v = self.decoders[i](self.fuses[i](torch.cat([F.gelu(v), skip], dim=1)))
            if i == L - 1:
                v = self.dec_block(v)
        return self.project(F.gelu(v))
