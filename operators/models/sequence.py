"""Sequence models for the registry: continuous-time cores and two discrete-time baselines, each inside
:class:`circuitop.SequenceModel` (linear encoder -> core -> readout -> linear head).

Every builder returns a module with ``forward(x, dt=None, mask=None)``: x ``(batch, time, in_channels)``,
dt ``(batch, time)`` step sizes > 0 (padded steps: any positive value), mask ``(batch, time)`` bool, True on
each sample's valid prefix (None: all valid). It returns ``(batch, out_channels)`` (logits of a
classification, or regression targets), or ``(batch, time, out_channels)`` for ``readout="steps"``.

How each core sees time and padding:

- ``ltc``, ``cfc``, ``pdna``, ``ckb_seq``: the step sizes ``dt`` drive the continuous-time dynamics; the
  cores are causal, so outputs at valid steps never see the padding and the readout picks valid steps.
- ``nac``: timestamps ``t = cumsum(dt) - dt[:, 0]`` (the pair times of NAC Section 2.2) and the mask as a
  key-padding mask (padded keys leave the softmax of NAC Eq. 19).
- ``gru``, ``attention``: baselines without a time input get ``dt`` as one more input feature
  (``SequenceModel(time_feature=True)``), so every model sees the same information; ``attention`` uses the
  mask as its key-padding mask, ``gru`` is causal. Neither has a positional encoding, like ``nac``.

Example:
    >>> model = operators.build("cfc", 3, 10, units=32, readout="mean")
    >>> logits = model(torch.randn(4, 20, 3), dt=torch.rand(4, 20) + 0.1,
    ...                mask=torch.arange(20) < torch.tensor([[20], [15], [9], [4]]))   # (4, 10)
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from circuitop import LTC, PDNA, CascadedKirchhoffBlock, CfC, NeuronalAttentionCircuit, SequenceModel

__all__ = ["LTCConfig", "CfCConfig", "PDNAConfig", "NACSequenceConfig", "CKBSequenceConfig", "GRUConfig",
           "AttentionConfig", "KirchhoffStack", "SelfAttention", "build_ltc", "build_cfc", "build_pdna",
           "build_nac", "build_ckb_seq", "build_gru", "build_attention"]


@dataclass(frozen=True)
class _Head:
    """Fields every sequence model shares: ``readout`` (``"last"``, ``"mean"`` or ``"steps"``, see
    :data:`circuitop.sequence.READOUTS`) and the dropout before the head."""

    readout: str = "last"
    dropout: float = 0.0


@dataclass(frozen=True)
class LTCConfig(_Head):
    """LTC with a fully connected wiring of ``units`` neurons, all of them outputs (LTC, Eq. 3)."""

    units: int = 32
    ode_unfolds: int = 6


@dataclass(frozen=True)
class CfCConfig(_Head):
    """CfC of ``units`` hidden states; ``mode`` ``"default"``, ``"no_gate"`` or ``"pure"``."""

    units: int = 32
    mode: str = "default"
    backbone_units: int = 64
    backbone_layers: int = 1


@dataclass(frozen=True)
class PDNAConfig(CfCConfig):
    """PDNA ``variant`` ``"A"``..``"E"`` (PDNA Table 1) on a CfC; ``seed`` seeds variant B's noise."""

    variant: str = "E"
    feedback: bool = False
    seed: int = 0


@dataclass(frozen=True)
class NACSequenceConfig(_Head):
    """One NAC layer of width ``d_model``; ``topk`` None attends to all valid keys (NAC-PW), an integer
    to the block-centroid Top-K (Algorithm 2); ``mode`` ``"exact"``, ``"euler"`` or ``"steady"``.

    Padded keys are never selected, but Top-K's blocks (⌊√T⌋ keys) follow the padded length T: a padded
    sample equals the sample alone exactly while the ⌈4·topk⌉ candidate blocks cover every block (T up to
    about (4·topk)², e.g. 1024 for topk = 8), and up to the selection's approximation beyond that."""

    d_model: int = 32
    num_heads: int = 4
    topk: int | None = None
    mode: str = "exact"
    sparsity: float = 0.5
    euler_steps: int = 5
    delta_t: float = 0.5


@dataclass(frozen=True)
class CKBSequenceConfig(_Head):
    """``n_layers`` Cascaded Kirchhoff Blocks of ``order`` cells each (CHONN, Eqs. 29–38)."""

    d_model: int = 32
    order: int = 2
    d_state: int = 16
    expand: int = 2
    conv_kernel: int = 4
    n_layers: int = 1


@dataclass(frozen=True)
class GRUConfig(_Head):
    """``torch.nn.GRU`` baseline: ``n_layers`` layers of ``units`` states; ``dt`` is an input feature."""

    units: int = 32
    n_layers: int = 1


@dataclass(frozen=True)
class AttentionConfig(_Head):
    """``torch.nn.MultiheadAttention`` baseline of width ``d_model``; ``dt`` is an input feature."""

    d_model: int = 32
    num_heads: int = 4


class KirchhoffStack(nn.Module):
    """``n_layers`` residual :class:`circuitop.CascadedKirchhoffBlock` in series, then a LayerNorm, on
    ``(batch, time, d_model)``; every block gets the step sizes ``dt`` ``(batch, time)``. Causal."""

    def __init__(self, d_model: int, n_layers: int, **block):
        super().__init__()
        if n_layers < 1:
            raise ValueError(f"n_layers: expected >= 1, found {n_layers}")
        self.d_model = d_model
        self.blocks = nn.ModuleList(CascadedKirchhoffBlock(d_model, **block) for _ in range(n_layers))
        self.norm = nn.LayerNorm(d_model)

    def forward(self, x: torch.Tensor, dt: torch.Tensor | None = None) -> torch.Tensor:
        """``(batch, time, d_model)`` -> the same shape."""
        for block in self.blocks:
            x = block(x, dt)
        return self.norm(x)


class SelfAttention(nn.Module):
    """Multi-head self-attention (``torch.nn.MultiheadAttention``) on ``(batch, time, d_model)`` with a
    key-padding mask: padded keys get no weight, so valid queries never see the padding."""

    def __init__(self, d_model: int, num_heads: int):
        super().__init__()
        self.d_model = d_model
        self.attention = nn.MultiheadAttention(d_model, num_heads, batch_first=True)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """x ``(batch, time, d_model)``; mask ``(batch, time)`` bool, True on valid keys -> ``(batch, time, d_model)``."""
        padding = None if mask is None else ~mask
        return self.attention(x, x, x, key_padding_mask=padding, need_weights=False)[0]


def _model(core: nn.Module, in_channels: int, out_channels: int, config: _Head, **kwargs) -> SequenceModel:
    return SequenceModel(core, in_channels, out_channels, readout=config.readout, dropout=config.dropout, **kwargs)


def build_ltc(in_channels: int, out_channels: int, config: LTCConfig) -> SequenceModel:
    """LTC sequence model (see :class:`LTCConfig`)."""
    core = LTC(config.units, config.units, ode_unfolds=config.ode_unfolds)
    return _model(core, in_channels, out_channels, config)


def _cfc_kwargs(config: CfCConfig) -> dict:
    return dict(mode=config.mode, backbone_units=config.backbone_units, backbone_layers=config.backbone_layers)


def build_cfc(in_channels: int, out_channels: int, config: CfCConfig) -> SequenceModel:
    """CfC sequence model (see :class:`CfCConfig`)."""
    return _model(CfC(config.units, config.units, **_cfc_kwargs(config)), in_channels, out_channels, config)


def build_pdna(in_channels: int, out_channels: int, config: PDNAConfig) -> SequenceModel:
    """PDNA sequence model (see :class:`PDNAConfig`)."""
    core = PDNA(config.units, config.units, variant=config.variant, feedback=config.feedback, seed=config.seed,
                **_cfc_kwargs(config))
    return _model(core, in_channels, out_channels, config)


def build_nac(in_channels: int, out_channels: int, config: NACSequenceConfig) -> SequenceModel:
    """NAC sequence model (see :class:`NACSequenceConfig`); the mask is NAC's key mask."""
    core = NeuronalAttentionCircuit(config.d_model, config.num_heads, topk=config.topk, mode=config.mode,
                                    sparsity=config.sparsity, euler_steps=config.euler_steps,
                                    delta_t=config.delta_t)
    return _model(core, in_channels, out_channels, config)


def build_ckb_seq(in_channels: int, out_channels: int, config: CKBSequenceConfig) -> SequenceModel:
    """Cascaded Kirchhoff Block sequence model (see :class:`CKBSequenceConfig`)."""
    core = KirchhoffStack(config.d_model, config.n_layers, order=config.order, d_state=config.d_state,
                          expand=config.expand, conv_kernel=config.conv_kernel)
    return _model(core, in_channels, out_channels, config)


def build_gru(in_channels: int, out_channels: int, config: GRUConfig) -> SequenceModel:
    """GRU baseline (see :class:`GRUConfig`): the inputs are ``[x, dt]``."""
    core = nn.GRU(config.units, config.units, num_layers=config.n_layers, batch_first=True)
    return _model(core, in_channels, out_channels, config, core_in=config.units, core_out=config.units,
                  time_feature=True)


def build_attention(in_channels: int, out_channels: int, config: AttentionConfig) -> SequenceModel:
    """Self-attention baseline (see :class:`AttentionConfig`): the inputs are ``[x, dt]``."""
    return _model(SelfAttention(config.d_model, config.num_heads), in_channels, out_channels, config,
                  time_feature=True)
