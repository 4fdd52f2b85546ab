"""Scoring a field run over a split: steady predictions, or rollouts from the first ``window`` frames.

Metrics accumulate per batch (:class:`evaluation.MetricAccumulator`) with the PDEBench suite's whole-set
definitions; predictions are written batch by batch to ``pred.nc`` with the data's coordinates (memory:
one batch). Window runs also report the rel. L2 error of every rollout step (``rollout.csv``).
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import numpy as np
import torch
import xarray as xr

import evaluation
import pde_data
from operators.rollout import rollout
from operators.training.spec import SpecError
from pde_data import atomic_path
from pde_data.model import SAMPLE, TIME

__all__ = ["evaluate_fields"]


def _frames(task, ds: xr.Dataset, steps: int | None) -> tuple[int, slice | None]:
    """``(steps, frames read)`` of a window run's rollout (``(0, None)`` for a steady run)."""
    if task.kind != "window":
        if steps is not None:
            raise SpecError("steps", "expected none: the run is a steady (input → target) model, not a time-stepper")
        return 0, None
    n_time, m = ds.sizes[TIME], task.spec.task.window
    chosen = steps or n_time - m
    if not 1 <= chosen <= n_time - m:
        raise SpecError("steps", f"expected 1..{n_time - m} rollout steps ({n_time} frames, {m} given), found {steps}")
    return chosen, slice(0, m + chosen)


@torch.no_grad()
def _predict(task, model, source, samples, steps: int, time: slice | None, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Predicted and true tensors of ``samples`` (windows: the given frames, then the rollout)."""
    spec, norms = task.spec, task.normalizers
    if time is not None:
        true = source.read(spec.data.inputs, samples, time)
        given = true[:, : spec.task.window]
        pred = norms.decode(rollout(model, norms.encode(given).to(device), steps).cpu())
        return torch.cat([given, pred], dim=1), true
    x = norms.encode(source.read(spec.data.inputs, samples)).to(device)
    return norms.decode(model(x).cpu()), source.read(spec.data.targets, samples)


def evaluate_fields(task, model, source: pde_data.Source, samples: np.ndarray, options) -> tuple[dict, list[Path]]:
    """``({"metrics", ["rollout"]}, files)`` of a field run on ``samples`` of ``source`` (module docstring)."""
    ds = source.dataset
    steps, time = _frames(task, ds, options.steps)
    variables = list(task.spec.data.targets)
    where = {} if time is None else {TIME: time}
    like = ds[variables].isel(where)
    acc = evaluation.MetricAccumulator(initial_step=task.spec.task.window or 0)
    out, first = Path(options.out), None
    with _writer(out / "pred.nc", like, variables, samples, options.write) as writer:
        for start in range(0, len(samples), options.batch_size):
            chunk = samples[start:start + options.batch_size]
            pred, true = _predict(task, model, source, chunk, steps, time, options.device)
            here = like.isel({SAMPLE: chunk})
            pred_ds, true_ds = (pde_data.from_tensor(t, here, variables) for t in (pred, true))
            acc.update(pred_ds, true_ds)
            if writer is not None:
                writer.write(start, pred_ds, sample_ids=chunk)
            first = first or (pred_ds.isel({SAMPLE: [0]}), true_ds.isel({SAMPLE: [0]}))
    result = {"metrics": acc.result()}
    files = [out / "pred.nc"] if options.write else []
    if time is not None:
        per_step, mean = acc.per_step()
        result["rollout"] = {"steps": steps, "per_step_rel_l2": [float(v) for v in per_step], "mean_rel_l2": float(mean)}
        if options.write:
            files.append(_rollout_csv(out, result["rollout"]["per_step_rel_l2"]))
    if options.write and options.plots:
        files += _plots(out, result, *first, sample=int(samples[0]))
    return result, files


def _writer(path: Path, like: xr.Dataset, variables, samples, write: bool):
    if not write:
        return contextlib.nullcontext()
    return pde_data.PredictionWriter(path, like.isel({SAMPLE: samples[:1]}), variables, len(samples))


def _rollout_csv(out: Path, per_step: list[float]) -> Path:
    lines = ["step,rel_l2"] + [f"{k + 1},{v}" for k, v in enumerate(per_step)]
    with atomic_path(out / "rollout.csv") as tmp:
        tmp.write_text("\n".join(lines) + "\n")
    return out / "rollout.csv"


def _plots(out: Path, result: dict, pred: xr.Dataset, true: xr.Dataset, *, sample: int) -> list[Path]:
    """``fields.png`` (the first scored sample's first variable at the last rollout step; its title names the
    run, the variable, the source's sample index and the step), ``rollout.png`` (the legend names the run)
    and ``spectra.png``."""
    from evaluation import plots  # matplotlib only when plotting

    import matplotlib.pyplot as plt

    name, run = next(iter(true.data_vars)), out.name
    p, t = pred[name].isel({SAMPLE: 0}), true[name].isel({SAMPLE: 0})
    what = f"{run}: {name}, sample {sample}"
    written = []
    if TIME in p.dims:
        steps = result["rollout"]["steps"]
        p, t = p.isel({TIME: -1}), t.isel({TIME: -1})
        what += f", rollout step {steps} of {steps} (the last)"
        plt.close(plots.plot_rollout({run: result["rollout"]["per_step_rel_l2"]}, path=out / "rollout.png"))
        written.append(out / "rollout.png")
    plt.close(plots.plot_fields(p.values, t.values, title=what, path=out / "fields.png"))
    written.append(out / "fields.png")
    if p.ndim in (1, 2):
        plt.close(plots.plot_spectra(p.values[None], t.values[None], path=out / "spectra.png"))
        written.append(out / "spectra.png")
    return written
