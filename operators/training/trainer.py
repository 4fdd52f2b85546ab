"""The trainer: seeded, resumable, distributed training of one model on streamed batches.

Data order is a function of ``(seed, epoch)`` alone (a seeded permutation per epoch, see
:mod:`operators.training.loader`), so a run resumed from its last checkpoint (model, optimizer,
scheduler, RNG states, epoch) ends with the same weights as an uninterrupted one, whatever the number
of loader workers. Under ``torchrun`` every process sees the same global batch order and reads only its
contiguous slice of each global batch; each process's loss is ``world/global_batch · Σ per-sample
losses``, so DDP's gradient average is exactly the single-process mean over the global batch. A step's
loss and gradient norm stay on the device until every :data:`CHECK_EVERY` steps (and the epoch's last) are
read at once, so the host does not wait for the device each step; the first step with a non-finite loss or
gradient, or a loss beyond :data:`DIVERGENCE` times the run's first, stops the run, naming that step.

Each epoch ends with the task's score (what ``best.pt`` minimises; rank 0 validates and shares it): the
learning-rate schedule steps with it (a plateau schedule reads it) and early stopping (``optim.patience``)
counts the epochs since its best, which checkpoints keep. A run that stopped early says so in one line and
marks that epoch's record ``stopped_early``; resumed, it stays stopped (unless given a larger patience).

Epochs count from 1 everywhere: the log, the records, a checkpoint's ``epoch`` and ``best_epoch``. A full disk
stops the run in one line naming the folder and the bytes needed; the last good checkpoint stays whole.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import sys
import time
from pathlib import Path
from typing import NamedTuple, Sequence

import torch
from torch import nn
from torch.optim import swa_utils
from tqdm import tqdm

import evaluation
from operators.training import checkpoint as ckpt
from operators.training.distributed import DistInfo, all_reduce_sum, unwrap, wrap
from operators.training.loader import Loader, epoch_order
from operators.training.optim import EpochSchedule, clip_gradients, make_optimizer
from operators.training.tasks.base import MetricSums
from pde_data import atomic_path
from pde_data.datasets.batch import Batch
from pde_data.core.params import Advice
from pde_data.core.room import NoRoomError, format_bytes, free_bytes, is_disk_full

__all__ = ["Trainer", "NonFiniteLossError", "epoch_order", "CHECKPOINT_COPIES", "LOG_BYTES"]


#: training stops when a step's mean loss exceeds this multiple of the run's first step's
DIVERGENCE = 1e3
#: steps between the checks of the steps' losses and gradient norms, each one read from the device (a read
#: per step would make the host wait for the device every step); a diverging run stops within this many steps
CHECK_EVERY = 20
#: checkpoints a run folder holds at once at most: ``best.pt`` from an earlier epoch, ``last.pt``, and the next
#: ``last.pt`` written beside it before it replaces it
CHECKPOINT_COPIES = 3
#: bytes a run needs beyond its checkpoints: run.json, history.json, metrics.csv, curves.png, TensorBoard events
LOG_BYTES = 2**20


class _Step(NamedTuple):
    """One optimizer step, on the device until checked: the global batch's summed loss, the gradient norm."""

    total: torch.Tensor
    norm: torch.Tensor
    n_global: int


class NonFiniteLossError(Advice, RuntimeError):
    """Training diverged (a NaN/inf loss or gradient, or a loss beyond :data:`DIVERGENCE` × its first
    value); the last good checkpoint was left in place. The parameters its advice names are ``mentions``
    (:class:`~pde_data.core.params.Advice`: the command line names them by their options)."""


class Trainer:
    """Train ``model`` on the batches of ``train`` and validate on ``val`` each epoch; the ``task`` says how.

    Args:
        model: the (unwrapped) module; it is moved to ``dist.device`` and wrapped in DDP if distributed.
        task: the run's :class:`~operators.training.tasks.Task` (its spec, normalizers, prediction, loss,
            metrics and the score that picks ``best.pt``); checkpoints store its resolved spec.
        train, val: :class:`~operators.training.loader.Loader` s (``val`` may be ``None``).
        out_dir: run folder for ``last.pt``, ``best.pt``, ``history.json`` and ``metrics.csv`` (rank 0 writes).
        dist: this process's :class:`DistInfo` (default: single CPU process). progress: progress bars.
    """

    def __init__(self, model: nn.Module, task, train: Loader, val: Loader | None, out_dir, *,
                 dist: DistInfo | None = None, progress: bool = True):
        self.dist, self.task, self.out, self.progress = dist or DistInfo(), task, Path(out_dir), progress
        self.config = task.spec.optim
        self.model = wrap(model.to(self.dist.device), self.dist)
        self.train, self.val = train, val
        self.optimizer = make_optimizer(self.model.parameters(), self.config)
        self.ema = None if self.config.ema is None else swa_utils.AveragedModel(
            unwrap(self.model), multi_avg_fn=swa_utils.get_ema_multi_avg_fn(self.config.ema), use_buffers=True)
        self.scheduler = EpochSchedule(self.optimizer, self.config)
        self.epoch, self.best, self.history = 0, math.inf, []
        self.best_epoch = 0  # the epoch of the best score so far (early stopping counts the epochs since)
        self._events = None  # the TensorBoard writer, opened with the first logged epoch
        self.first_loss: float | None = None  # the run's first step's mean loss (divergence check)
        self._saved_epoch: int | None = None  # the epoch last.pt holds (None: none written or loaded)

    # -- forward and loss ------------------------------------------------------------------------
    def _forward(self, batch: Batch, *, training: bool, module: nn.Module | None = None) -> torch.Tensor:
        dev, module = self.dist.device, module or self.model
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=self.config.amp and dev.type == "cuda"):
            pred = self.task.forward(module, batch, training=training)
        return pred.float() if pred.dtype in (torch.float16, torch.bfloat16) else pred

    def _sample_losses(self, batch: Batch) -> torch.Tensor:
        if self.config.noise:  # from torch's global generator, whose state every checkpoint keeps
            batch = dataclasses.replace(batch, inputs=batch.inputs + self.config.noise * torch.randn_like(batch.inputs))
        pred = self._forward(batch, training=True)
        # NaN/Inf in a prediction or the data reach the losses, and every process stops at the deferred check
        # (_check): no step waits for the device to say whether its inputs were finite
        with evaluation.finite_checks(False):
            return self.task.losses(pred, batch)

    # -- one epoch -------------------------------------------------------------------------------
    def _step(self, batch: Batch, n_global: int) -> _Step:
        """One optimizer step; its loss and gradient norm stay on the device (checked by :meth:`_check`)."""
        local = self._sample_losses(batch).sum()
        total = all_reduce_sum(local.detach(), self.dist)  # every process gets the same: they stop together
        self.optimizer.zero_grad(set_to_none=True)
        (local * (self.dist.world_size / n_global)).backward()
        norm = clip_gradients(self.model.parameters(), self.config.grad_clip or None)
        self.optimizer.step()
        if self.ema is not None:
            self.ema.update_parameters(unwrap(self.model))
        return _Step(total, norm, n_global)

    def _check(self, steps: list[_Step], first: int, epoch: int) -> float:
        """The summed loss of ``steps`` (steps ``first, first + 1, ...`` of ``epoch``), read from the device
        at once; the first step with a non-finite loss or gradient norm, or a loss beyond :data:`DIVERGENCE`
        times the run's first, stops training."""
        totals, norms = torch.stack([torch.stack((s.total.double(), s.norm.double())) for s in steps]).T.tolist()
        for k, (total, norm, step) in enumerate(zip(totals, norms, steps), first):
            where = f"at epoch {epoch + 1}, step {k}"
            if not math.isfinite(total):
                self._fail(f"non-finite loss ({total}) {where}")
            mean = total / step.n_global
            if self.first_loss is None:
                self.first_loss = mean
            elif mean > DIVERGENCE * self.first_loss:
                self._fail(f"the loss {mean:.4g} grew beyond {DIVERGENCE:g}x its first value {self.first_loss:.4g} "
                           f"{where} (diverging: lower {{optim.lr}} or clip with {{optim.grad_clip}})", ["optim.lr", "optim.grad_clip"])
            if not math.isfinite(norm):
                self._fail(f"non-finite gradient norm ({norm}) {where}")
        return math.fsum(totals)

    def _run_epoch(self, epoch: int) -> dict:
        self.model.train()
        sizes = self.train.global_sizes(epoch)  # indexed, not zipped: a zip under tqdm keeps its first batch alive
        shown = self.progress and self.dist.is_main and sys.stderr.isatty()  # in a log: each epoch's summary line
        bar = tqdm(self.train.epoch(epoch), total=len(sizes), desc=f"epoch {epoch + 1}/{self.config.epochs}",
                   file=sys.stderr, leave=False, disable=not shown)
        start, seen, loss_sum, pending = time.perf_counter(), 0, 0.0, []
        for k, batch in enumerate(bar, 1):
            pending.append(self._step(batch, sizes[k - 1]))
            seen += sizes[k - 1]
            if len(pending) == CHECK_EVERY or k == len(sizes):
                loss_sum += self._check(pending, k + 1 - len(pending), epoch)
                pending.clear()
                rate = seen / (time.perf_counter() - start)
                bar.set_postfix(loss=f"{loss_sum / seen:.4g}", samples_per_s=f"{rate:.1f}")
        elapsed = time.perf_counter() - start
        return {"train_loss": loss_sum / max(seen, 1), "samples_per_s": seen / elapsed, "epoch_s": elapsed}

    # -- validation ------------------------------------------------------------------------------
    @torch.no_grad()
    def validate(self) -> dict:
        """``val_*``: the task's metrics (physical units), means over the validation samples, streamed by batch."""
        if self.val is None or len(self.val) == 0:
            return {}
        module, sums = (unwrap(self.model) if self.ema is None else self.ema.module).eval(), MetricSums()
        for batch in self.val.epoch(0):
            sums.add(self.task.metrics(self._forward(batch, training=False, module=module), batch))
        return {f"val_{name}": value for name, value in self.task.result(sums).items()}

    # -- the loop --------------------------------------------------------------------------------
    def fit(self) -> list[dict]:
        """Train from :attr:`epoch` (0, or where :meth:`load` left it) until ``config.epochs``, or until the
        score has not improved for ``config.patience`` epochs. Returns the history."""
        if self.epoch == 0:
            torch.manual_seed(self.config.seed)  # the global RNG (dropout, ...) of a fresh run
        if self.dist.is_main:
            print(self._stop_line("not training on") if self.stopped else self._start_line(), file=sys.stderr,
                  flush=True)
        for epoch in range(self.epoch, self.config.epochs):
            if self.stopped:
                break
            record = {"epoch": epoch + 1, "lr": self.optimizer.param_groups[0]["lr"], **self._run_epoch(epoch)}
            record.update(self.validate() if self.dist.is_main else {})
            self.epoch = epoch + 1
            self.history.append(record)
            improved = self._end_epoch(record)
            if self.dist.is_main:
                with self._room():
                    self._checkpoint(improved)
                self._log_event(record)
                print(_summary(record), file=sys.stderr, flush=True)
                if "stopped_early" in record:
                    print(self._stop_line("stopping early"), file=sys.stderr, flush=True)
        if self.dist.is_main and self.history:
            with self._room():
                self._plot_curves()
        if self._events is not None:
            self._events.close()
        return self.history

    def _end_epoch(self, record: dict) -> bool:
        """Step the schedule with the epoch's score (rank 0's, on every process), mark the record
        ``stopped_early`` when training stops here before ``config.epochs``, and return whether the score
        improved on the best so far."""
        score = self.task.score(record) if self.dist.is_main else 0.0  # only rank 0 validates
        if self.dist.distributed:
            score = float(all_reduce_sum(torch.tensor(score, dtype=torch.float64, device=self.dist.device), self.dist))
        self.scheduler.step(score)
        improved = score < self.best
        if improved:
            self.best, self.best_epoch = score, self.epoch
        if self.stopped and self.epoch < self.config.epochs:
            record["stopped_early"] = True
        return improved

    @property
    def stopped(self) -> bool:
        """Whether the score has not improved for ``config.patience`` epochs: a function of the checkpointed
        best epoch, so a run that stopped stays stopped when resumed, unless resumed with a larger patience."""
        patience = self.config.patience
        return patience is not None and self.epoch - self.best_epoch >= patience

    def _stop_line(self, what: str) -> str:
        return (f"{what} after epoch {self.epoch}: the score that picks best.pt has not improved for "
                f"{self.epoch - self.best_epoch} epochs (optim.patience {self.config.patience}); the best, "
                f"{self.best:.4g} at epoch {self.best_epoch}, is in best.pt")

    def _start_line(self) -> str:
        """What the run starts with: parameters, items per split, and where it starts."""
        n_params = sum(p.numel() for p in self.model.parameters() if p.requires_grad)
        items = f"{len(self.train)} training and {0 if self.val is None else len(self.val)} validation items"
        start = f"resuming after epoch {self.epoch}" if self.epoch else "starting at epoch 1"
        return f"{n_params:,} parameters; {items}; {start} of {self.config.epochs}"

    def _log_event(self, record: dict) -> None:
        """The record's numbers as TensorBoard scalars in the run folder, when tensorboard is installed
        (the ``tensorboard`` extra); without it nothing is logged there (``metrics.csv`` has the same)."""
        if self._events is None:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:
                return
            self._events = SummaryWriter(log_dir=str(self.out))
        for key, value in record.items():
            if key != "epoch" and isinstance(value, (int, float)):
                self._events.add_scalar(key, value, record["epoch"])
        self._events.flush()

    def _plot_curves(self) -> None:
        """``curves.png``: loss and validation metrics per epoch (matplotlib only here, at the end)."""
        from evaluation.plots import plot_training_curves

        plot_training_curves(self.history, title=str(self.out), path=self.out / "curves.png").clear()

    def _checkpoint(self, improved: bool) -> None:
        state = self.state_dict()
        ckpt.save_checkpoint(self.out / "last.pt", state)
        self._saved_epoch = self.epoch
        if improved:
            ckpt.link_checkpoint(self.out / "last.pt", self.out / "best.pt")
        with atomic_path(self.out / "history.json") as tmp:
            tmp.write_text(json.dumps(self.history, indent=1))
        _write_csv(self.out / "metrics.csv", self.history)

    def _fail(self, what: str, mentions: Sequence[str] = ()) -> None:
        raise NonFiniteLossError(f"training stopped: {what}; {self._kept()}", mentions)

    def _kept(self) -> str:
        if self._saved_epoch is None:
            return "no checkpoint was written"
        return f"the last good checkpoint {self.out / 'last.pt'} (epoch {self._saved_epoch}) is kept"

    @contextlib.contextmanager
    def _room(self):
        """Turn a write's full-disk error into one line: the folder, the bytes a checkpoint needs, what is kept."""
        try:
            yield
        except OSError as exc:
            if not is_disk_full(exc):
                raise
            needed, free = getattr(exc, "needed", 0) or self.checkpoint_bytes(), free_bytes(self.out)
            then = "{overwrite=True} to start again" if self._saved_epoch is None else "{resume=True} to continue"
            raise NoRoomError(f"training stopped after epoch {self.epoch}: expected room for a checkpoint of about "
                              f"{format_bytes(needed)} ({needed:,} bytes), found {format_bytes(free)} free in "
                              f"{self.out}; {self._kept()}: free some space and pass {then}",
                              self.out, needed, free, mentions=["overwrite", "resume"]) from None

    def checkpoint_bytes(self) -> int:
        """About the bytes of a checkpoint of this run (:func:`~operators.training.checkpoint.estimate_bytes`)."""
        return ckpt.estimate_bytes(self.state_dict(), self.optimizer)

    # -- state -----------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """Everything needed to resume, as plain values and tensors (``weights_only``-loadable)."""
        return {
            "model": ckpt.tensor_state(unwrap(self.model)), "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(), "epoch": self.epoch, "best": self.best,
            "best_epoch": self.best_epoch, "first_loss": self.first_loss,
            "history": self.history, "rng": ckpt.rng_state(), "spec": self.task.spec.to_dict(),
            "normalizers": self.task.normalizers.state_dict(),
            **({} if self.ema is None else {"ema": ckpt.tensor_state(self.ema)}),
        }

    def load(self, state: dict) -> None:
        """Restore model, optimizer, scheduler, epoch, best score and its epoch, history and RNG states from a
        checkpoint's state (:func:`~operators.training.checkpoint.load_checkpoint`; tensors are moved to the
        model's device)."""
        unwrap(self.model).load_state_dict(state["model"])
        if self.ema is not None:
            self.ema.load_state_dict(state["ema"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.epoch, self.best, self.history = state["epoch"], state["best"], list(state["history"])
        self.best_epoch = state.get("best_epoch", self.epoch)  # older checkpoints: count from the last epoch
        self.first_loss = state.get("first_loss")
        self._saved_epoch = self.epoch
        ckpt.set_rng_state(state["rng"])


def _write_csv(path: Path, history: list[dict]) -> None:
    """One row per epoch, one column per key any record has (empty where a record lacks it), atomically."""
    keys = list(dict.fromkeys(k for record in history for k in record))
    lines = [",".join(keys)] + [",".join(_cell(record.get(k)) for k in keys) for record in history]
    with atomic_path(path) as tmp:
        tmp.write_text("\n".join(lines) + "\n")


def _cell(value) -> str:
    """A CSV cell: floats in full precision (``repr``), nothing for a missing value."""
    return "" if value is None else repr(value) if isinstance(value, float) else str(value)


def _summary(record: dict) -> str:
    parts = [f"epoch {record['epoch']}", f"loss {record['train_loss']:.4g}", f"{record['samples_per_s']:.1f} samples/s"]
    parts += [f"{k} {v:.4g}" for k, v in record.items() if k.startswith("val_")]
    return " | ".join(parts)
