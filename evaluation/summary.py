"""Every applicable metric for a predicted and a true data set, as one flat table (``circuitop evaluate``)."""

from __future__ import annotations

import math

import xarray as xr

from pde_data import model
from evaluation.metrics import max_mse, nrmse_range, rel_l1, rel_l2, rel_l2_derivative, rel_l2_spectral
from evaluation.pdebench import pdebench_metrics
from evaluation.well import binned_spectral_mse, linf, nmse_well, nrmse_well, pearson, vmse, vrmse

__all__ = ["summarize", "per_sample_metrics", "scored_frames", "present_bands"]

#: ``(key, metric, reduce over samples)`` in print order: every data set, then fields only. Shared with
#: :class:`evaluation.MetricAccumulator`, which keeps the per-sample values and reduces at the end.
_POINTWISE = (("rel_l2", rel_l2, "mean"), ("rel_l1", rel_l1, "mean"), ("rel_l1_median", rel_l1, "median"),
              ("nrmse_range", nrmse_range, "mean"), ("max_mse", max_mse, "mean"))


def _spectral_nmse_bin(index: int, label: str):
    """The Well's normalized binned spectral MSE of bin ``index`` alone (a table row)."""

    def metric(pred, true, *, reduce: str = "mean"):
        values = binned_spectral_mse(pred, true, normalized=True, reduce=reduce)
        return values[..., index] if reduce == "none" else values[index]

    metric.__name__ = f"spectral_nmse_{label}"
    return metric


#: The Well's metrics (evaluation.well), each the mean over samples, time steps and variables (The
#: Well's "full" value); per sample they are averaged over time and variables first.
_WELL = (("VRMSE", vrmse, "mean"), ("VMSE", vmse, "mean"), ("NRMSE_well", nrmse_well, "mean"),
         ("NMSE_well", nmse_well, "mean"), ("Linf", linf, "mean"), ("PearsonR", pearson, "mean"),
         *((f"spectral_nmse_{label}", _spectral_nmse_bin(i, label), "mean")
           for i, label in enumerate(("low", "mid", "high"))))
_FIELD_ONLY = (("rel_l2_spectral", rel_l2_spectral, "mean"), ("rel_l2_derivative", rel_l2_derivative, "mean"),
               *_WELL)


def per_sample_metrics(family: str) -> tuple:
    """The ``(key, metric, reduce)`` rows of :func:`summarize` for data of ``family`` (field or sequence)."""
    return _POINTWISE + _FIELD_ONLY if family == "field" else _POINTWISE


def scored_frames(ds: xr.Dataset, window: int, name: str) -> xr.Dataset:
    """``ds`` without its first ``window`` frames (the model's inputs); ``name`` is used in errors."""
    if model.TIME in ds.dims:
        n_time = ds.sizes[model.TIME]
        if not 0 <= window < n_time:
            raise ValueError(f"window: expected an integer in [0, {n_time}) for {n_time} time steps "
                             f"in {name}, found {window}")
        return ds.isel({model.TIME: slice(window, None)})
    if window:
        raise ValueError(f"window: {window} input frames were given, but {name} has no "
                         f"'{model.TIME}' dim (found dims {dict(ds.sizes)})")
    return ds


def summarize(pred: xr.Dataset, true: xr.Dataset, *, window: int = 0) -> dict[str, float]:
    """The CHONN metrics (means over samples, plus the median relative L1) and, for fields, PDEBench's.

    The first ``window`` time frames were model inputs and are excluded everywhere. Sequences
    (no spatial dims) get the pointwise metrics only. For a test set too large to hold at once,
    :class:`evaluation.MetricAccumulator` gives the same table batch by batch.

    Args:
        pred, true: data-model Datasets with the same dims and data variables.
        window: number of leading input frames to exclude.

    Returns:
        ``{metric name: value}``, in print order. A frequency band the grid has no radius in (e.g.
        ``fRMSE_high``, radii ≥ 12, on a 16² grid) is absent, not NaN.
    """
    family = model.family_of(true)
    p = scored_frames(pred, window, "pred")
    t = scored_frames(true, window, "true")
    table = {key: metric(p, t, reduce=reduce) for key, metric, reduce in per_sample_metrics(family)}
    if family == "field":
        table.update(present_bands(pdebench_metrics(pred, true, window=window)))
    return table


def present_bands(table: dict[str, float]) -> dict[str, float]:
    """``table`` without the ``fRMSE_*`` bands that are NaN because the grid has no radius in them."""
    return {k: v for k, v in table.items() if not (k.startswith("fRMSE_") and math.isnan(v))}
