"""Evaluate a trained run on a data file, streaming over its samples in batches.

Which samples: the stored test split (its validation split if the test split is empty) when the file
has the fingerprint of the run's source, wherever it now lies; another file is refused with one line
naming what differs, unless ``all_samples=True`` scores every sample of it (e.g. an out-of-distribution
set). The run's task scores them (:meth:`operators.training.tasks.Task.evaluate`: metrics, ``pred.nc``,
plots); ``metrics.json`` in the run folder holds the result, which lists every file written.

Example:
    >>> result = evaluate_run("runs/ns-chonn", "ns.nc", steps=40)
    >>> result["rollout"]["mean_rel_l2"], result["metrics"]["nRMSE"], result["files"]
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np
import torch

import pde_data
from operators.training.distributed import device_of
from operators.training.run import LoadedRun, check_source, load_run
from operators.training.spec import SpecError
from operators.training.tasks import EvalOptions
from pde_data import atomic_path
from pde_data.model import SAMPLE

__all__ = ["evaluate_run"]


def _samples(run: LoadedRun, source: pde_data.Source, all_samples: bool) -> tuple[np.ndarray, str]:
    if all_samples:
        return np.arange(source.sizes[SAMPLE]), "all"
    check_source(run.spec, source, "pass all_samples=True to score every sample of it")
    name, idx = run.spec.data.splits.scored
    if not idx:
        raise ValueError(f"{source.name}: the run stored no test or validation samples to score; "
                         "pass all_samples=True to score every sample of the file")
    return np.asarray(idx, dtype=np.int64), name


def _check_variables(run: LoadedRun, source: pde_data.Source) -> None:
    """One line unless ``source`` has every input and target variable of the run."""
    data = run.spec.data
    missing = [v for v in dict.fromkeys((*data.inputs, *data.targets)) if v not in source.variables]
    if missing:
        raise ValueError(f"expected the run's variables {sorted(set(data.inputs) | set(data.targets))} in the data; "
                         f"missing {missing}, found {list(source.variables)}")


def _json_safe(value):
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if isinstance(value, (float, np.floating)):
        return None if math.isnan(value) else float(value)
    return value


def evaluate_run(run_dir: str | os.PathLike, data: str | os.PathLike, *, steps: int | None = None,
                 which: str = "best", write: bool = True, plots: bool = True, all_samples: bool = False,
                 batch_size: int = 16, device: str | torch.device | None = None) -> dict:
    """Metrics of the run's ``which`` checkpoint on ``data``; window runs are rolled out ``steps`` steps
    (default: to the end of the data) from their first ``window`` frames.

    The model runs on ``device`` (default: CUDA if available, else CPU); data are read, and metrics
    computed, on the CPU. Returns ``{"data", "samples", "n_samples", "epoch", "metrics", ["rollout"],
    "files"}``; with ``write`` the same goes to ``run_dir/metrics.json`` next to ``pred.nc`` (and plots).
    """
    if batch_size < 1:
        raise SpecError("batch_size", f"expected a positive integer, found {batch_size}")
    run_dir = Path(run_dir)
    device = device_of(device)
    run, source = load_run(run_dir, which=which, device=device), pde_data.open_source(data)
    idx, split = _samples(run, source, all_samples)
    _check_variables(run, source)
    options = EvalOptions(run_dir, steps=steps, batch_size=batch_size, device=device, write=write, plots=plots)
    scored, files = run.task.evaluate(run.model, source, idx, options)
    result = _json_safe({"data": os.fspath(data), "samples": split, "n_samples": int(len(idx)), "epoch": run.epoch,
                         **scored})
    if write:
        files.insert(1, run_dir / "metrics.json")
        with atomic_path(run_dir / "metrics.json") as tmp:
            tmp.write_text(json.dumps({**result, "files": [str(f) for f in files]}, indent=1))
    result["files"] = [str(f) for f in files]
    return result
