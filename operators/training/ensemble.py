"""Several runs scored together as an ensemble (``circuitop evaluate --run A --run B --run C``): each member
evaluated as :func:`~operators.training.evaluate_run` does (its metrics and ``pred.nc`` under ``members/``), then
their predictions read back batch by batch beside the truth: the ensemble mean's metrics (with bootstrap
intervals), the CRPS, the spread, the skill of the mean and the spread-skill ratio (:mod:`evaluation.ensemble`),
over every scored frame and, for window runs, per rollout step. The members must have scored the same samples
(the same test split, or ``samples="all"`` of one file).

Example:
    >>> result = evaluate_ensemble(["runs/a", "runs/b", "runs/c"], "ns_test.nc", samples="all")
    >>> result["crps"], result["spread_skill"], result["ensemble_mean"]["rel_l2"]
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
import xarray as xr

import evaluation
import pde_data
from evaluation.bootstrap import LEVEL, bootstrap_interval
from evaluation.ensemble import ensemble_scores, spread_skill_ratio
from operators.training.evaluate import evaluate_run, evaluation_folder, json_safe, staged
from operators.training.run import stored_spec, trained_data
from operators.training.spec import SpecError
from operators.training.tasks import EvalOptions
from pde_data.core.model import SAMPLE, TIME

__all__ = ["evaluate_ensemble"]


def evaluate_ensemble(run_dirs: Sequence[str | os.PathLike], data: str | os.PathLike | None = None, *,
                      samples: str = "test", checkpoint: str = "best", out: str | os.PathLike | None = None,
                      overwrite: bool = False, steps: int | None = EvalOptions.steps,
                      batch_size: int = EvalOptions.batch_size, bootstrap: int = EvalOptions.bootstrap,
                      seed: int = EvalOptions.seed, device: str | torch.device | None = None) -> dict:
    """The ensemble of ``run_dirs`` on ``samples`` of ``data`` (the first run's own data by default); writes
    ``out`` (default ``FIRST_RUN/evaluations/ensemble-<n>-<file>-<samples>``): ``metrics.json``,
    ``metrics.md`` and ``members/<k>-<run>/`` each member's evaluation. Returns ``{"members": [{"run",
    "metrics"}], "ensemble_mean", ["intervals"], "crps", ["crps_interval"], "spread", "skill", "spread_skill",
    ["per_step"], "n_members", "n_samples", "data", "out"}``.

    Raises:
        SpecError: fewer than two runs, or members that scored different samples or variables.
    """
    if len(run_dirs) < 2:
        raise SpecError("run_dirs", "two runs or more for an ensemble", f"{len(run_dirs)}")
    name = f"ensemble-{len(run_dirs)}-{Path(os.fspath(data or 'own')).name}"
    folder = Path(out) if out is not None else evaluation_folder(run_dirs[0], name, samples, checkpoint)
    with staged(folder, overwrite) as staging:
        members = [evaluate_run(run, data, samples=samples, checkpoint=checkpoint, steps=steps, plots=False,
                                out=Path(staging) / "members" / f"{k}-{Path(run).name}", batch_size=batch_size,
                                bootstrap=0, device=device)
                   for k, run in enumerate(run_dirs)]
        preds = [xr.open_dataset(Path(staging) / "members" / f"{k}-{Path(run).name}" / "pred.nc")
                 for k, run in enumerate(run_dirs)]
        try:
            _check_same(preds, run_dirs)
            spec = stored_spec(run_dirs[0], checkpoint=checkpoint)
            source = pde_data.open_source(data) if data is not None else trained_data(spec)[1]
            result = _scores(preds, source, spec.task.window or 0, batch_size, bootstrap, seed)
        finally:
            for pred in preds:
                pred.close()
        result = json_safe({"data": members[0]["data"], "samples": samples, "n_members": len(run_dirs),
                            "members": [{"run": os.fspath(r), "metrics": m["metrics"]}
                                        for r, m in zip(run_dirs, members)],
                            **result, "out": str(folder)})
        (Path(staging) / "metrics.json").write_text(json.dumps(result, indent=1))
        (Path(staging) / "metrics.md").write_text(_markdown(result))
    return result


def _check_same(preds: list[xr.Dataset], run_dirs) -> None:
    first = preds[0]
    for pred, run in zip(preds[1:], run_dirs[1:]):
        if not np.array_equal(pred[SAMPLE].values, first[SAMPLE].values) or dict(pred.sizes) != dict(first.sizes) \
                or list(pred.data_vars) != list(first.data_vars):
            raise SpecError("run_dirs", f"members that scored the same samples and variables as {run_dirs[0]} "
                            f"({first.sizes[SAMPLE]} samples of {list(first.data_vars)}; runs with other test splits "
                            "take samples='all' of one file)", f"{run}: {pred.sizes[SAMPLE]} samples of "
                            f"{list(pred.data_vars)}")


def _scores(preds: list[xr.Dataset], source: pde_data.Source, window: int, batch_size: int, bootstrap: int,
            seed: int) -> dict:
    """The ensemble's numbers, streamed over the samples ``batch_size`` at a time."""
    names, ids = list(preds[0].data_vars), preds[0][SAMPLE].values
    acc, per_sample, per_step = evaluation.MetricAccumulator(window=window), [], []
    for start in range(0, len(ids), batch_size):
        rows = slice(start, start + batch_size)
        members = [p[names].isel({SAMPLE: rows}).load() for p in preds]
        truth = source.dataset[names].isel({SAMPLE: ids[rows]})
        if TIME in members[0].dims:
            truth = truth.isel({TIME: slice(0, members[0].sizes[TIME])})
        truth = truth.load().assign_coords({SAMPLE: members[0][SAMPLE].values})
        acc.update(sum(members) / len(members), truth)
        stacked = torch.stack([pde_data.to_tensor(m, names, dtype=torch.float64) for m in members])
        target = pde_data.to_tensor(truth, names, dtype=torch.float64)  # (batch, [time,] C, ...); members (M, ...)
        if TIME in truth.dims:
            stacked, target = stacked[:, :, window:], target[:, window:]
            steps = ensemble_scores(stacked.flatten(1, 2), target.flatten(0, 1))  # each (batch * steps,)
            per_step.append(torch.stack(steps).reshape(3, *target.shape[:2]))  # (3, batch, steps)
        per_sample.append(torch.stack(ensemble_scores(stacked, target)))  # (3, batch)
    crps, spread, skill = torch.cat(per_sample, dim=1)
    out = {"ensemble_mean": acc.result(), "crps": float(crps.mean()), "spread": float(spread.mean().sqrt()),
           "skill": float(skill.mean().sqrt()), "spread_skill": spread_skill_ratio(spread, skill, n_members=len(preds))}
    if bootstrap:
        out["intervals"] = acc.intervals(resamples=bootstrap, seed=seed)
        out["crps_interval"] = list(bootstrap_interval(crps.numpy(), resamples=bootstrap, seed=seed))
        out["bootstrap"] = {"resamples": bootstrap, "seed": seed, "level": LEVEL}
    if per_step:
        c, s, k = torch.cat(per_step, dim=1)
        out["per_step"] = {"crps": c.mean(0).tolist(),
                           "spread_skill": spread_skill_ratio(s, k, n_members=len(preds), dim=0).tolist()}
    return out


def _markdown(result: dict) -> str:
    lines = [f"# Ensemble of {result['n_members']} runs on {result['data']} ({result['samples']})", "",
             f"CRPS {result['crps']:.6g}, spread {result['spread']:.6g}, skill (RMSE of the mean) "
             f"{result['skill']:.6g}, spread-skill ratio {result['spread_skill']:.4g}", "",
             "| metric | " + " | ".join(Path(m["run"]).name for m in result["members"]) + " | ensemble mean |",
             "|---|" + "---|" * (len(result["members"]) + 1)]
    for key, value in result["ensemble_mean"].items():
        cells = [_number(m["metrics"].get(key)) for m in result["members"]] + [_number(value)]
        lines.append(f"| {key} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _number(value) -> str:
    return "" if value is None else f"{value:.6g}"
