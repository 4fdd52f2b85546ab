"""NAC-hosting backbones: the FNO and U-Net hosts with a Neuronal Attention Circuit (000) over the
flattened spatial tokens, in the same places a CKB goes (see :mod:`operators.models.chonn`), so the
two blocks can be compared inside one operator-learning backbone.
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

__all__ = ["NACFNOConfig", "NACUNetConfig", "SpatialNAC", "build_nac_fno", "build_nac_unet"]


@dataclass(frozen=True)
class NACFNOConfig(SpectralFNOConfig):
    """The host FNO's sizes plus the NAC's ``num_heads`` (must divide ``width``), ``topk`` and the
    grid coarsening ``downsample`` it runs at (as for ``chonn_fno``)."""

    num_heads: int = 2
    topk: int = 8
    downsample: int = 2


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
        cls = getattr(circuitop, "NeuronalAttentionCircuit", None)
        if cls is None:
            raise NotImplementedError("circuitop.NeuronalAttentionCircuit is not available in circuitop")
        if channels % num_heads:
            raise ValueError(f"num_heads: expected a divisor of the {channels} channels, found {num_heads}")
        self.norm = nn.LayerNorm(channels)
        self.nac = cls(channels, num_heads, topk=topk)

    def forward(self, v: torch.Tensor) -> torch.Tensor:
        tokens = v.flatten(2).transpose(1, 2)
        out = self.nac(self.norm(tokens))
        if isinstance(out, tuple):
            out = out[0]
        return v + out.transpose(1, 2).reshape(v.shape)


def _factory(config):
    return partial(SpatialNAC, num_heads=config.num_heads, topk=config.topk)


def build_nac_fno(in_channels: int, out_channels: int, config: NACFNOConfig) -> nn.Module:
    """FNO host with a spatial NAC on each Fourier layer's local branch."""
    return SpectralFNO(in_channels, out_channels, host_config(config, SpectralFNOConfig),
                       coarsened(_factory(config), config.downsample))


def build_nac_unet(in_channels: int, out_channels: int, config: NACUNetConfig) -> nn.Module:
    """U-Net with spatial NACs in the deepest encoder and decoder stages."""
    return UNet(in_channels, out_channels, host_config(config, UNetConfig), _factory(config))
