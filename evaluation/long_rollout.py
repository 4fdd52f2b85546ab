"""Scores of a long autoregressive rollout, from values per (sample, step) (:func:`step_scores`, kept batch by batch
by :class:`evaluation.MetricAccumulator`):

- :func:`window_means`: a per-step error averaged over The Well's windows of steps 1, 2–5, 6–12 and 13–30 (its
  leaderboard's rollout VRMSE columns), over the steps the rollout reaches;
- :func:`correlation_times`: per trajectory, the first step whose correlation with the truth (The Well's Pearson
  r over space, averaged over the variables) drops below each threshold, as in PDE-Refiner (Lippe et al. 2023)
  its "high-correlation time"; each trajectory's own crossing, summarised by the median and quartiles;
- :func:`drift`: per step, the error of each variable's conserved quantities against the truth's at that step:
  its mass (spatial mean; as a fraction of the truth's mean absolute value) and its energy (mean square; relative,
  signed: above 0 the prediction gains energy, below it loses it). For a vorticity field the mean square is its
  enstrophy; the truth itself need not conserve them (forcing, viscosity), so the drift is against it.

Example:
    >>> scores = step_scores(pred, true)                # {"vrmse": (sample, step), "pearson": ..., "mass:u": ...}
    >>> correlation_times(scores["pearson"])            # {0.95: {"median": 7.0, ...}, ...}
"""

from __future__ import annotations

import math

import numpy as np
import xarray as xr

from evaluation.well import pearson, vrmse
from pde_data.core.model import SAMPLE, TIME, spatial_dims

__all__ = ["WINDOWS", "THRESHOLDS", "step_scores", "window_means", "crossing_steps", "correlation_times", "drift",
           "rollout_scores"]

#: The Well's rollout windows (first and last step, 1-based, inclusive)
WINDOWS = ((1, 1), (2, 5), (6, 12), (13, 30))
#: the correlations whose crossing times are reported
THRESHOLDS = (0.95, 0.9, 0.8)


def step_scores(pred: xr.Dataset, true: xr.Dataset) -> dict[str, np.ndarray]:
    """``(sample, step)`` arrays of the rollout ``pred`` against ``true`` (data-model Datasets with a ``time`` dim,
    the scored frames only): ``"vrmse"`` and ``"pearson"`` averaged over variables and channels, and per variable
    ``v`` its spatial mean and mean square, ``"mass:v"``, ``"energy:v"``, of the prediction, and ``"true_mass:v"``,
    ``"true_energy:v"``, ``"true_abs:v"`` (mean absolute value) of the truth."""
    out = {"vrmse": _per_step(vrmse(pred, true, reduce="none")),
           "pearson": _per_step(pearson(pred, true, reduce="none"))}
    for name in true.data_vars:
        dims = spatial_dims(true[name])
        p, t = pred[name].astype("float64"), true[name].astype("float64")
        for key, value in (("mass", p.mean(dims)), ("energy", np.square(p).mean(dims)), ("true_mass", t.mean(dims)),
                           ("true_energy", np.square(t).mean(dims)), ("true_abs", np.abs(t).mean(dims))):
            out[f"{key}:{name}"] = _per_step(value.transpose(SAMPLE, TIME, ...).values)
    return out


def _per_step(values) -> np.ndarray:
    """``(sample, step, ...)`` averaged over what follows the step."""
    values = np.asarray(values, dtype=np.float64)
    return values.reshape(values.shape[0], values.shape[1], -1).mean(axis=2)


def window_means(per_step: np.ndarray, windows=WINDOWS) -> dict[str, np.ndarray]:
    """``{"a-b": (sample,)}``: each sample's mean of ``per_step`` ``(sample, step)`` over the steps ``a..b`` of each
    window whose first step the rollout reaches (``b`` cut to the last step; a one-step window is named ``"a"``)."""
    n = per_step.shape[1]
    out = {}
    for first, last in windows:
        if first <= n:
            last = min(last, n)
            out[str(first) if first == last else f"{first}-{last}"] = per_step[:, first - 1:last].mean(axis=1)
    return out


def crossing_steps(correlation: np.ndarray, threshold: float) -> np.ndarray:
    """``(sample,)``: each trajectory's first step (1-based) whose ``correlation`` ``(sample, step)`` is below
    ``threshold`` (NaN counts as below), ``inf`` where it never is."""
    below = ~(correlation >= threshold)
    first = np.argmax(below, axis=1).astype(np.float64) + 1.0
    first[~below.any(axis=1)] = math.inf
    return first


def correlation_times(correlation: np.ndarray, thresholds=THRESHOLDS) -> dict[float, dict[str, float]]:
    """Per threshold the trajectories' crossing steps (:func:`crossing_steps`) summarised: ``median``, ``q25``,
    ``q75`` (``inf`` where more than that share never crosses), ``never`` (trajectories that stay above it to the
    last step) and ``steps`` (the rollout's length)."""
    out = {}
    for threshold in thresholds:
        steps = crossing_steps(correlation, threshold)
        q25, median, q75 = np.quantile(steps, [0.25, 0.5, 0.75], method="lower")
        out[threshold] = {"median": float(median), "q25": float(q25), "q75": float(q75),
                          "never": int(np.isinf(steps).sum()), "steps": int(correlation.shape[1])}
    return out


def drift(scores: dict[str, np.ndarray]) -> dict[str, dict[str, list[float]]]:
    """``{variable: {"mass": [per step], "energy": [per step]}}`` from :func:`step_scores`' arrays (joined over
    batches): the mean over samples of ``|mass - true_mass| / true_abs`` and of ``energy / true_energy - 1``."""
    out = {}
    for key in (k for k in scores if k.startswith("mass:")):
        name = key.split(":", 1)[1]
        mass = np.abs(scores[key] - scores[f"true_mass:{name}"]) / scores[f"true_abs:{name}"]
        energy = scores[f"energy:{name}"] / scores[f"true_energy:{name}"] - 1.0
        out[name] = {"mass": mass.mean(axis=0).tolist(), "energy": energy.mean(axis=0).tolist()}
    return out


def rollout_scores(arrays: dict[str, np.ndarray], *, resamples: int = 1000, seed: int = 0) -> dict:
    """What an evaluation reports of a rollout, from :meth:`evaluation.MetricAccumulator.step_arrays`:
    ``{"windows": {metric: {window: {"value", "interval"}}}, "correlation_time": {threshold: ...},
    "drift": {variable: ...}}``; the windows' means over samples with their bootstrap intervals (``resamples``
    0: none). Without The Well's arrays (a sequence rollout), the rel. L2 windows alone."""
    from evaluation.bootstrap import bootstrap_interval

    windows = {}
    for metric in (m for m in ("vrmse", "rel_l2") if m in arrays):
        windows[metric] = {
            name: {"value": float(values.mean()),
                   "interval": list(bootstrap_interval(values, resamples=resamples, seed=seed)) if resamples else None}
            for name, values in window_means(arrays[metric]).items()}
    out: dict = {"windows": windows}
    if "pearson" in arrays:
        out["correlation_time"] = {str(k): v for k, v in correlation_times(arrays["pearson"]).items()}
        out["drift"] = drift(arrays)
    return out
