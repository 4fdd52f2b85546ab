"""A training run end to end: open the data, split and normalize it, build the model, train, and load
a finished run back. This is the Python API behind ``circuitop train`` and ``circuitop evaluate``.

Example:
    >>> history = train_run("poisson.nc", "chonn_unet", "runs/p1", inputs=["f"], targets=["u"],
    ...                     model_config={"order": 2}, train_config=TrainConfig(epochs=100))
    >>> run = load_run("runs/p1")            # model, normalizers, descriptions
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

import operators.models as models
from operators.training import checkpoint as ckpt
from operators.training import data as data_mod
from operators.training import distributed
from operators.training.trainer import TrainConfig, Trainer
from pde_data import atomic_path
from pde_data.model import spatial_dims

__all__ = ["train_run", "load_run", "LoadedRun", "channels_for"]


def channels_for(ds, info: dict) -> tuple[int, int]:
    """``(in_channels, out_channels)`` of a model for the described data."""
    if info["kind"] == "window":
        c = len(info["variables"])
        return info["m"] * c, c
    return len(info["inputs"]), len(info["targets"])


def _model_spec(name: str, ds, info: dict, config: dict) -> dict:
    fields = {f.name for f in dataclasses.fields(models.MODELS[name].config)} if name in models.MODELS else set()
    config = dict(config)
    if "n_dim" in fields and "n_dim" not in config:
        variable = (info.get("variables") or info.get("inputs"))[0]
        config["n_dim"] = len(spatial_dims(ds[variable]))
    if "frames" in fields and "frames" not in config and info.get("kind") == "window":
        config["frames"] = info["m"]  # models that read the history as frames (nac_fno tokens="time")
    return models.model_spec(name, *channels_for(ds, info), **config)


def _write_json(path: Path, value: dict) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(value, indent=1, default=str))


def train_run(data: str | os.PathLike, model: str, out: str | os.PathLike, *, model_config: dict | None = None,
              train_config: TrainConfig = TrainConfig(), inputs=None, targets=None, window: int | None = None,
              horizon: int = 1, sizes=None, split_seed: int = 0, normalize: str | None = "gaussian",
              resume: bool = False, device: str | None = None) -> list[dict]:
    """Train ``model`` on the file ``data`` into the run folder ``out``; works under ``torchrun``.

    With ``resume=True`` the model, data description and settings come from ``out/last.pt``
    (only ``train_config.epochs`` and ``progress`` are taken from the arguments).
    """
    out, info = Path(out), distributed.setup(device)
    try:
        ds = data_mod.open_data(data)
        if resume:
            state = ckpt.load_checkpoint(out / "last.pt")
            meta, normalizers = state["meta"], data_mod.normalizers_from_state(state["normalizers"])
            saved = {**state["train_config"], "epochs": train_config.epochs, "progress": train_config.progress}
            train_config = TrainConfig(**saved)
        else:
            data_info = data_mod.describe_data(ds, inputs=inputs, targets=targets, window=window, horizon=horizon,
                                               sizes=sizes, seed=split_seed, normalize=normalize)
            data_info["file"] = os.path.abspath(os.fspath(data))
            meta, normalizers = {"model": _model_spec(model, ds, data_info, model_config or {}), "data": data_info}, None
        sets, normalizers = data_mod.make_splits(ds, meta["data"], normalizers)
        torch.manual_seed(train_config.seed)
        net = models.rebuild(meta["model"])
        if info.is_main:
            _write_json(out / "run.json", {**meta, "train": dataclasses.asdict(train_config), "data_file": str(data)})
        val = data_mod.materialize(sets["val"]) if len(sets["val"]) else None
        trainer = Trainer(net, data_mod.materialize(sets["train"]), val, train_config, out, meta=meta,
                          normalizers=normalizers, dist=info)
        return trainer.fit(resume_from=out / "last.pt" if resume else None)
    finally:
        distributed.cleanup()


@dataclass
class LoadedRun:
    """A trained run: the model (eval mode), its normalizers and the stored descriptions."""

    model: nn.Module
    normalizers: dict
    meta: dict
    train_config: dict
    history: list
    epoch: int


def load_run(run_dir: str | os.PathLike, *, which: str = "best", device: str = "cpu") -> LoadedRun:
    """Load ``run_dir/{which}.pt`` (``best`` or ``last``) with ``weights_only=True`` and rebuild the model."""
    if which not in ("best", "last"):
        raise ValueError(f"which: expected 'best' or 'last', found {which!r}")
    state = ckpt.load_checkpoint(Path(run_dir) / f"{which}.pt", map_location=device)
    model = models.rebuild(state["meta"]["model"])
    model.load_state_dict(state["model"])
    return LoadedRun(model.to(device).eval(), data_mod.normalizers_from_state(state["normalizers"]), state["meta"],
                     state["train_config"], list(state["history"]), state["epoch"])
