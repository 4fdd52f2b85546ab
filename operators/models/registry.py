"""The model registry: an explicit table from names to (config class, builder), and ``build``.

A model is fully described by its name, channels and config: a run's spec stores them in its ``model`` part
(``operators.training.spec.ModelSpec``: plain values in ``run.json`` and checkpoints; ``ModelSpec.build`` turns
it back into a module through :func:`build`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable

from torch import nn

from operators.models import chonn, nac, order_models, sequence, vision
from operators.models.conditioning import Conditioned
from operators.models.fno import FNOConfig, build_fno, check_padding, spectral_in_float32
from operators.models.unet import UNet, UNetConfig
from pde_data.core.params import ParameterError, typed

__all__ = ["ModelEntry", "MODELS", "DOMAINS", "build", "make_config", "config_values"]


#: a model's domain, what it maps: fields to fields, images to class logits, or sequences (batch, time, channels)
#: to logits / targets per sequence or per step (see :mod:`operators.models.sequence`); each task takes the
#: models of one domain (:data:`operators.training.tasks.TASKS` are the tasks)
DOMAINS = ("fields", "images", "sequences")


@dataclass(frozen=True)
class ModelEntry:
    """One registered model: its frozen config class, ``build(in, out, config)``, a summary and its domain
    (:data:`DOMAINS`)."""

    config: type
    build: Callable[[int, int, Any], nn.Module]
    summary: str
    domain: str = "fields"

    @property
    def fields(self) -> tuple[str, ...]:
        """The names of the config's fields."""
        return tuple(f.name for f in dataclasses.fields(self.config))


MODELS: dict[str, ModelEntry] = {
    "fno": ModelEntry(FNOConfig, build_fno, "neuraloperator FNO baseline (1D/2D)"),
    "chonn_fno": ModelEntry(chonn.ChonnFNOConfig, chonn.build_chonn_fno, "FNO hosting a CKB in each Fourier layer"),
    "nac_fno": ModelEntry(nac.NACFNOConfig, nac.build_nac_fno, "FNO hosting a NAC: spatial in each Fourier layer, or over the input frames (tokens=time)"),
    "unet": ModelEntry(UNetConfig, UNet, "U-Net neural-operator backbone"),
    "chonn_unet": ModelEntry(chonn.ChonnUNetConfig, chonn.build_chonn_unet, "U-Net with CKBs in the deepest stages"),
    "nac_unet": ModelEntry(nac.NACUNetConfig, nac.build_nac_unet, "U-Net with NACs in the deepest stages"),
    "ckb_chain": ModelEntry(order_models.CKBChainConfig, order_models.build_ckb_chain, "1D: one CKB of n serial KNCs"),
    "depth_stack": ModelEntry(order_models.DepthStackConfig, order_models.build_depth_stack, "1D: n stacked 1st-order CKBs"),
    "ckb_stack": ModelEntry(order_models.CKBStackConfig, order_models.build_ckb_stack, "1D: k stacked CKBs of m KNCs each"),
    "chonn_vision": ModelEntry(vision.VisionConfig, vision.build_chonn_vision,
                               "image classifier: four-stage backbone with Kirchhoff routing (size, routing)", "images"),
    "conv_vision": ModelEntry(vision.ConvVisionConfig, vision.build_conv_vision,
                              "image classifier: chonn_vision's backbone with a convolutional mixer (baseline)",
                              "images"),
    "ltc": ModelEntry(sequence.LTCConfig, sequence.build_ltc, "sequences: LTC, step sizes dt", "sequences"),
    "cfc": ModelEntry(sequence.CfCConfig, sequence.build_cfc, "sequences: CfC, step sizes dt", "sequences"),
    "pdna": ModelEntry(sequence.PDNAConfig, sequence.build_pdna, "sequences: PDNA variant A-E on a CfC", "sequences"),
    "nac": ModelEntry(sequence.NACSequenceConfig, sequence.build_nac,
                      "sequences: one NAC layer, timestamps and key-padding mask", "sequences"),
    "ckb_seq": ModelEntry(sequence.CKBSequenceConfig, sequence.build_ckb_seq,
                          "sequences: stacked Cascaded Kirchhoff Blocks, step sizes dt", "sequences"),
    "gru": ModelEntry(sequence.GRUConfig, sequence.build_gru, "sequences: torch GRU baseline, dt as a feature",
                      "sequences"),
    "attention": ModelEntry(sequence.AttentionConfig, sequence.build_attention,
                            "sequences: multi-head self-attention baseline, dt as a feature", "sequences"),
}


def _entry(name: str) -> ModelEntry:
    if name not in MODELS:
        raise ParameterError("model.name", f"one of {sorted(MODELS)}", repr(name))
    return MODELS[name]


def make_config(name: str, **config: Any):
    """The frozen config of model ``name`` from keyword values (:func:`config_values`)."""
    return _entry(name).config(**config_values(name, config))


def config_values(name: str, config: dict) -> dict:
    """``config`` converted to the types of model ``name``'s config fields and checked (:func:`typed`); a
    :class:`~pde_data.core.params.ParameterError` naming ``model.config.KEY`` for an unknown key or a value that
    does not fit."""
    cls = _entry(name).config
    values = typed(cls, config, "model.config")
    defaults = {f.name: f.default for f in dataclasses.fields(cls)}
    for key, value in values.items():
        _check_size(key, value, defaults[key])
        if key == "padding":
            check_padding(value, "model.config.padding")
    return values


#: integer settings with a positive default for which 0 is meaningful (no backbone MLP, no residual blocks,
#: a CKB of order 0: the plain host, as in CHONN's order ablation)
_MAY_BE_ZERO = {"backbone_layers", "n_res", "n_res_neck", "order"}


def _check_size(key: str, value: Any, default: Any) -> None:
    """A size whose default is a positive integer (a width, a number of modes or layers) must stay positive."""
    sizes = value if isinstance(value, tuple) else (value,)
    if isinstance(default, int) and not isinstance(default, bool) and default > 0 and key not in _MAY_BE_ZERO:
        if any(isinstance(v, int) and not isinstance(v, bool) and v < 1 for v in sizes):
            raise ParameterError(f"model.config.{key}", "a positive integer", repr(value))


def build(name: str, in_channels: int, out_channels: int, *, params: int = 0, **config: Any) -> nn.Module:
    """Build model ``name`` for ``(batch, in_channels, *spatial)`` → ``(batch, out_channels, *spatial)``
    (the image classifiers: → logits ``(batch, out_channels)``, ``out_channels`` the number of classes;
    the sequence models: ``(batch, time, in_channels)`` → ``(batch, out_channels)`` or, with readout
    ``"steps"``, ``(batch, time, out_channels)``); with ``params`` a field model conditioned on that many PDE
    parameters per sample (:class:`~operators.models.conditioning.Conditioned`: ``model(x, p)``).

    Example:
        >>> model = build("chonn_fno", 1, 1, n_modes=12, width=20, order=2)
    """
    if in_channels < 1 or out_channels < 1:
        raise ValueError(f"expected positive in_channels and out_channels, found {in_channels}, {out_channels}")
    model = spectral_in_float32(_entry(name).build(in_channels, out_channels, make_config(name, **config)))
    return Conditioned(model, params) if params else model


