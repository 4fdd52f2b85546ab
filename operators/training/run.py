"""A training run end to end: open the data, describe and split it, fit normalizers in one streaming
pass, build the model, train from streaming loaders, and load a finished run back. This is the
Python API behind ``circuitop train`` and ``circuitop evaluate``.

Example:
    >>> history = train_run("poisson.nc", "chonn_unet", "runs/p1", inputs=["f"], targets=["u"],
    ...                     model_config={"order": 2}, train_config=TrainConfig(epochs=100))
    >>> run = load_run("runs/p1")            # model, normalizers, run data
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

import operators.models as models
import pde_data
from operators.training import checkpoint as ckpt
from operators.training import data as data_mod
from operators.training import distributed, runfolder
from operators.training.data import LoaderConfig
from operators.training.rundata import RunData, Splits, describe
from operators.training.trainer import TrainConfig, Trainer, loss_name
from pde_data import atomic_path
from pde_data.model import spatial_dims

__all__ = ["train_run", "load_run", "LoadedRun", "check_source"]


def _model_spec(name: str, ds, rd: RunData, config: dict) -> dict:
    fields = {f.name for f in dataclasses.fields(models.MODELS[name].config)} if name in models.MODELS else set()
    config = dict(config)
    if "n_dim" in fields and "n_dim" not in config:
        config["n_dim"] = len(spatial_dims(ds[rd.inputs[0]]))
    if "frames" in fields and "frames" not in config and rd.windowed:
        config["frames"] = rd.m  # models that read the history as frames (nac_fno tokens="time")
    return models.model_spec(name, *rd.channels, **config)


def _check_task(model: str, ds, rd: RunData, config: TrainConfig) -> None:
    """One line when the model, the loss or a classification-only flag does not fit the run's data."""
    loss_name(config.loss, rd.classifying)
    wanted = "classify" if rd.classifying else "fields"
    if model in models.MODELS and models.MODELS[model].task != wanted:
        fitting = sorted(name for name, entry in models.MODELS.items() if entry.task == wanted)
        target = "class labels" if rd.classifying else "fields"
        raise ValueError(f"--model: expected a model that predicts {target} (one of {', '.join(fitting)}), "
                         f"found {model!r}, which does not")
    if rd.classifying and len(spatial_dims(ds[rd.inputs[0]])) != 2:
        raise ValueError(f"--input: expected 2D images (sample, x, y) to classify, found dims {ds[rd.inputs[0]].dims}")
    used = [flag for flag, value in (("--label-smoothing", config.label_smoothing), ("--shift", config.shift)) if value]
    if used and not rd.classifying:
        raise ValueError(f"{used[0]}: expected only in classification runs (an integer label target), found it in a "
                         "field run")


def _write_json(path: Path, value: dict) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(value, indent=1, default=str))


def check_source(rd: RunData, ds, data, what: str) -> None:
    """Raise a one-line ``ValueError`` unless ``ds`` has the fingerprint of the run's source file."""
    differences = rd.source.differences(pde_data.fingerprint(ds))
    if differences:
        raise ValueError(f"{os.fspath(data)}: not the data this run was trained on ({'; '.join(differences)}); {what}")


def _write_files(out: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        if name not in runfolder.RUN_FILES:
            raise ValueError(f"files: expected names among {runfolder.RUN_FILES}, found {name!r}")
        with atomic_path(out / name) as tmp:
            tmp.write_text(text)


def _resumed(out: Path, ds, data, train_config: TrainConfig):
    state = ckpt.load_checkpoint(out / "last.pt")
    rd = RunData.from_state(state["meta"]["data"])
    check_source(rd, ds, data, "resume needs the same file")
    saved = {**state["train_config"], "epochs": train_config.epochs, "progress": train_config.progress}
    return state["meta"], rd, data_mod.normalizers_from_state(state["normalizers"]), TrainConfig(**saved)


@contextlib.contextmanager
def _claimed(out: Path, info: distributed.DistInfo, *, resume: bool, overwrite: bool):
    """Rank 0 claims the run folder (:func:`runfolder.claim`) for the block; every rank fails if that
    fails. Yields the :class:`runfolder.RunFolder` (``None`` on other ranks)."""
    with contextlib.ExitStack() as stack:
        error, folder = None, None
        if info.is_main:
            try:
                folder = stack.enter_context(runfolder.claim(out, resume=resume, overwrite=overwrite))
            except Exception as exc:  # noqa: BLE001 - any failure must reach the other ranks, not hang them
                error = exc
        failed = distributed.all_reduce_sum(torch.tensor(0 if error is None else 1), info)
        if error is not None:
            raise error
        if int(failed):
            raise runfolder.RunFolderError(f"{out}: rank 0 could not claim the run folder")
        yield folder


def train_run(data: str | os.PathLike, model: str, out: str | os.PathLike, *, model_config: dict | None = None,
              train_config: TrainConfig = TrainConfig(), inputs=None, targets=None, window: int | None = None,
              horizon: int = 1, sizes=None, split_seed: int = 0, normalize: str | None = "gaussian",
              resume: bool = False, overwrite: bool = False, device: str | None = None,
              loader: LoaderConfig = LoaderConfig(), splits: Splits | None = None,
              files: dict[str, str] | None = None) -> list[dict]:
    """Train ``model`` on the file ``data`` into the run folder ``out``; works under ``torchrun``.

    ``out`` belongs to this run while it trains (a lock file; see :mod:`operators.training.runfolder`):
    a folder holding another run is refused unless ``resume`` (continue it) or ``overwrite`` (replace it,
    once the data and settings of the new run have been checked).
    Data streams from the file (``loader`` says how: workers, cache); nothing loads it whole unless it
    fits ``loader.memory_budget`` or ``loader.cache == "memory"``. With ``resume=True`` the model, run
    data and settings come from ``out/last.pt`` (only ``train_config.epochs`` and ``progress`` are taken
    from the arguments) and ``data`` must be the same data (same fingerprint; it may have moved).
    ``splits`` gives the split indices explicitly instead of drawing ``sizes`` with ``split_seed``.
    ``files`` (name → text) are written into the run folder beside ``run.json`` (the CLI's
    ``config.yaml``); their names must be among :data:`runfolder.RUN_FILES`.
    """
    out, info = Path(out), distributed.setup(device)
    try:
        with _claimed(out, info, resume=resume, overwrite=overwrite) as folder:
            ds = pde_data.open_data(data)
            if resume:
                meta, rd, normalizers, train_config = _resumed(out, ds, data, train_config)
            else:
                rd = describe(ds, inputs=inputs, targets=targets, window=window, horizon=horizon, sizes=sizes,
                              seed=split_seed, normalize=normalize, splits=splits)
                _check_task(model, ds, rd, train_config)  # before anything is written
                meta = {"model": _model_spec(model, ds, rd, model_config or {}), "data": rd.to_state()}
                normalizers = data_mod.fit_normalizers(ds, rd)
            torch.manual_seed(train_config.seed)
            net = models.rebuild(meta["model"])
            train, val = data_mod.make_loaders(data, ds, rd, normalizers, loader, batch_size=train_config.batch_size,
                                               seed=train_config.seed, dist=info)
            if info.is_main:
                folder.clear()  # an overwritten run's files go only now that this run's settings are checked
                _write_json(out / "run.json", {**meta, "train": dataclasses.asdict(train_config),
                                               "data_file": str(data), "loader": dataclasses.asdict(loader)})
                _write_files(out, files or {})
            trainer = Trainer(net, train, val, train_config, out, meta=meta, normalizers=normalizers, dist=info,
                              windowed=rd.windowed, classify=rd.classifying)
            return trainer.fit(resume_from=out / "last.pt" if resume else None)
    finally:
        distributed.cleanup()


@dataclass
class LoadedRun:
    """A trained run: the model (eval mode), its normalizers, its run data and the stored settings."""

    model: nn.Module
    normalizers: dict
    data: RunData
    model_spec: dict
    train_config: dict
    history: list
    epoch: int


def load_run(run_dir: str | os.PathLike, *, which: str = "best", device: str = "cpu") -> LoadedRun:
    """Load ``run_dir/{which}.pt`` (``best`` or ``last``) with ``weights_only=True`` and rebuild the model."""
    if which not in ("best", "last"):
        raise ValueError(f"which: expected 'best' or 'last', found {which!r}")
    path = Path(run_dir) / f"{which}.pt"
    state = ckpt.load_checkpoint(path, map_location=device)
    try:
        rd = RunData.from_state(state["meta"]["data"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ckpt.CheckpointError(f"{path}: {exc}") from None
    model = models.rebuild(state["meta"]["model"])
    model.load_state_dict(state["model"])
    return LoadedRun(model.to(device).eval(), data_mod.normalizers_from_state(state["normalizers"]), rd,
                     state["meta"]["model"], state["train_config"], list(state["history"]), state["epoch"])
