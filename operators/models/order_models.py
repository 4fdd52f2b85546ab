"""Models of the 1D order benchmark (CHONN, Eqs. 39-47, Methods): one block of ``n`` serial KNCs
against ``n`` stacked first-order blocks, and the composite ``k × m`` stacks.

All share one shape: lift (1×1 convolution) → ``n_blocks`` CKBs of ``order`` serial KNCs each on
``(batch, d_model, length)`` → project. The paper's chain uses expansion ratio 16 and ``d_state = 8``.

The targets ``(I − τ²∂ss)^(−n) x`` are symmetric (non-causal) smoothing operators on a periodic
domain, which a one-way causal scan cannot represent: by default (``bidirectional=True``) every block
also scans the sequence backwards with the same weights and averages the two
(:class:`circuitop.CascadedKirchhoffBlock1d`); ``bidirectional=False`` gives the causal block.
"""

from __future__ import annotations

from dataclasses import dataclass

import circuitop
import torch
from torch import nn

__all__ = ["CKBChainConfig", "DepthStackConfig", "CKBStackConfig", "CascadeStack",
           "build_ckb_chain", "build_depth_stack", "build_ckb_stack"]


@dataclass(frozen=True)
class _BlockSizes:
    """Sizes shared by every order-benchmark model (the paper: expansion ratio 16, ``d_state = 8``)."""

    d_model: int = 16
    d_state: int = 8
    expand: int = 16
    bidirectional: bool = True


@dataclass(frozen=True)
class CKBChainConfig(_BlockSizes):
    """One CKB with ``order`` serial KNCs (the matched-order CHONN model)."""

    order: int = 2


@dataclass(frozen=True)
class DepthStackConfig(_BlockSizes):
    """``depth`` stacked first-order CKBs (the depth-stacked baseline)."""

    depth: int = 2


@dataclass(frozen=True)
class CKBStackConfig(_BlockSizes):
    """``n_blocks`` stacked CKBs of ``order`` serial KNCs each (the paper's ``order × n_blocks``)."""

    order: int = 2
    n_blocks: int = 2


class CascadeStack(nn.Module):
    """Lift → ``n_blocks`` × CKB(``order``) → project, on ``(batch, channels, length)``."""

    def __init__(self, in_channels: int, out_channels: int, *, order: int, n_blocks: int,
                 d_model: int, d_state: int, expand: int, bidirectional: bool = True):
        super().__init__()
        if order < 1 or n_blocks < 1:
            raise ValueError(f"expected order >= 1 and n_blocks >= 1, found order={order}, n_blocks={n_blocks}")
        self.in_channels = in_channels
        self.lift = nn.Conv1d(in_channels, d_model, 1)
        self.blocks = nn.ModuleList(
            circuitop.CascadedKirchhoffBlock1d(d_model, order=order, d_state=d_state, expand=expand,
                                               bidirectional=bidirectional)
            for _ in range(n_blocks)
        )
        self.project = nn.Conv1d(d_model, out_channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(batch, in_channels, length)`` → ``(batch, out_channels, length)``."""
        if x.ndim != 3 or x.shape[1] != self.in_channels:
            raise ValueError(f"input: expected shape (batch, {self.in_channels}, length), found {tuple(x.shape)}")
        h = self.lift(x)
        for block in self.blocks:
            h = block(h)
        return self.project(h)


def _kwargs(c) -> dict:
    return {"d_model": c.d_model, "d_state": c.d_state, "expand": c.expand, "bidirectional": c.bidirectional}


def build_ckb_chain(in_channels: int, out_channels: int, config: CKBChainConfig) -> nn.Module:
    return CascadeStack(in_channels, out_channels, order=config.order, n_blocks=1, **_kwargs(config))


def build_depth_stack(in_channels: int, out_channels: int, config: DepthStackConfig) -> nn.Module:
    return CascadeStack(in_channels, out_channels, order=1, n_blocks=config.depth, **_kwargs(config))


def build_ckb_stack(in_channels: int, out_channels: int, config: CKBStackConfig) -> nn.Module:
    return CascadeStack(in_channels, out_channels, order=config.order, n_blocks=config.n_blocks, **_kwargs(config))
