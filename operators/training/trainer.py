"""The trainer: seeded, resumable, distributed training of one model on in-memory tensors.

Data order is a function of ``(seed, epoch)`` alone (a seeded permutation per epoch), so a run resumed
from its last checkpoint (model, optimizer, scheduler, RNG states, epoch) ends with the same weights as
an uninterrupted one. Under ``torchrun`` every process sees the same global batch order and takes a
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
from pathlib import Path

import torch
from torch import nn
from tqdm import tqdm

import evaluation
from operators.rollout import rollout
from operators.training import checkpoint as ckpt
from operators.training.distributed import DistInfo, all_reduce_sum, unwrap, wrap
from operators.training.optim import make_optimizer, make_scheduler
from pde_data import atomic_path

__all__ = ["TrainConfig", "Trainer", "NonFiniteLossError", "epoch_order"]

LOSSES = {"rel_l2": evaluation.rel_l2, "rel_l1": evaluation.rel_l1}


@dataclass(frozen=True)
class TrainConfig:
    """Optimisation settings (the CHONN paper's per-benchmark values are in 003, Methods)."""

    epochs: int = 10
    batch_size: int = 20
    lr: float = 1e-3
    weight_decay: float = 1e-4
    optimizer: str = "adamw"
    scheduler: str = "step"
    step_size: int = 100
    gamma: float = 0.5
    loss: str = "rel_l2"
    grad_clip: float | None = None
    amp: bool = False
    seed: int = 0
    pushforward: bool = False
    progress: bool = True


class NonFiniteLossError(RuntimeError):
    """Training produced a NaN/inf loss or gradient; the last good checkpoint was left in place."""


def epoch_order(n: int, seed: int, epoch: int) -> torch.Tensor:
    """The sample order of ``epoch``: a permutation of ``range(n)`` determined by ``(seed, epoch)``."""
    gen = torch.Generator().manual_seed(int(seed) * 1_000_003 + int(epoch))
    return torch.randperm(n, generator=gen)


def _decode(normalizer, t: torch.Tensor) -> torch.Tensor:
    return t if normalizer is None else normalizer.decode(t)


class Trainer:
    """Train ``model`` on ``train = (inputs, targets)`` and validate on ``val`` each epoch.

    Args:
        model: the (unwrapped) module; it is moved to ``dist.device`` and wrapped in DDP if distributed.
        train, val: encoded tensors ``(n, ...)``; steady ``(n, C_in, *s)``/``(n, C_out, *s)``, windows
            ``(n, m, C, *s)``/``(n, horizon, C, *s)``.
        config: :class:`TrainConfig`.
        out_dir: run folder for ``last.pt``, ``best.pt`` and ``history.json`` (written by rank 0).
        meta: plain description stored in checkpoints: ``{"model": model_spec, "data": data_info}``.
        normalizers: ``{"input", "output"}`` → :class:`pde_data.Normalizer` or ``None``.
        dist: this process's :class:`DistInfo` (default: single CPU process).
    """

    def __init__(self, model: nn.Module, train, val, config: TrainConfig, out_dir, *, meta: dict,
                 normalizers: dict | None = None, dist: DistInfo | None = None):
        if config.loss not in LOSSES:
            raise ValueError(f"loss: expected one of {sorted(LOSSES)}, found {config.loss!r}")
        self.dist = dist or DistInfo()
        self.config, self.meta, self.out = config, meta, Path(out_dir)
        self.normalizers = normalizers or {"input": None, "output": None}
        self.windowed = meta.get("data", {}).get("kind") == "window"
        self.model = wrap(model.to(self.dist.device), self.dist)
        self.train_x, self.train_y = train
        self.val = val
        self.optimizer = make_optimizer(self.model.parameters(), config)
        self.scheduler = make_scheduler(self.optimizer, config)
        self.epoch, self.best, self.history = 0, math.inf, []

    # -- forward and loss ------------------------------------------------------------------------
    def _predict(self, x: torch.Tensor, y_like: torch.Tensor, pushforward: bool = False,
                 module: nn.Module | None = None) -> torch.Tensor:
        dev, module = self.dist.device, module or self.model
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=self.config.amp and dev.type == "cuda"):
            if self.windowed:
                pred = rollout(module, x, y_like.shape[1], pushforward=pushforward)
            else:
                pred = module(x)
        return pred.float()

    def _sample_losses(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        pred = self._predict(x, y, pushforward=self.config.pushforward)
        if not (torch.isfinite(pred).all() and torch.isfinite(y).all()):
            # the metrics refuse non-finite input; a NaN loss makes every process stop together
            return torch.full((len(y),), math.nan, device=y.device)
        out = self.normalizers.get("output")
        return LOSSES[self.config.loss](_decode(out, pred), _decode(out, y), reduce="none")

    # -- one epoch -------------------------------------------------------------------------------
    def _local_slice(self, batch: torch.Tensor) -> torch.Tensor:
        return batch.tensor_split(self.dist.world_size)[self.dist.rank]

    def _step(self, idx: torch.Tensor, n_global: int, where: str) -> float:
        dev = self.dist.device
        x, y = self.train_x[idx].to(dev), self.train_y[idx].to(dev)
        local = self._sample_losses(x, y).sum()
        total = all_reduce_sum(local.detach(), self.dist)
        if not torch.isfinite(total):
            self._fail(f"non-finite loss ({total.item()}) {where}")
        self.optimizer.zero_grad(set_to_none=True)
        (local * (self.dist.world_size / n_global)).backward()
        clip = self.config.grad_clip if self.config.grad_clip else math.inf
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), clip)
        if not torch.isfinite(norm):
            self._fail(f"non-finite gradient norm ({norm.item()}) {where}")
        self.optimizer.step()
        return total.item()

    def _run_epoch(self, epoch: int) -> dict:
        n, bs = len(self.train_x), self.config.batch_size
        order = epoch_order(n, self.config.seed, epoch)
        batches = [b for b in order.split(bs) if len(b) >= self.dist.world_size]
        self.model.train()
        bar = tqdm(batches, desc=f"epoch {epoch + 1}/{self.config.epochs}", file=sys.stderr, leave=False,
                   disable=not (self.config.progress and self.dist.is_main))
        start, seen, loss_sum = time.perf_counter(), 0, 0.0
        for k, batch in enumerate(bar):
            loss_sum += self._step(self._local_slice(batch), len(batch), f"at epoch {epoch + 1}, step {k + 1}")
            seen += len(batch)
            bar.set_postfix(loss=f"{loss_sum / seen:.4g}", samples_per_s=f"{seen / (time.perf_counter() - start):.1f}")
        self.scheduler.step()
        elapsed = time.perf_counter() - start
        return {"train_loss": loss_sum / max(seen, 1), "samples_per_s": seen / elapsed, "epoch_s": elapsed}

    # -- validation ------------------------------------------------------------------------------
    @torch.no_grad()
    def predict(self, x: torch.Tensor, y_like: torch.Tensor, *, batch_size: int | None = None) -> torch.Tensor:
        """Decoded predictions for encoded inputs ``x`` (targets shaped like ``y_like``), in batches.

        Runs the unwrapped module: rank 0 validates alone, and a DDP forward would broadcast buffers.
        """
        module = unwrap(self.model).eval()
        bs, dev, out = batch_size or self.config.batch_size, self.dist.device, []
        for xb, yb in zip(x.split(bs), y_like.split(bs)):
            out.append(self._predict(xb.to(dev), yb, module=module).cpu())
        return _decode(self.normalizers.get("output"), torch.cat(out))

    def validate(self) -> dict:
        """``val_*`` metrics of the current model on the validation tensors (physical units)."""
        if self.val is None or len(self.val[0]) == 0:
            return {}
        x, y = self.val
        pred, true = self.predict(x, y), _decode(self.normalizers.get("output"), y)
        return {f"val_{name}": float(fn(pred, true)) for name, fn in _METRICS.items()}

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
                print(_summary(record), file=sys.stderr, flush=True)
        return self.history

    def _checkpoint(self, record: dict) -> None:
        score = record.get("val_rel_l2", record["train_loss"])
        improved = score < self.best
        self.best = min(self.best, score)
        state = self.state_dict()
        ckpt.save_checkpoint(self.out / "last.pt", state)
        if improved:
            ckpt.save_checkpoint(self.out / "best.pt", state)
        with atomic_path(self.out / "history.json") as tmp:
            tmp.write_text(json.dumps(self.history, indent=1))

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
        ckpt.set_rng_state(state["rng"])


_METRICS = {"rel_l2": evaluation.rel_l2, "rel_l1": evaluation.rel_l1,
            "rel_l2_spectral": evaluation.rel_l2_spectral, "nrmse_range": evaluation.nrmse_range}


def _summary(record: dict) -> str:
    parts = [f"epoch {record['epoch']}", f"loss {record['train_loss']:.4g}", f"{record['samples_per_s']:.1f} samples/s"]
    parts += [f"{k} {v:.4g}" for k, v in record.items() if k.startswith("val_")]
    return " | ".join(parts)
