"""Figures for reports (CHONN Fig. 4c-d, 5b-c, 5e-f style): fields, rollout curves, spectra, metric bars.

Every function builds a ``matplotlib.figure.Figure`` directly (no pyplot, no display, Agg rendering),
returns it, and writes a PNG atomically when ``path`` is given. This is the only module of the
toolkit that imports matplotlib.
"""

from __future__ import annotations

import math
import os
from typing import Mapping, Sequence

import numpy as np
import torch
import xarray as xr
from matplotlib.figure import Figure

from pde_data import atomic_path
from evaluation.by_parameter import by_parameter
from evaluation.spectra import radial_counts, radial_power

__all__ = ["plot_fields", "plot_rollout", "plot_spectra", "plot_metric_bars", "plot_training_curves",
           "plot_parameter_errors", "plot_resolutions", "plot_rollout_spectra"]


def _numpy(x, name: str) -> np.ndarray:
    if isinstance(x, xr.Dataset):
        raise ValueError(f"{name}: expected one field (a DataArray or array), found a Dataset")
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu().numpy()
    elif isinstance(x, xr.DataArray):
        x = x.values
    return np.asarray(x, dtype=np.float64)


def _pair(pred, true, ndims: tuple[int, ...], expected: str) -> tuple[np.ndarray, np.ndarray]:
    """``pred`` and ``true`` as float64 arrays of one shape with a number of axes in ``ndims``."""
    p, t = _numpy(pred, "pred"), _numpy(true, "true")
    if p.shape != t.shape or p.ndim not in ndims:
        raise ValueError(f"pred and true: expected {expected}, found pred shape {p.shape} and true shape {t.shape}")
    return p, t


def _save(fig: Figure, path: str | os.PathLike | None, title: str = "", **style) -> Figure:
    """``fig`` with ``title`` (if any) as its suptitle, written to ``path`` as a PNG whose ``Title`` text chunk
    is that title (readable back: ``PIL.Image.open(path).text["Title"]``)."""
    if title:
        fig.suptitle(title, **style)
    if path is not None:
        with atomic_path(path) as tmp:  # the figures lay out with "constrained": no tight pass
            fig.savefig(tmp, format="png", dpi=110, metadata={"Title": fig.get_suptitle()})
    return fig


def plot_fields(pred, true, *, title: str = "", coords: Mapping[str, Sequence[float]] | None = None,
                path: str | os.PathLike | None = None) -> Figure:
    """True, predicted and error (pred − true) fields side by side.

    Args:
        pred, true: one field, ``(x,)`` (line plots) or ``(x, y)`` (images, ``x`` down the rows).
        title: a suptitle (the run, the data, what is shown).
        coords: the grid's coordinates ``{"x": (x,), ["y": (y,)]}`` (axes in their units; default: grid indices).
        path: where to write the PNG (optional).
    """
    p, t = _pair(pred, true, (1, 2), "one field (x,) or (x, y) each")
    axis = {d: np.asarray(coords[d]) if coords and d in coords else np.arange(n) for d, n in zip("xy", p.shape)}
    named = {d: d if coords and d in coords else f"{d} index" for d in axis}
    err = p - t
    fig = Figure(figsize=(12, 3.9), layout="constrained")
    axes = fig.subplots(1, 3)
    lo, hi = min(t.min(), p.min()), max(t.max(), p.max())
    bound = max(np.abs(err).max(), 1e-300)
    labels = ("true", "predicted", f"error (pred − true)\nmax |e| = {np.abs(err).max():.3g}")
    for ax, data, label in zip(axes, (t, p, err), labels):
        ax.set_title(label)
        if p.ndim == 1:
            ax.plot(axis["x"], data, color="tab:red" if data is err else "tab:blue")
            ax.set_xlabel(named["x"])
            continue
        cmap, limits = ("RdBu_r", (-bound, bound)) if data is err else ("viridis", (lo, hi))
        image = ax.pcolormesh(axis["y"], axis["x"], data, cmap=cmap, vmin=limits[0], vmax=limits[1], shading="auto")
        ax.set_aspect("equal" if coords else "auto")
        fig.colorbar(image, ax=ax, shrink=0.85)
        ax.set_xlabel(named["y"])
        ax.set_ylabel(named["x"])
    if p.ndim == 1:
        axes[0].sharey(axes[1])
    return _save(fig, path, title, fontweight="bold")


def plot_rollout(curves: Mapping[str, Sequence[float]], *, metric_name: str = "relative L2 error",
                 log: bool = True, title: str = "", path: str | os.PathLike | None = None) -> Figure:
    """Error per rollout step for several models (CHONN Fig. 5e-f).

    Args:
        curves: model name -> errors per step ``(time,)`` (e.g. ``rollout_errors(...)[0]``).
        metric_name: the y-axis label.
        log: logarithmic y axis.
        title: a suptitle (the run, the data, what is shown).
        path: where to write the PNG (optional).
    """
    if not curves:
        raise ValueError("curves: expected at least one model's errors, found none")
    fig = Figure(figsize=(6.5, 4.2), layout="constrained")
    ax = fig.subplots()
    for name, values in curves.items():
        v = _numpy(values, f"curves[{name!r}]").ravel()
        ax.plot(np.arange(1, v.size + 1), v, marker="o", markersize=3, label=f"{name} (mean {v.mean():.3g})")
    ax.set_xlabel("rollout step")
    ax.set_ylabel(metric_name)
    if log:
        ax.set_yscale("log")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    return _save(fig, path, title)


def plot_resolutions(resolutions: Sequence[int], errors: Sequence[float], intervals: Sequence, *,
                     trained: int | None, title: str = "", path: str | os.PathLike | None = None) -> Figure:
    """A run's error at each resolution (points per axis), with its interval where given (``[low, high]`` or
    None per resolution), the training resolution marked by a vertical line."""
    fig = Figure(figsize=(6.0, 4.0), layout="constrained")
    ax = fig.subplots()
    x, y = np.asarray(resolutions, dtype=float), np.asarray(errors, dtype=float)
    ax.plot(x, y, marker="o", label="relative L2 error")
    spans = [(r, lo, hi) for r, iv in zip(x, intervals) if iv for lo, hi in [iv]]
    if spans:
        r, lo, hi = map(np.asarray, zip(*spans))
        ax.vlines(r, lo, hi, color="C0", alpha=0.5, label="bootstrap interval")
    if trained is not None:
        ax.axvline(trained, color="0.4", linestyle="--", label=f"trained at {trained}")
    ax.set_xscale("log", base=2)
    ax.set_xticks(x, [str(int(v)) for v in x])
    ax.set_xlabel("points per axis")
    ax.set_ylabel("relative L2 error")
    ax.grid(True, alpha=0.3)
    ax.legend()
    return _save(fig, path, title)


def plot_parameter_errors(values: Sequence[float], errors: Sequence[float], train_range: tuple[float, float], *,
                          name: str, title: str = "", path: str | os.PathLike | None = None) -> Figure:
    """Each sample's error against its PDE parameter ``name`` (a conditioned run's ``evaluate``), the mean of each
    group of values (:func:`evaluation.by_parameter.by_parameter`), and the training range shaded.

    Args:
        values, errors: ``(n,)`` each, one per sample.
        train_range: ``(low, high)`` of the parameter over the training samples.
        name: the parameter (the x-axis label). title: a suptitle. path: where to write the PNG (optional).
    """
    v, e = _numpy(values, "values").ravel(), _numpy(errors, "errors").ravel()
    groups = by_parameter(v, e, train_range)
    fig = Figure(figsize=(6.5, 4.2), layout="constrained")
    ax = fig.subplots()
    ax.axvspan(*train_range, color="0.9", label="training range")
    ax.scatter(v, e, s=8, alpha=0.5, label="samples")
    ax.plot([g.value for g in groups], [g.error for g in groups], marker="o", color="C3", label="group means")
    ax.set_xlabel(name)
    ax.set_ylabel("relative L2 error")
    ax.set_yscale("log")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    return _save(fig, path, title)


def plot_training_curves(history: Sequence[Mapping[str, float]], *, title: str = "",
                         path: str | os.PathLike | None = None) -> Figure:
    """Per epoch, two labelled panels: the training loss, and every validation metric (log scales), from a
    run's ``history``.

    Args:
        history: one record per epoch with ``epoch``, ``train_loss`` and any ``val_*`` values.
        title: a suptitle (e.g. the run folder).
        path: where to write the PNG (optional).
    """
    if not history:
        raise ValueError("history: expected at least one epoch's record, found none")
    epochs = [record["epoch"] for record in history]
    metrics = sorted({k for record in history for k in record if k.startswith("val_")})
    fig = Figure(figsize=(10.5, 4.2), layout="constrained")
    loss_ax, val_ax = fig.subplots(1, 2)
    marker = dict(marker="o" if len(epochs) < 30 else None, markersize=3)
    loss_ax.plot(epochs, [record["train_loss"] for record in history], **marker)
    loss_ax.set_ylabel("training loss (mean over the epoch's batches)")
    for key in metrics:
        val_ax.plot(epochs, [record.get(key, math.nan) for record in history], label=key.removeprefix("val_"), **marker)
    val_ax.set_ylabel("validation metric" if metrics else "no validation split")
    if metrics:
        val_ax.legend()
    for ax in (loss_ax, val_ax):
        ax.set_xlabel("epoch")
        ax.set_yscale("log")
        ax.grid(True, which="both", alpha=0.3)
    return _save(fig, path, title)


def plot_spectra(pred, true, *, title: str = "", path: str | os.PathLike | None = None) -> Figure:
    """Radially averaged power spectra of true and predicted fields, and of their error (log-log).

    Uses the radial binning of :mod:`evaluation.spectra` (the one behind fRMSE); power is averaged over
    the modes of each radius and over samples.

    Args:
        pred, true: ``(batch, *spatial)`` with 1 or 2 spatial axes (pass ``field[None]`` for one).
        title: a suptitle (the run, the data, what is shown).
        path: where to write the PNG (optional).
    """
    p, t = _pair(pred, true, (2, 3), "(batch, x) or (batch, x, y)")
    n_spatial = p.ndim - 1
    counts = radial_counts(p.shape[1:]).double().clamp(min=1)
    fig = Figure(figsize=(6.5, 4.2), layout="constrained")
    ax = fig.subplots()
    for data, label, style in ((t, "true", "-"), (p, "predicted", "--"), (p - t, "error", ":")):
        power = (radial_power(torch.from_numpy(data), n_spatial) / counts).mean(dim=0).numpy()
        ax.loglog(np.arange(1, power.size), np.maximum(power[1:], 1e-300), style, label=label)
    ax.set_xlabel("wavenumber radius r")
    ax.set_ylabel("mean |F|² per mode")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    return _save(fig, path, title)


def plot_rollout_spectra(pred, true, steps: Sequence[int], *, title: str = "",
                         path: str | os.PathLike | None = None) -> Figure:
    """Radially averaged power spectra of one rollout's true and predicted fields at the rollout steps ``steps``
    (1-based): a colour per step, the truth solid and the prediction dashed, so a spectrum that drifts (energy
    piling up at high wavenumbers, or smoothed away) shows as the dashed line leaving the solid one.

    Args:
        pred, true: ``(steps, *spatial)``, 1 or 2 spatial axes: the rollout's frames in order.
        steps: the steps to show, each in ``1..len(pred)``.
    """
    p, t = _pair(pred, true, (2, 3), "(steps, x) or (steps, x, y)")
    if not steps or not all(1 <= k <= len(p) for k in steps):
        raise ValueError(f"steps: expected rollout steps in 1..{len(p)}, found {list(steps)}")
    n_spatial = p.ndim - 1
    counts = radial_counts(p.shape[1:]).double().clamp(min=1)
    fig = Figure(figsize=(6.5, 4.2), layout="constrained")
    ax = fig.subplots()
    for color, k in enumerate(steps):
        for data, label, style in ((t, "true", "-"), (p, "predicted", "--")):
            power = (radial_power(torch.from_numpy(data[k - 1:k]), n_spatial) / counts).mean(dim=0).numpy()
            ax.loglog(np.arange(1, power.size), np.maximum(power[1:], 1e-300), style, color=f"C{color}",
                      label=f"step {k}, {label}")
    ax.set_xlabel("wavenumber radius r")
    ax.set_ylabel("mean |F|² per mode")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small")
    return _save(fig, path, title)


def plot_metric_bars(results: Mapping[str, Mapping[str, float]], *, log: bool = False,
                     path: str | os.PathLike | None = None) -> Figure:
    """One small bar chart per metric comparing models (CHONN Fig. 4c-d, 5b-c); lower is better.

    Args:
        results: model name -> {metric name -> value}, e.g. ``pdebench_metrics`` per model.
        log: logarithmic value axes.
        path: where to write the PNG (optional).
    """
    models = list(results)
    if not models:
        raise ValueError("results: expected at least one model, found none")
    metrics = list(results[models[0]])
    missing = {m: sorted(set(metrics) - set(results[m])) for m in models if set(metrics) - set(results[m])}
    if missing:
        raise ValueError(f"results: expected every model to report {metrics}; missing {missing}")
    ncols = min(4, len(metrics))
    nrows = math.ceil(len(metrics) / ncols)
    fig = Figure(figsize=(3.2 * ncols, 2.8 * nrows), layout="constrained")
    axes = np.atleast_1d(fig.subplots(nrows, ncols)).ravel()
    colors = [f"C{i % 10}" for i in range(len(models))]
    for ax, metric in zip(axes, metrics):
        values = [float(results[m][metric]) for m in models]
        bars = ax.bar(range(len(models)), values, color=colors)
        ax.bar_label(bars, labels=[f"{v:.3g}" for v in values], fontsize=7)
        ax.set_xticks(range(len(models)), models, rotation=30, ha="right", fontsize=8)
        ax.set_title(metric)
        ax.margins(y=0.15)
        if log:
            ax.set_yscale("log")
    for ax in axes[len(metrics):]:
        ax.set_visible(False)
    return _save(fig, path, "lower is better")
