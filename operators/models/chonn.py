"""CHONN backbones: the FNO and U-Net hosts carrying Cascaded Kirchhoff Blocks (CHONN, Fig. 2d-e).

``chonn_fno`` puts a CKB of the chosen ``order`` on the local (``w0``) branch of every Fourier layer:
by default in place of its 1×1 convolution (``placement="replace"``, the paper's form: the CHONN variant
"replaces the w0 convolutional branch", CHONN Methods, Navier–Stokes), or before it (``"wrap"``);
``chonn_unet`` puts one in the deepest encoder and the deepest decoder stage. ``order = 0`` hosts no
block, which is the host architecture exactly (same parameters, same output) under either placement:
the 1×1 branch is replaced only by a block.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from functools import partial

import circuitop
from torch import nn

from operators.models.hosts import SpectralFNO, SpectralFNOConfig, coarsened
from operators.models.unet import UNet, UNetConfig

__all__ = ["PLACEMENTS", "ChonnFNOConfig", "ChonnUNetConfig", "build_chonn_fno", "build_chonn_unet", "ckb_factory", "host_config"]

_CKB_CLASSES = {1: circuitop.CascadedKirchhoffBlock1d, 2: circuitop.CascadedKirchhoffBlock2d}


#: where the CKB sits in a Fourier layer: ``"replace"`` σ(K v + CKB(v)) (the paper's, the default),
#: ``"wrap"`` σ(K v + W(CKB(v)))
PLACEMENTS = ("replace", "wrap")


@dataclass(frozen=True)
class ChonnFNOConfig(SpectralFNOConfig):
    """The host FNO's sizes plus the CKB's: ``order`` cascaded KNCs (0 = no block), ``d_state``, the
    grid coarsening ``downsample`` it runs at (default 1, the full grid; the paper coarsens 2× for
    shallow water only, CHONN Methods), and its ``placement`` (:data:`PLACEMENTS`; default the paper's
    ``"replace"``, the w0 branch replaced)."""

    order: int = 2
    d_state: int = 16
    expand: int = 2
    downsample: int = 1
    placement: str = "replace"


@dataclass(frozen=True)
class ChonnUNetConfig(UNetConfig):
    """The host U-Net's sizes plus the CKB's: ``order`` cascaded KNCs (0 = no block), ``d_state``."""

    order: int = 2
    d_state: int = 16
    expand: int = 2


def host_config(config, host_cls):
    """The host's own config (the fields of ``host_cls``) taken from a derived config."""
    return host_cls(**{f.name: getattr(config, f.name) for f in fields(host_cls)})


def _ckb(channels: int, *, n_dim: int, order: int, d_state: int, expand: int) -> nn.Module:
    if n_dim not in _CKB_CLASSES:
        raise NotImplementedError(f"a {n_dim}D Cascaded Kirchhoff Block (none for this n_dim) is not available "
                                  "in circuitop")
    return _CKB_CLASSES[n_dim](channels, order=order, d_state=d_state, expand=expand)


def ckb_factory(config, n_dim: int):
    """``channels -> CKB`` for a config with ``order``, ``d_state``, ``expand``; ``None`` at order 0."""
    if config.order < 0:
        raise ValueError(f"order: expected a non-negative number of cascaded KNCs, found {config.order}")
    if config.order == 0:
        return None
    return partial(_ckb, n_dim=n_dim, order=config.order, d_state=config.d_state, expand=config.expand)


def build_chonn_fno(in_channels: int, out_channels: int, config: ChonnFNOConfig) -> nn.Module:
    """FNO host with a CKB on each Fourier layer's local branch; ``(batch, channels, *spatial)``."""
    if config.placement not in PLACEMENTS:
        raise ValueError(f"placement: expected one of {PLACEMENTS}, found {config.placement!r}")
    return SpectralFNO(in_channels, out_channels, host_config(config, SpectralFNOConfig),
                       coarsened(ckb_factory(config, config.n_dim), config.downsample),
                       replace_local=config.placement == "replace")


def build_chonn_unet(in_channels: int, out_channels: int, config: ChonnUNetConfig) -> nn.Module:
    """U-Net with CKBs in the deepest encoder and decoder stages; ``(batch, channels, *spatial)``."""
    return UNet(in_channels, out_channels, host_config(config, UNetConfig), ckb_factory(config, config.n_dim))
