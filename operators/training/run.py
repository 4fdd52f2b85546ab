"""A training run end to end from its :class:`~operators.training.spec.RunSpec`: open the data, resolve the
spec against it (task, variables, split, fingerprint), fit normalizers in one streaming pass, build the
model, train, and load a finished run back. The Python API behind ``circuitop train`` and ``evaluate``.

The run folder holds ``config.yaml`` (the spec as asked: ``train --config-file`` reads it back), ``run.json``
(the resolved spec), and checkpoints that store the resolved spec too. A run starts only if the folder's disk
has room for its checkpoints (:meth:`~operators.training.runfolder.RunFolder.check_room`), before it writes.

Example:
    >>> spec = RunSpec(data=DataSpec("poisson.nc", inputs=("f",), targets=("u",)),
    ...                model=ModelSpec("chonn_unet", {"order": 2}), optim=OptimSpec(epochs=100))
    >>> history = train_run(spec, "runs/p1")
    >>> run = load_run("runs/p1")            # model, task (with its normalizers), spec
    >>> train_run(stored_spec("runs/p1").override({"optim.epochs": 200}), "runs/p1", resume=True)
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
import xarray as xr
from torch import nn

import pde_data
from pde_data.core import remote
from operators.threads import choose_threads, say
from operators.training import checkpoint as ckpt
from operators.training import distributed, runfolder
from operators.training.data import RunData, memory_plan
from operators.training.spec import RunSpec, SpecError, conflicts, resumed
from operators.training.tasks import EvalOptions, Normalizers, Task, make_task
from operators.training.tasks.classify import LabelTask
from operators.training.trainer import CHECKPOINT_COPIES, LOG_BYTES, Trainer
from pde_data import atomic_path
from pde_data.core.model import SAMPLE
from pde_data.core.room import NoRoomError, format_bytes

__all__ = ["train_run", "load_run", "stored_spec", "LoadedRun", "check_source", "trained_data", "CONFIG_FILE",
           "RUN_FILE"]

CONFIG_FILE, RUN_FILE = "config.yaml", "run.json"


def check_source(spec: RunSpec, source: pde_data.Source, what: str, mentions: Sequence[str] = ()) -> None:
    """Raise a one-line :class:`SpecError` unless ``source`` has the fingerprint of the run's source file; ``what``
    says what to do instead, naming the parameters ``mentions`` (``{samples='all'}``)."""
    differences = spec.data.fingerprint.differences(source.fingerprint())
    if differences:
        raise SpecError((), f"{source.name}: not the data this run was trained on ({'; '.join(differences)}); {what}",
                        mentions=mentions)


def _spec_of(state: dict, path: Path) -> RunSpec:
    """The resolved spec a checkpoint's ``state`` stores."""
    try:
        return RunSpec.from_dict(state["spec"])
    except (KeyError, SpecError) as exc:
        raise ckpt.CheckpointError(f"{path}: expected a run spec, found {exc}") from None


def stored_spec(run_dir: str | os.PathLike, *, checkpoint: str = "last") -> RunSpec:
    """The resolved spec a run folder's ``{checkpoint}.pt`` stores."""
    path = Path(run_dir) / f"{checkpoint}.pt"
    return _spec_of(ckpt.load_checkpoint(path), path)


def _resumed(spec: RunSpec, state: dict, out: Path, source: pde_data.Source) -> RunSpec:
    """The spec stored in the checkpoint ``state`` with what a resumed run may change from ``spec`` (the
    stored spec with overrides, :func:`stored_spec`); one line naming the first other change."""
    stored, trained = _spec_of(state, out / "last.pt"), state["epoch"]
    check_source(stored, source, "resume needs the same file")
    for path, old, new in conflicts(stored, spec):
        raise SpecError(path, f"resuming {out} keeps the stored value {old!r}; found {new!r} (drop the change, or "
                        "train into a new folder)")
    if stored.optim.scheduler == "cosine" and spec.optim.epochs != stored.optim.epochs:
        raise SpecError("optim.epochs", f"expected the stored {stored.optim.epochs}: a cosine schedule is fixed by "
                        f"its length, found {spec.optim.epochs} (train into a new folder for another length)")
    if spec.optim.epochs < trained:
        raise SpecError("optim.epochs", f"expected at least the {trained} epochs {out} has trained, found "
                        f"{spec.optim.epochs}")
    return resumed(stored, spec)


def trained_data(spec: RunSpec, device: torch.device | str | None = None) -> tuple[str, pde_data.Source]:
    """``(name, source)`` of the data a resolved run validated and tests on, opened again: its file, or a
    generated run's fixed set made again on ``device`` (bit for bit: it has the stored fingerprint)."""
    data = RunData.open(spec, device)
    return spec.data.path or "generated", data.source


def _on_main(info: distributed.DistInfo, action, failure):
    """``action()`` on rank 0, its result returned there (None elsewhere); when it raises, every rank raises:
    rank 0 its error, the others ``failure()``."""
    error = result = None
    if info.is_main:
        try:
            result = action()
        except Exception as exc:  # noqa: BLE001 - any failure must reach the other ranks, not hang them
            error = exc
    failed = distributed.all_reduce_sum(torch.tensor(0 if error is None else 1), info)
    if error is not None:
        raise error
    if int(failed):
        raise failure()
    return result


@contextlib.contextmanager
def _claimed(out: Path, info: distributed.DistInfo, *, resume: bool, overwrite: bool):
    """Rank 0 claims the run folder (:func:`runfolder.claim`) for the block; every rank fails if that
    fails. Yields the :class:`runfolder.RunFolder` (``None`` on other ranks)."""
    with contextlib.ExitStack() as stack:
        yield _on_main(info, lambda: stack.enter_context(runfolder.claim(out, resume=resume, overwrite=overwrite)),
                       lambda: runfolder.RunFolderError((), f"{out}: expected rank 0 to claim the run folder, found "
                                                        "its claim failed"))


def _check_room(folder: runfolder.RunFolder | None, trainer: Trainer, info: distributed.DistInfo) -> None:
    """Rank 0 checks that the run folder has room for the run's checkpoints; every rank fails if not."""
    _on_main(info, lambda: folder.check_room(trainer.checkpoint_bytes(), copies=CHECKPOINT_COPIES, margin=LOG_BYTES),
             lambda: NoRoomError(f"{trainer.out}: expected room for the run's checkpoints, found too little (rank 0's "
                                 "check)", trainer.out))


def _prepared(spec: RunSpec, data: RunData, state: dict | None, out: Path) -> tuple[RunSpec, Task]:
    """The resolved spec and its task with normalizers: those of the checkpoint ``state`` when resuming,
    else fitted now."""
    if state is not None:
        resolved = _resumed(spec, state, out, data.source)
        return resolved, make_task(resolved, Normalizers.from_state_dict(state["normalizers"]))
    resolved = data.resolve(spec)
    return resolved, make_task(resolved, data.normalizers(make_task(resolved)))


def _model_line(spec: RunSpec, net: torch.nn.Module) -> str:
    """One line: the model, the bytes of its weights, and the config values the data set (``derived``: e.g.
    Fourier modes fitted to the training grid); the trainer's first line counts the parameters."""
    size = sum(p.numel() * p.element_size() for p in net.parameters())
    derived = ", ".join(f"{k}={v}" for k, v in spec.model.derived.items())
    padded = " (a grid that is not periodic: task.periodic=True if it is)" if "padding" in spec.model.derived else ""
    return f"model: {spec.model.name}, {format_bytes(size)} of weights" + (f"; set by the data: {derived}{padded}"
                                                                            if derived else "")


def _step_probe(net: torch.nn.Module, task: Task, train, device: torch.device):
    """One training step (forward, loss, backward) of a copy of ``net`` on a first batch of ``train``, leaving the
    run's random state as it was: what ``threads="auto"`` times (None off the CPU, or for a generated run, whose
    batches are made as it goes)."""
    dataset = getattr(train, "dataset", None)
    if torch.device(device).type != "cpu" or dataset is None or len(dataset) == 0:
        return None
    made: list = []  # the copy and the batch, made at the first call (none when nothing is timed)

    def step() -> None:
        if not made:
            first = list(range(min(len(dataset), task.spec.optim.batch_size)))
            made.extend([copy.deepcopy(net), dataset.read_batch(first)])
        model, batch = made
        with torch.random.fork_rng(devices=[]):
            task.losses(task.forward(model, batch, training=True), batch).mean().backward()

    return step


#: parameters per training target value past which a model is larger than its data can constrain (a warning)
PARAMETERS_PER_VALUE = 100


def _size_lines(net: torch.nn.Module, task: Task, train) -> list[str]:
    """A warning when ``net`` has more than :data:`PARAMETERS_PER_VALUE` parameters per target value of the
    training split (items × one item's target values; a file's split, not a generated run's new samples). Not
    for labels: a classifier's parameters are not fitted value for value (image classifiers commonly have
    hundreds per label)."""
    if isinstance(task, LabelTask):
        return []
    parameters = sum(p.numel() for p in net.parameters())
    values = len(train) * train.dataset.read_batch([0]).targets.numel()
    if parameters <= PARAMETERS_PER_VALUE * values:
        return []
    return [f"warning: model: {parameters:,} parameters for {values:,} training target values "
            f"({parameters / values:,.0f} per value, more than {PARAMETERS_PER_VALUE}): more than the data can "
            "constrain; a smaller model (its config) or more training samples"]


def _batch_lines(spec: RunSpec, train) -> list[str]:
    """A line when the batch size is above the training items: each epoch is then one batch of all of them."""
    items, size = len(train), spec.optim.batch_size
    return [f"batch size {size} is above the {items} training items: each epoch trains one batch of {items}"] \
        if size > items else []


def train_run(spec: RunSpec, out: str | os.PathLike, *, resume: bool = False, overwrite: bool = False,
              device: str | None = None, progress: bool = True, threads: int | str | None = None) -> list[dict]:
    """Train the run ``spec`` describes into the folder ``out``; works under ``torchrun``. Returns the history.

    ``out`` belongs to this run while it trains (a lock file; :mod:`operators.training.runfolder`): a folder
    holding another run is refused unless ``resume`` (continue it: ``spec`` may differ from the stored one only
    in the :data:`~operators.training.spec.RESUMABLE` fields ``optim.epochs``, ``optim.patience``, ``data.path``
    and ``loading``: pass :func:`stored_spec` with those overrides; the file must have the stored fingerprint) or
    ``overwrite`` (replace it, once the new spec has been checked against the data). Data stream from the
    file as ``spec.loading`` says; nothing loads it whole unless it fits the memory budget or is asked to.
    ``threads``: torch's CPU threads, a number or ``"auto"`` (:func:`operators.threads.choose_threads`, timing a
    training step; the command line's default); None leaves them as the caller set them.
    """
    if spec.data.path is None and spec.data.generate is None:
        raise SpecError("data.path", "a data file (or a generator: {data.generate})", "none", ["data.generate"])
    if spec.model.name is None and not resume:
        raise SpecError("model.name", "a value", "none")
    out, info = Path(out), distributed.setup(device)
    if spec.data.path is not None:
        spec = spec.override({"data.path": remote.absolute(spec.data.path)})
    try:
        with _claimed(out, info, resume=resume, overwrite=overwrite) as folder:
            data = RunData.open(spec, info.device, info)  # the one open of the file (or making of the fixed set)
            state = ckpt.load_checkpoint(out / "last.pt") if resume else None  # read once: spec, weights, states
            spec, task = _prepared(spec, data, state, out)
            torch.manual_seed(spec.optim.seed)
            net = spec.model.build()
            if spec.optim.compile:
                net.compile()  # in place (Module.compile): the state_dict keeps its keys, without "_orig_mod."
            train, val = data.loaders(task, batch_size=spec.optim.batch_size, seed=spec.optim.seed, dist=info)
            chosen = None if threads is None else choose_threads(  # None: torch's threads as the caller set them
                threads, probe=_step_probe(net, task, train, info.device),
                processes=int(os.environ.get("LOCAL_WORLD_SIZE", info.world_size)))
            if info.is_main:  # said before anything is trained
                for line in (_model_line(spec, net), *task.data_lines(data.source), *_batch_lines(spec, train), chosen):
                    say(line)
            if info.is_main and data.stream is None:
                batch = min(spec.optim.batch_size, len(train))  # a batch holds at most every training item
                for line in (*_size_lines(net, task, train), memory_plan(task, data.source, train, val, batch).line()):
                    say(line)
            trainer = Trainer(net, task, train, val, out, dist=info, progress=progress)
            if state is not None:
                trainer.load(state)
                del state  # the weights and optimizer states now live in the trainer only
            _check_room(folder, trainer, info)  # before the first epoch, and before anything is written
            if info.is_main:
                folder.clear()  # an overwritten run's files go only now that this run's spec and room are checked
                with atomic_path(out / RUN_FILE) as tmp:
                    tmp.write_text(json.dumps(spec.to_dict(), indent=1, default=str))
                with atomic_path(out / CONFIG_FILE) as tmp:
                    tmp.write_text(spec.request().to_yaml())
            return trainer.fit()
    finally:
        distributed.cleanup()


@dataclass
class LoadedRun:
    """A trained run: the model (eval mode, on ``device``), its task (with the run's normalizers), the
    resolved spec, its training history and the epoch of the checkpoint.

    Example:
        >>> run = load_run("runs/darcy")
        >>> pred = run.predict(xr.open_dataset("new_coefficients.nc"))     # Dataset of the run's targets
        >>> run.with_variables(inputs=["input"]).predict(neuraloperator_ds)  # other names, same physics
    """

    model: nn.Module
    task: Task
    spec: RunSpec
    history: list
    epoch: int
    device: torch.device = torch.device("cpu")

    def with_variables(self, *, inputs: Sequence[str] | None = None,
                       targets: Sequence[str] | None = None) -> "LoadedRun":
        """The run reading other variable names: ``inputs``/``targets`` stand in for the run's, in order
        (None: the run's own; :meth:`Task.with_variables`)."""
        task = self.task.with_variables(inputs, targets)
        return dataclasses.replace(self, spec=task.spec, task=task)

    def predict(self, data: xr.Dataset | pde_data.Source | str, *, steps: int | None = EvalOptions.steps,
                batch_size: int = EvalOptions.batch_size) -> xr.Dataset:
        """Predictions for every sample of ``data`` (a Dataset in memory, a Source, or a path) from the
        run's inputs alone: the run's target variables on ``data``'s coordinates (a window run: its given
        frames then ``steps`` rollout steps, default to the data's last frame). Loads the result whole;
        ``operators.training.predict_run`` streams it to a file instead."""
        source = pde_data.open_source(data)
        samples = np.arange(source.sizes[SAMPLE])
        options = EvalOptions(None, steps=steps, batch_size=batch_size, device=self.device)
        parts = [pred for _, pred in self.task.predict(self.model, source, samples, options)]
        return xr.concat(parts, dim=SAMPLE) if len(parts) > 1 else parts[0]


def load_run(run_dir: str | os.PathLike, *, checkpoint: str = "best", device: str | torch.device = "cpu") -> LoadedRun:
    """Load ``run_dir/{checkpoint}.pt`` (``best`` or ``last``) with ``weights_only=True`` and rebuild the model: with
    the averaged weights where the run kept an average (``optim.ema``), else its weights."""
    if checkpoint not in ("best", "last"):
        raise SpecError("checkpoint", f"expected 'best' or 'last', found {checkpoint!r}")
    folder = Path(run_dir)
    if folder.is_file():
        raise SpecError("run_dir", "a run folder (holding best.pt, last.pt and run.json)",
                        f"the file {folder} (pass its folder, {folder.parent})")
    path = folder / f"{checkpoint}.pt"
    state = ckpt.load_checkpoint(path, map_location=device)  # read once: the spec, the weights, the normalizers
    spec = _spec_of(state, path)
    model = spec.model.build()
    model.load_state_dict(ckpt.ema_weights(state["ema"]) if "ema" in state else state["model"])
    task = make_task(spec, Normalizers.from_state_dict(state["normalizers"]))
    device = torch.device(device)
    return LoadedRun(model.to(device).eval(), task, spec, list(state["history"]), state["epoch"], device)
