"""Evaluate a trained run on a data file, streaming over its samples in batches.

Which samples: the stored test split (its validation split if the test split is empty) when the file
has the fingerprint of the run's source, wherever it now lies; another file is refused with one line
naming what differs, unless ``all_samples=True`` scores every sample of it (e.g. an out-of-distribution
set). Metrics accumulate per batch (:class:`evaluation.MetricAccumulator`) with the PDEBench suite's
whole-set definitions; predictions are written batch by batch to ``pred.nc`` with the data's
coordinates. Memory is bounded by one batch. Outputs in the run folder: ``metrics.json``,
``pred.nc``, ``rollout.csv`` (per-step relative L2) and PNG plots; the result lists them.

Example:
    >>> result = evaluate_run("runs/ns-chonn", "ns.nc", rollout=40)
    >>> result["rollout"]["mean_rel_l2"], result["metrics"]["nRMSE"], result["files"]
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import xarray as xr

import evaluation
import pde_data
from operators.rollout import rollout as autoregress
from operators.training.evaluate_classes import classify_samples, write_predicted_classes
from operators.training.run import LoadedRun, check_source, load_run
from pde_data import atomic_path
from pde_data.model import SAMPLE, TIME

__all__ = ["evaluate_run"]


def _samples(run: LoadedRun, ds: xr.Dataset, data, all_samples: bool) -> tuple[np.ndarray, str]:
    if all_samples:
        return np.arange(ds.sizes[SAMPLE]), "all"
    check_source(run.data, ds, data, "pass --all-samples to score every sample of it")
    name, idx = run.data.splits.scored
    if not idx:
        raise ValueError(f"{os.fspath(data)}: the run stored no test or validation samples to score; "
                         "pass --all-samples to score every sample of the file")
    return np.asarray(idx, dtype=np.int64), name


def _check_variables(run: LoadedRun, ds: xr.Dataset) -> None:
    """One line unless ``ds`` has every input and target variable of the run."""
    rd = run.data
    missing = [v for v in dict.fromkeys((*rd.inputs, *rd.targets)) if v not in ds.data_vars]
    if missing:
        raise ValueError(f"expected the run's variables {sorted(set(rd.inputs) | set(rd.targets))} in the data; "
                         f"missing {missing}, found {list(ds.data_vars)}")


def _decode(normalizer, t):
    return t if normalizer is None else normalizer.decode(t)


@dataclass
class _Batch:
    """One evaluated batch: predicted and true Datasets over the same samples."""

    pred: xr.Dataset
    true: xr.Dataset


class _Evaluator:
    """Predictions of one run on batches of samples (steady pairs, or rollouts from ``m`` frames)."""

    def __init__(self, run: LoadedRun, ds: xr.Dataset, n_steps: int | None, device: torch.device):
        self.run, self.ds, self.device, rd = run, ds, device, run.data
        self.variables = list(rd.targets)
        if rd.windowed:
            n_time, m = ds.sizes[TIME], rd.m
            self.n_steps = n_steps or n_time - m
            if not 1 <= self.n_steps <= n_time - m:
                raise ValueError(f"--rollout: expected 1..{n_time - m} steps ({n_time} frames, {m} given), "
                                 f"found {n_steps}")
            self.time = slice(0, m + self.n_steps)
        elif n_steps is not None:
            raise ValueError("--rollout: the run is a steady (input → target) model, not a time-stepper")

    def like(self, samples: np.ndarray) -> xr.Dataset:
        """The true Dataset of ``samples`` (lazy until read)."""
        where = {SAMPLE: samples}
        if self.run.data.windowed:
            where[TIME] = self.time
        return self.ds[self.variables].isel(where)

    @torch.no_grad()
    def batch(self, samples: np.ndarray) -> _Batch:
        rd, norms = self.run.data, self.run.normalizers
        if rd.windowed:
            frames = pde_data.read_samples(self.ds, rd.inputs, samples, time=self.time)
            given = frames[:, : rd.m]
            encoded = (given if norms["output"] is None else norms["output"].encode(given)).to(self.device)
            pred = _decode(norms["output"], autoregress(self.run.model, encoded, self.n_steps).cpu())
            full = torch.cat([given, pred], dim=1)
            true = frames
        else:
            x = pde_data.read_samples(self.ds, rd.inputs, samples)
            x = (x if norms["input"] is None else norms["input"].encode(x)).to(self.device)
            full = _decode(norms["output"], self.run.model(x).cpu())
            true = pde_data.read_samples(self.ds, rd.targets, samples)
        like = self.like(samples)
        return _Batch(pde_data.from_tensor(full, like, self.variables), pde_data.from_tensor(true, like, self.variables))


def _json_safe(value):
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if isinstance(value, (float, np.floating)):
        return None if math.isnan(value) else float(value)
    return value


def evaluate_run(run_dir: str | os.PathLike, data: str | os.PathLike, *, rollout: int | None = None,
                 which: str = "best", write: bool = True, plots: bool = True, all_samples: bool = False,
                 batch_size: int = 16, device: str | torch.device | None = None) -> dict:
    """Metrics of the run's ``which`` checkpoint on ``data``; time-dependent runs are rolled out
    ``rollout`` steps (default: to the end of the data) from their first ``m`` frames.

    The model runs on ``device`` (default: CUDA if available, else CPU); data are read, and metrics
    computed, on the CPU. Classification runs report top-1/top-5 accuracy and cross-entropy
    (:mod:`operators.training.evaluate_classes`). Returns ``{"data", "samples", "n_samples", "epoch", "metrics", ["rollout"],
    "files"}``; with ``write`` the same goes to ``run_dir/metrics.json`` next to ``pred.nc`` (and
    ``rollout.csv``, PNGs).
    """
    if batch_size < 1:
        raise ValueError(f"batch size: expected a positive integer, found {batch_size}")
    run_dir = Path(run_dir)
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    run, ds = load_run(run_dir, which=which, device=device), pde_data.open_data(data)
    idx, split = _samples(run, ds, data, all_samples)
    _check_variables(run, ds)
    head = {"data": os.fspath(data), "samples": split, "n_samples": int(len(idx)), "epoch": run.epoch}
    if run.data.classifying:
        if rollout is not None:
            raise ValueError("--rollout: the run is a classifier, not a time-stepper")
        metrics, predicted = classify_samples(run, ds, data, idx, batch_size=batch_size, device=device)
        result = _json_safe({**head, "metrics": metrics})
        if write:
            write_predicted_classes(run_dir / "pred.nc", idx, predicted, run.data.targets[0])
        result["files"] = _write(run_dir, result, None, plots=False) if write else []
        return result
    evaluator = _Evaluator(run, ds, rollout, device)
    m = run.data.m if run.data.windowed else 0
    acc = evaluation.MetricAccumulator(initial_step=m)
    first = None
    with _predictions(run_dir / "pred.nc", evaluator, idx, write) as writer:
        for start in range(0, len(idx), batch_size):
            samples = idx[start:start + batch_size]
            out = evaluator.batch(samples)
            acc.update(out.pred, out.true)
            writer.write(start, out.pred, sample_ids=samples)
            first = first or _Batch(out.pred.isel({SAMPLE: [0]}), out.true.isel({SAMPLE: [0]}))
    result = {**head, "metrics": acc.result()}
    if run.data.windowed:
        per_step, mean = acc.per_step()
        result["rollout"] = {"steps": evaluator.n_steps, "per_step_rel_l2": [float(v) for v in per_step],
                             "mean_rel_l2": float(mean)}
    result = _json_safe(result)
    result["files"] = _write(run_dir, result, first, plots) if write else []
    return result


class _NoWriter:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def write(self, *args, **kwargs):
        pass


def _predictions(path: Path, evaluator: _Evaluator, idx: np.ndarray, write: bool):
    if not write:
        return _NoWriter()
    return pde_data.PredictionWriter(path, evaluator.like(idx[:1]), evaluator.variables, len(idx))


def _write(out: Path, result: dict, first: _Batch | None, plots: bool) -> list[str]:
    files = [out / "pred.nc", out / "metrics.json"]
    with atomic_path(out / "metrics.json") as tmp:
        tmp.write_text(json.dumps({**result, "files": [str(f) for f in files]}, indent=1))
    if "rollout" in result:
        lines = ["step,rel_l2"] + [f"{k + 1},{v}" for k, v in enumerate(result["rollout"]["per_step_rel_l2"])]
        with atomic_path(out / "rollout.csv") as tmp:
            tmp.write_text("\n".join(lines) + "\n")
        files.append(out / "rollout.csv")
    if plots:
        files += _plots(out, result, first.pred, first.true)
    return [str(f) for f in files]


def _plots(out: Path, result: dict, pred, true) -> list[Path]:
    from evaluation import plots  # matplotlib only when plotting

    import matplotlib.pyplot as plt

    name = next(iter(true.data_vars))
    p, t = pred[name].isel({SAMPLE: 0}), true[name].isel({SAMPLE: 0})
    written = []
    if TIME in p.dims:
        p, t = p.isel({TIME: -1}), t.isel({TIME: -1})
        plt.close(plots.plot_rollout({"model": result["rollout"]["per_step_rel_l2"]}, path=out / "rollout.png"))
        written.append(out / "rollout.png")
    plt.close(plots.plot_fields(p.values, t.values, title=f"{name}, sample 0", path=out / "fields.png"))
    written.append(out / "fields.png")
    if p.ndim in (1, 2):
        plt.close(plots.plot_spectra(p.values[None], t.values[None], path=out / "spectra.png"))
        written.append(out / "spectra.png")
    return written
