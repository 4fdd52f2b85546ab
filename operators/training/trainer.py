"""The trainer: seeded, resumable, distributed training of one model on streamed batches.

Data order is a function of ``(seed, epoch)`` alone (a seeded permutation per epoch, see
:mod:`operators.training.loader`), so a run resumed from its last checkpoint (model, optimizer,
scheduler, RNG states, epoch) ends with the same weights as an uninterrupted one, whatever the number
of loader workers. Under ``torchrun`` every process sees the same global batch order and reads only its
contiguous slice of each global batch; each process's loss is ``world/global_batch · Σ per-sample
losses``, so DDP's gradient average is exactly the single-process mean over the global batch.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import torch
from torch import nn
from tqdm import tqdm

import evaluation
from operators.rollout import rollout
from operators.training.augment import random_shift
from operators.training import checkpoint as ckpt
from operators.training.distributed import DistInfo, all_reduce_sum, unwrap, wrap
from operators.training.loader import Loader, TensorPairs, epoch_order
from operators.training.optim import make_optimizer, make_scheduler
from pde_data import atomic_path

__all__ = ["TrainConfig", "Trainer", "NonFiniteLossError", "epoch_order", "loss_name"]

LOSSES = {"rel_l2": evaluation.rel_l2, "rel_l1": evaluation.rel_l1}
#: ``--loss`` values: ``auto`` is cross-entropy for classification runs and rel_l2 otherwise
LOSS_CHOICES = ("auto", *LOSSES, "cross_entropy")


@dataclass(frozen=True)
class TrainConfig:
    """Optimisation settings (the CHONN paper's per-benchmark values are in CHONN, Methods).

    Classification runs only: ``label_smoothing`` of the cross-entropy, and ``shift``, the largest
    random translation (pixels, per sample and axis, border pixels repeated) of the training images.
    """

    epochs: int = 10
    batch_size: int = 20
    lr: float = 1e-3
    weight_decay: float = 1e-4
    optimizer: str = "adamw"
    scheduler: str = "step"
    step_size: int = 100
    gamma: float = 0.5
    loss: str = "auto"
    label_smoothing: float = 0.0
    shift: int = 0
    grad_clip: float | None = None
    amp: bool = False
    seed: int = 0
    pushforward: bool = False
    progress: bool = True

    def __post_init__(self):
        ints = {"epochs": 1, "batch_size": 1, "step_size": 1, "shift": 0}  # name -> smallest value
        for name, least in ints.items():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                expected = "a positive integer" if least else "an integer >= 0"
                raise ValueError(f"--{name.replace('_', '-')}: expected {expected}, found {value!r}")
        checks = (("lr", self.lr, "a positive number", lambda v: v > 0),
                  ("weight_decay", self.weight_decay, "a number >= 0", lambda v: v >= 0),
                  ("gamma", self.gamma, "a number in (0, 1]", lambda v: 0 < v <= 1),
                  ("label_smoothing", self.label_smoothing, "a number in [0, 1)", lambda v: 0 <= v < 1),
                  ("grad_clip", self.grad_clip, "a positive number (or none)", lambda v: v > 0))
        for name, value, expected, ok in checks:
            if value is None and name == "grad_clip":
                continue
            if not isinstance(value, (int, float)) or not math.isfinite(value) or not ok(value):
                raise ValueError(f"--{name.replace('_', '-')}: expected {expected}, found {value!r}")
        if self.loss not in LOSS_CHOICES:
            raise ValueError(f"--loss: expected one of {list(LOSS_CHOICES)}, found {self.loss!r}")


#: training stops when a step's mean loss exceeds this multiple of the run's first step's
DIVERGENCE = 1e3


class NonFiniteLossError(RuntimeError):
    """Training diverged (a NaN/inf loss or gradient, or a loss beyond :data:`DIVERGENCE` × its first
    value); the last good checkpoint was left in place."""


def _decode(normalizer, t: torch.Tensor) -> torch.Tensor:
    return t if normalizer is None else normalizer.decode(t)


def _as_loader(data, config: "TrainConfig", dist: DistInfo, shuffle: bool) -> Loader | None:
    """A :class:`Loader` as it is, ``(x, y)`` tensors as an in-memory one, ``None`` as ``None``."""
    if data is None or isinstance(data, Loader):
        return data
    x, y = data
    if not shuffle:  # validation: rank 0 alone, in order
        dist = DistInfo(device=dist.device)
    return Loader(TensorPairs(x, y), batch_size=config.batch_size, seed=config.seed, shuffle=shuffle, dist=dist)


class Trainer:
    """Train ``model`` on the batches of ``train`` and validate on ``val`` each epoch.

    Args:
        model: the (unwrapped) module; it is moved to ``dist.device`` and wrapped in DDP if distributed.
        train, val: :class:`~operators.training.loader.Loader` s (``val`` may be ``None``), or encoded
            tensors ``(inputs, targets)``: steady ``(n, C_in, *s)``/``(n, C_out, *s)``, windows
            ``(n, m, C, *s)``/``(n, horizon, C, *s)``.
        config: :class:`TrainConfig`.
        out_dir: run folder for ``last.pt``, ``best.pt`` and ``history.json`` (written by rank 0).
        meta: plain description stored in checkpoints: ``{"model": model_spec, "data": run data state}``.
        normalizers: ``{"input", "output"}`` → :class:`pde_data.Normalizer` or ``None``.
        dist: this process's :class:`DistInfo` (default: single CPU process).
        windowed: the model is a one-step model rolled out over ``horizon`` target frames.
        classify: the targets are class labels ``(n,)`` and the model returns logits ``(n, classes)``:
            cross-entropy loss, validation cross-entropy and top-1/top-5 accuracy.
    """

    def __init__(self, model: nn.Module, train, val, config: TrainConfig, out_dir, *, meta: dict,
                 normalizers: dict | None = None, dist: DistInfo | None = None, windowed: bool = False,
                 classify: bool = False):
        self.dist = dist or DistInfo()
        self.config, self.meta, self.out = config, meta, Path(out_dir)
        self.normalizers = normalizers or {"input": None, "output": None}
        self.windowed, self.classify = windowed, classify
        self.loss = loss_name(config.loss, classify)
        self.model = wrap(model.to(self.dist.device), self.dist)
        self.train = _as_loader(train, config, self.dist, shuffle=True)
        self.val = _as_loader(val, config, self.dist, shuffle=False)
        self.optimizer = make_optimizer(self.model.parameters(), config)
        self.scheduler = make_scheduler(self.optimizer, config)
        self.epoch, self.best, self.history = 0, math.inf, []
        self._events = None  # the TensorBoard writer, opened with the first logged epoch
        self.first_loss: float | None = None  # the run's first step's mean loss (divergence check)

    # -- forward and loss ------------------------------------------------------------------------
    def _predict(self, x: torch.Tensor, y_like: torch.Tensor, pushforward: bool = False,
                 module: nn.Module | None = None) -> torch.Tensor:
        dev, module = self.dist.device, module or self.model
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=self.config.amp and dev.type == "cuda"):
            if self.windowed:
                pred = rollout(module, x, y_like.shape[1], pushforward=pushforward)
            else:
                pred = module(x)
        return pred.float() if pred.dtype in (torch.float16, torch.bfloat16) else pred

    def _sample_losses(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if self.classify:
            x = random_shift(x, self.config.shift)
        pred = self._predict(x, y, pushforward=self.config.pushforward)
        if not (torch.isfinite(pred).all() and (self.classify or torch.isfinite(y).all())):
            # the metrics refuse non-finite input; a NaN loss makes every process stop together
            return torch.full((len(y),), math.nan, device=y.device)
        if self.classify:
            return evaluation.cross_entropy(pred, y, reduce="none", label_smoothing=self.config.label_smoothing)
        out = self.normalizers.get("output")
        return LOSSES[self.loss](_decode(out, pred), _decode(out, y), reduce="none")

    # -- one epoch -------------------------------------------------------------------------------
    def _step(self, x: torch.Tensor, y: torch.Tensor, n_global: int, where: str) -> float:
        local = self._sample_losses(x, y).sum()
        total = all_reduce_sum(local.detach(), self.dist).item()  # one device sync per step
        if not math.isfinite(total):
            self._fail(f"non-finite loss ({total}) {where}")
        mean = total / n_global
        if self.first_loss is None:
            self.first_loss = mean
        elif mean > DIVERGENCE * self.first_loss:
            self._fail(f"the loss {mean:.4g} grew beyond {DIVERGENCE:g}x its first value {self.first_loss:.4g} {where} "
                       "(diverging: lower --lr or clip with --grad-clip)")
        self.optimizer.zero_grad(set_to_none=True)
        (local * (self.dist.world_size / n_global)).backward()
        clip = self.config.grad_clip if self.config.grad_clip else math.inf
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), clip)
        if not torch.isfinite(norm):
            self._fail(f"non-finite gradient norm ({norm.item()}) {where}")
        self.optimizer.step()
        return total

    def _run_epoch(self, epoch: int) -> dict:
        self.model.train()
        bar = tqdm(self.train.epoch(epoch), total=self.train.n_batches(epoch), desc=f"epoch {epoch + 1}/{self.config.epochs}",
                   file=sys.stderr, leave=False, disable=not (self.config.progress and self.dist.is_main))
        start, seen, loss_sum = time.perf_counter(), 0, 0.0
        for k, batch in enumerate(bar):
            loss_sum += self._step(batch.x, batch.y, batch.n_global, f"at epoch {epoch + 1}, step {k + 1}")
            seen += batch.n_global
            bar.set_postfix(loss=f"{loss_sum / seen:.4g}", samples_per_s=f"{seen / (time.perf_counter() - start):.1f}")
        self.scheduler.step()
        elapsed = time.perf_counter() - start
        return {"train_loss": loss_sum / max(seen, 1), "samples_per_s": seen / elapsed, "epoch_s": elapsed}

    # -- validation ------------------------------------------------------------------------------
    @torch.no_grad()
    def validate(self) -> dict:
        """``val_*`` metrics (means over validation samples, physical units), streamed batch by batch."""
        if self.val is None or len(self.val) == 0:
            return {}
        module, out = unwrap(self.model).eval(), self.normalizers.get("output")
        metrics = _CLASS_METRICS if self.classify else _METRICS
        values = {name: [] for name in metrics}
        for batch in self.val.epoch(0):
            pred = _decode(out, self._predict(batch.x, batch.y, module=module))
            true = _decode(out, batch.y)
            for name, fn in metrics.items():
                values[name].append(fn(pred, true, reduce="none").cpu())
        return {f"val_{name}": float(torch.cat(v).mean()) for name, v in values.items()}

    # -- the loop --------------------------------------------------------------------------------
    def fit(self, *, resume_from: str | Path | None = None) -> list[dict]:
        """Train until ``config.epochs``; resume from a checkpoint first if given. Returns the history."""
        if resume_from is not None:
            self.load(resume_from)
        if self.epoch == 0:
            torch.manual_seed(self.config.seed)  # the global RNG (dropout, ...) of a fresh run
        for epoch in range(self.epoch, self.config.epochs):
            record = {"epoch": epoch + 1, "lr": self.optimizer.param_groups[0]["lr"], **self._run_epoch(epoch)}
            record.update(self.validate() if self.dist.is_main else {})
            self.epoch = epoch + 1
            self.history.append(record)
            if self.dist.is_main:
                self._checkpoint(record)
                self._log_event(record)
                print(_summary(record), file=sys.stderr, flush=True)
        if self.dist.is_main and self.history:
            self._plot_curves()
        if self._events is not None:
            self._events.close()
        return self.history

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

        plot_training_curves(self.history, path=self.out / "curves.png").clear()

    def _checkpoint(self, record: dict) -> None:
        score = 1.0 - record["val_top1"] if "val_top1" in record else record.get("val_rel_l2", record["train_loss"])
        improved = score < self.best
        self.best = min(self.best, score)
        state = self.state_dict()
        ckpt.save_checkpoint(self.out / "last.pt", state)
        if improved:
            ckpt.save_checkpoint(self.out / "best.pt", state)
        with atomic_path(self.out / "history.json") as tmp:
            tmp.write_text(json.dumps(self.history, indent=1))
        _write_csv(self.out / "metrics.csv", self.history)

    def _fail(self, what: str) -> None:
        last = self.out / "last.pt"
        kept = f"the last good checkpoint {last} (epoch {self.epoch}) is kept" if last.exists() else "no checkpoint was written"
        raise NonFiniteLossError(f"training stopped: {what}; {kept}")

    # -- state -----------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """Everything needed to resume, as plain values and tensors (``weights_only``-loadable)."""
        return {
            "format": 1, "model": ckpt.tensor_state(unwrap(self.model)), "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(), "epoch": self.epoch, "best": self.best,
            "first_loss": self.first_loss,
            "history": self.history, "rng": ckpt.rng_state(), "meta": self.meta,
            "train_config": dataclasses.asdict(self.config),
            "normalizers": {k: (None if v is None else v.state_dict()) for k, v in self.normalizers.items()},
        }

    def load(self, path: str | Path) -> None:
        """Restore model, optimizer, scheduler, epoch, history and RNG states from a checkpoint."""
        state = ckpt.load_checkpoint(path, map_location=self.dist.device)
        unwrap(self.model).load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.epoch, self.best, self.history = state["epoch"], state["best"], list(state["history"])
        self.first_loss = state.get("first_loss")
        ckpt.set_rng_state(state["rng"])


_METRICS = {"rel_l2": evaluation.rel_l2, "rel_l1": evaluation.rel_l1,
            "rel_l2_spectral": evaluation.rel_l2_spectral, "nrmse_range": evaluation.nrmse_range}
_CLASS_METRICS = {"cross_entropy": evaluation.cross_entropy, "top1": partial(evaluation.top_k_accuracy, k=1),
                  "top5": partial(evaluation.top_k_accuracy, k=5)}


def loss_name(loss: str, classify: bool) -> str:
    """The loss ``loss`` names (``auto``: cross-entropy for classification, else rel_l2), checked against the task."""
    name = ("cross_entropy" if classify else "rel_l2") if loss == "auto" else loss
    if (name == "cross_entropy") != classify:
        expected = "cross_entropy (or auto) for class labels" if classify else f"one of {sorted(LOSSES)} (or auto) for fields"
        raise ValueError(f"--loss: expected {expected}, found {loss!r}")
    return name


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
