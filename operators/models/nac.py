"""NAC-hosting backbones: the FNO and U-Net hosts with a Neuronal Attention Circuit (NAC), so that NAC
and CKB can be compared inside one operator-learning backbone.

- ``tokens="space"`` (default): a NAC over the flattened spatial tokens in the same places a CKB goes
  (see :mod:`operators.models.chonn`).
- ``tokens="time"`` (``nac_fno``, for time-dependent inputs of ``frames`` stacked frames, as the
  autoregressive trainer feeds them): a NAC over the frames at every grid point encodes the history
  into the host's input; the Fourier layers are then the plain host's.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import circuitop
import torch
from torch import nn

from operators.models.chonn import host_config
from operators.models.hosts import SpectralFNO, SpectralFNOConfig, coarsened
from operators.models.unet import UNet, UNetConfig

__all__ = ["NACFNOConfig", "NACUNetConfig", "SpatialNAC", "TemporalNAC", "build_nac_fno", "build_nac_unet"]


@dataclass(frozen=True)
class NACFNOConfig(SpectralFNOConfig):
    """The host FNO's sizes plus the NAC's ``num_heads`` (must divide ``width``), ``topk``, the grid
    coarsening ``downsample`` it runs at (as for ``chonn_fno``), and its ``tokens``: ``"space"`` (grid
    points, in each Fourier layer) or ``"time"`` (the ``frames`` stacked input frames, see
    :class:`TemporalNAC`; the trainer fills ``frames`` from ``--window``)."""

    num_heads: int = 2
    topk: int = 8
    downsample: int = 2
    tokens: str = "space"
    frames: int = 1


@dataclass(frozen=True)
class NACUNetConfig(UNetConfig):
    """The host U-Net's sizes plus the NAC's ``num_heads`` and ``topk``."""

    num_heads: int = 2
    topk: int = 8


class SpatialNAC(nn.Module):
    """``v + NAC(LayerNorm(tokens))`` on a field ``(batch, channels, *spatial)``, tokens = grid points.

    The field is flattened to ``(batch, x·y, channels)`` for the NAC and reshaped back.
    """

    def __init__(self, channels: int, *, num_heads: int, topk: int):
        super().__init__()
        if channels % num_heads:
            raise ValueError(f"num_heads: expected a divisor of the {channels} channels, found {num_heads}")
        self.norm = nn.LayerNorm(channels)
        self.nac = circuitop.NeuronalAttentionCircuit(channels, num_heads, topk=topk)

    def forward(self, v: torch.Tensor) -> torch.Tensor:
        tokens = v.flatten(2).transpose(1, 2)
        return v + self.nac(self.norm(tokens)).transpose(1, 2).reshape(v.shape)


class TemporalNAC(nn.Module):
    """History encoder: at every grid point, the latest frame attends over all ``frames`` frames.

    ``(batch, frames·channels, *spatial)`` (frames oldest first, as :func:`operators.rollout.step`
    stacks them) → ``(batch, width, *spatial)``. Each frame's ``channels`` values at a grid point are
    lifted to a ``width``-token (shared linear map plus a learned per-frame embedding); the latest
    token queries all tokens through a NAC whose timestamps are the frame indices (NAC, Eq. 19 with
    t_sample = frame index), and the result is added to the latest token. Grid points never mix here.
    """

    def __init__(self, channels: int, width: int, *, frames: int, num_heads: int, topk: int | None):
        super().__init__()
        if frames < 1:
            raise ValueError(f"frames: expected a positive number of stacked input frames, found {frames}")
        if width % num_heads:
            raise ValueError(f"num_heads: expected a divisor of the width {width}, found {num_heads}")
        self.frames, self.channels = frames, channels
        self.lift = nn.Linear(channels, width)
        self.frame_embedding = nn.Parameter(torch.zeros(frames, width))
        self.norm = nn.LayerNorm(width)
        topk = None if topk is None or topk >= frames else topk
        self.nac = circuitop.NeuronalAttentionCircuit(width, num_heads, topk=topk)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, stacked, *spatial = x.shape
        if stacked != self.frames * self.channels:
            raise ValueError(f"input: expected {self.frames} frames x {self.channels} channels = "
                             f"{self.frames * self.channels} channels, found {stacked}")
        # (batch, frames, channels, *spatial) -> (batch·points, frames, channels)
        seq = x.reshape(batch, self.frames, self.channels, -1).permute(0, 3, 1, 2).reshape(-1, self.frames, self.channels)
        tokens = self.lift(seq) + self.frame_embedding
        keys = self.norm(tokens)
        stamps = torch.arange(self.frames, dtype=x.dtype, device=x.device)
        latest = self.nac.forward_cross(keys[:, -1:], keys, keys, t=stamps[-1:].expand(keys.shape[0], 1))
        out = tokens[:, -1] + latest[:, 0]  # (batch·points, width)
        return out.reshape(batch, -1, out.shape[-1]).transpose(1, 2).reshape(batch, -1, *spatial)


def _factory(config):
    return partial(SpatialNAC, num_heads=config.num_heads, topk=config.topk)


def build_nac_fno(in_channels: int, out_channels: int, config: NACFNOConfig) -> nn.Module:
    """FNO host with a spatial NAC on each Fourier layer's local branch (``tokens="space"``), or a
    :class:`TemporalNAC` history encoder in front of the plain host (``tokens="time"``)."""
    host = host_config(config, SpectralFNOConfig)
    if config.tokens == "space":
        return SpectralFNO(in_channels, out_channels, host, coarsened(_factory(config), config.downsample))
    if config.tokens != "time":
        raise ValueError(f"tokens: expected 'space' or 'time', found {config.tokens!r}")
    if in_channels % config.frames:
        raise ValueError(f"frames: expected a divisor of the {in_channels} input channels "
                         f"(frames x channels per frame), found {config.frames}")
    encoder = TemporalNAC(in_channels // config.frames, config.width, frames=config.frames,
                          num_heads=config.num_heads, topk=config.topk)
    return nn.Sequential(encoder, SpectralFNO(config.width, out_channels, host))


def build_nac_unet(in_channels: int, out_channels: int, config: NACUNetConfig) -> nn.Module:
    """U-Net with spatial NACs in the deepest encoder and decoder stages."""
    return UNet(in_channels, out_channels, host_config(config, UNetConfig), _factory(config))
