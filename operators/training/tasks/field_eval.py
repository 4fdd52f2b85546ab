"""Scoring and predicting with a field run: steady predictions, or rollouts from the first ``window`` frames.

Metrics accumulate per batch (:class:`evaluation.MetricAccumulator`) with the PDEBench suite's whole-set
definitions, pooled over the target variables and, when there are several, per variable; the mean
predictor (every output channel's training mean, the shift of a gaussian normalizer) is scored beside the
model. Predictions are written batch by batch to ``pred.nc`` with the data's coordinates (memory: one
batch). Window runs also report the rel. L2 error of every rollout step (``rollout.csv``).
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Iterator

import numpy as np
import torch
import xarray as xr

import evaluation
import pde_data
from evaluation.bootstrap import LEVEL
from evaluation.by_parameter import by_parameter
from evaluation.long_rollout import rollout_scores
from pde_data import atomic_path
from pde_data.core.model import SAMPLE, TIME

__all__ = ["evaluate_fields", "predict_fields"]


def _mean_predictor(task, pred: torch.Tensor) -> torch.Tensor | None:
    """The mean predictor in ``pred``'s layout (a window run's given frames kept), or None."""
    m = task.spec.task.window or 0
    mean = task.normalizers.mean_prediction(pred[:, m:])
    return None if mean is None else torch.cat([pred[:, :m], mean], dim=1)


def predict_fields(task, model, source: pde_data.Source, samples: np.ndarray,
                 options) -> Iterator[tuple[np.ndarray, xr.Dataset]]:
    """``(chunk, predictions)`` of ``samples`` from the inputs alone (:meth:`Task.predict`)."""
    ds = source.dataset
    steps = task.rollout_steps(ds.sizes.get(TIME, 0), options.steps, truth=False)
    like = task.template(ds, steps)
    for chunk, batch in _batches(task.dataset(source, samples, targets=False, steps=steps), samples, options):
        pred = task.predict_physical(model, batch, steps, options.device)
        yield chunk, pde_data.from_tensor(pred, like.isel({SAMPLE: chunk}), list(task.spec.data.targets))


def _batches(data, samples: np.ndarray, options) -> Iterator[tuple[np.ndarray, pde_data.Batch]]:
    """``(the source's sample indices, their batch)`` of ``data`` (one item per sample), ``options.batch_size`` at
    a time."""
    for start in range(0, len(samples), options.batch_size):
        stop = min(start + options.batch_size, len(samples))
        yield samples[start:stop], data.read_batch(list(range(start, stop)))


class _Scores:
    """Accumulators of the model, the mean predictor and each variable (several targets only)."""

    def __init__(self, variables: list[str], initial_step: int, baseline: bool):
        make = lambda: evaluation.MetricAccumulator(window=initial_step)  # noqa: E731
        self.model, self.baseline = make(), make() if baseline else None
        self.variables = {v: make() for v in variables} if len(variables) > 1 else {}

    def update(self, pred: xr.Dataset, true: xr.Dataset, mean: xr.Dataset | None) -> None:
        self.model.update(pred, true)
        if self.baseline is not None and mean is not None:
            self.baseline.update(mean, true)
        for name, acc in self.variables.items():
            acc.update(pred[[name]], true[[name]])

    def result(self) -> dict:
        out = {"metrics": self.model.result()}
        if self.baseline is not None:
            out["baseline"] = {"mean_predictor": self.baseline.result()}
        if self.variables:
            out["per_variable"] = {name: acc.result() for name, acc in self.variables.items()}
        return out


def evaluate_fields(task, model, source: pde_data.Source, samples: np.ndarray, options) -> tuple[dict, list[Path]]:
    """``({"metrics", ["baseline"], ["per_variable"], ["rollout"]}, files)`` of a field run on ``samples`` of
    ``source`` (module docstring)."""
    ds, variables = source.dataset, list(task.spec.data.targets)
    steps = task.rollout_steps(ds.sizes.get(TIME, 0), options.steps, truth=True)
    like = task.template(ds, steps)
    m = task.spec.task.window or 0
    scores = _Scores(variables, m, task.normalizers.has_mean)
    by_sample = _PerSample(task)
    out, first, start = Path(options.out), None, 0
    with _writer(out / "pred.nc", like, variables, samples, options.write) as writer:
        for chunk, batch in _batches(task.dataset(source, samples, steps=steps), samples, options):
            pred, truth = task.predict_physical(model, batch, steps, options.device), task.truth(batch)
            by_sample.add(pred[:, m:], truth[:, m:], batch)  # the predicted frames (all of a steady prediction)
            here, mean = like.isel({SAMPLE: chunk}), _mean_predictor(task, pred)
            pred_ds, true_ds = (pde_data.from_tensor(t, here, variables) for t in (pred, truth))
            scores.update(pred_ds, true_ds, None if mean is None else pde_data.from_tensor(mean, here, variables))
            if writer is not None:
                writer.write(start, pred_ds, sample_ids=chunk)
            first, start = first or (pred_ds.isel({SAMPLE: [0]}), true_ds.isel({SAMPLE: [0]})), start + len(chunk)
    result = scores.result()
    if options.bootstrap:
        result["intervals"] = scores.model.intervals(resamples=options.bootstrap, seed=options.seed)
        result["bootstrap"] = {"resamples": options.bootstrap, "seed": options.seed, "level": LEVEL}
    files = [out / "pred.nc"] if options.write else []
    if task.spec.data.condition:
        result["per_parameter"] = by_sample.groups()
        if options.write:
            files.append(_per_parameter_csv(out, result["per_parameter"]))
    if steps:
        per_step, mean = scores.model.per_step()
        long = rollout_scores(scores.model.step_arrays(), resamples=options.bootstrap, seed=options.seed)
        result["rollout"] = {"steps": steps, "per_step_rel_l2": [float(v) for v in per_step],
                             "mean_rel_l2": float(mean), **long}
        if options.write:
            files.append(_rollout_csv(out, result["rollout"]["per_step_rel_l2"]))
    if options.write and options.plots:
        files += _plots(out, f"{options.name} on {Path(source.name).name}", result, *first, sample=int(samples[0]))
        files += [by_sample.plot(out, name, f"{options.name} on {Path(source.name).name}")
                  for name in task.spec.data.condition]
    return result, files


class _PerSample:
    """Each scored sample's relative L2 error and PDE parameters (a conditioned run's), grouped by each parameter's
    value at the end (:func:`evaluation.by_parameter.by_parameter`, against the training range)."""

    def __init__(self, task):
        self.names, self.ranges = list(task.spec.data.condition), task.normalizers.params_range
        self.errors: list[np.ndarray] = []
        self.values: list[np.ndarray] = []

    def add(self, pred: torch.Tensor, true: torch.Tensor, batch: pde_data.Batch) -> None:
        if self.names:
            self.errors.append(evaluation.rel_l2(pred, true, reduce="none").double().numpy())
            self.values.append(batch.params.double().numpy())

    def groups(self) -> dict[str, dict]:
        """``{parameter: {"train_range": [low, high], "groups": [group, ...]}}`` (groups:
        :class:`evaluation.by_parameter.ParameterGroup` as dicts)."""
        errors, values = np.concatenate(self.errors), np.concatenate(self.values)
        return {name: {"train_range": list(self.ranges[k]),
                       "groups": [g.to_dict() for g in by_parameter(values[:, k], errors, self.ranges[k])]}
                for k, name in enumerate(self.names)}

    def plot(self, out: Path, name: str, run: str) -> Path:
        """``error_by_NAME.png``: each sample's error against its value, the groups' means, the training range."""
        from evaluation import plots

        import matplotlib.pyplot as plt

        k, path = self.names.index(name), out / f"error_by_{name}.png"
        values, errors = np.concatenate(self.values)[:, k], np.concatenate(self.errors)
        plt.close(plots.plot_parameter_errors(values, errors, self.ranges[k], name=name, path=path,
                                              title=f"{run}: relative L2 error against {name}"))
        return path


def _per_parameter_csv(out: Path, groups: dict[str, dict]) -> Path:
    lines = ["parameter,low,high,value,samples,rel_l2,where"]
    lines += [f"{name},{g['low']},{g['high']},{g['value']},{g['samples']},{g['error']},{g['where']}"
              for name, part in groups.items() for g in part["groups"]]
    with atomic_path(out / "per_parameter.csv") as tmp:
        tmp.write_text("\n".join(lines) + "\n")
    return out / "per_parameter.csv"


def _writer(path: Path, like: xr.Dataset, variables, samples, write: bool):
    if not write:
        return contextlib.nullcontext()
    return pde_data.PredictionWriter(path, like.isel({SAMPLE: samples[:1]}), variables, len(samples))


def _rollout_csv(out: Path, per_step: list[float]) -> Path:
    lines = ["step,rel_l2"] + [f"{k + 1},{v}" for k, v in enumerate(per_step)]
    with atomic_path(out / "rollout.csv") as tmp:
        tmp.write_text("\n".join(lines) + "\n")
    return out / "rollout.csv"


def _plots(out: Path, run: str, result: dict, pred: xr.Dataset, true: xr.Dataset, *, sample: int) -> list[Path]:
    """``fields.png`` (the first scored sample's first variable at the last rollout step), ``rollout.png``,
    ``rollout_spectra.png`` (the spectra at the first, middle and last rollout steps) and ``spectra.png``; each
    title names ``run`` (the run and the data), what is shown, the variable, the source's
    sample index and the step."""
    from evaluation import plots  # matplotlib only when plotting

    import matplotlib.pyplot as plt

    name = next(iter(true.data_vars))
    p, t = pred[name].isel({SAMPLE: 0}), true[name].isel({SAMPLE: 0})
    what = f"{name}, sample {sample}"
    written = []
    if TIME in p.dims:
        steps = result["rollout"]["steps"]
        shown = sorted({1, (steps + 1) // 2, steps})
        rollout = slice(p.sizes[TIME] - steps, None)  # the predicted frames, after the given ones
        if p.ndim in (2, 3):  # (time, x) or (time, x, y)
            plt.close(plots.plot_rollout_spectra(p.isel({TIME: rollout}).values, t.isel({TIME: rollout}).values,
                                                 shown, path=out / "rollout_spectra.png",
                                                 title=f"{run}: power spectra of {what} at rollout steps "
                                                       f"{', '.join(map(str, shown))}"))
            written.append(out / "rollout_spectra.png")
        p, t = p.isel({TIME: -1}), t.isel({TIME: -1})
        what += f", rollout step {steps} of {steps} (the last)"
        plt.close(plots.plot_rollout({run: result["rollout"]["per_step_rel_l2"]}, path=out / "rollout.png",
                                     title=f"{run}: relative L2 error of every rollout step ({steps} steps)"))
        written.append(out / "rollout.png")
    grid = {d: p[d].values for d in ("x", "y") if d in p.coords}
    plt.close(plots.plot_fields(p.values, t.values, title=f"{run}: {what}", coords=grid, path=out / "fields.png"))
    written.append(out / "fields.png")
    if p.ndim in (1, 2):
        plt.close(plots.plot_spectra(p.values[None], t.values[None], path=out / "spectra.png",
                                     title=f"{run}: power spectra of {what}"))
        written.append(out / "spectra.png")
    return written
