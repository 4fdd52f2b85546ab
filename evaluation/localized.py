"""Errors localised in frequency (low/mid/high bands) or in space (the boundary), per sample.

These are the per-sample versions of PDEBench's fRMSE and bRMSE terms, used in the CHONN multi-metric
comparisons (Darcy: Fig. 4c-d; shallow water). They share the radial binning of
:mod:`evaluation.spectra` and the boundary faces of :mod:`evaluation._grid` with
:func:`evaluation.pdebench_metrics`.
"""

from __future__ import annotations

import math
from typing import Sequence

import torch

from evaluation._grid import boundary_points
from evaluation._inputs import as_pair, check_reduce, finish
from evaluation.spectra import BAND_NAMES, band_means, check_bands, radial_power

__all__ = ["frequency_band_errors", "boundary_rmse"]


def _average_lead(values: torch.Tensor, trailing: int) -> torch.Tensor:
    """Average over the axes between the sample axis and the last ``trailing`` axes."""
    middle = tuple(range(1, values.ndim - trailing))
    return values.mean(dim=middle) if middle else values


def frequency_band_errors(pred, true, *, bands: Sequence[int] = (4, 12),
                          lengths: Sequence[float] | None = None, reduce: str = "mean") -> dict:
    """Spectral error of ``e = pred − true`` averaged over low, mid and high radial frequency bands.

    Per sample: ``E_r = sqrt(Σ_{|k|=r} |F(e)_k|²) · Π L_d / Π N_d`` with PDEBench's radial binning
    (:mod:`evaluation.spectra`), then the mean of ``E_r`` over ``r ∈ [0, b0)``, ``[b0, b1)``,
    ``[b1, end)`` (NaN for a band the grid does not reach); leading non-spatial axes (time, channel)
    are averaged. Continuous form: the L2 norm of ``ê(k)`` on the shell ``r ≤ |k| < r + 1``.
    This is PDEBench's fRMSE (``docs/specs/metrics.md``) taken per sample instead of over the batch.

    Args:
        pred, true: arrays ``(batch, *spatial)`` (1-3 spatial axes) or xarray fields.
        bands: band edges ``(b0, b1)``.
        lengths: domain length per spatial axis (default 1).
        reduce: ``"mean"``, ``"median"`` or ``"none"``.

    Returns:
        ``{"low": ..., "mid": ..., "high": ...}``, each reduced over samples.
    """
    check_reduce(reduce)
    check_bands(bands)
    pair = as_pair(pred, true, min_ndim=2)
    if not 1 <= pair.n_spatial <= 3:
        raise ValueError(f"pred: expected 1 to 3 spatial axes, found {pair.n_spatial} "
                         f"in shape {tuple(pair.pred.shape)}")
    grid = pair.pred.shape[pair.pred.ndim - pair.n_spatial:]
    lengths = tuple(lengths) if lengths is not None else (1.0,) * pair.n_spatial
    if len(lengths) != pair.n_spatial:
        raise ValueError(f"lengths: expected {pair.n_spatial} domain lengths for grid {tuple(grid)}, "
                         f"found {lengths}")
    scale = math.prod(lengths) / math.prod(grid)
    per_radius = radial_power(pair.pred - pair.true, pair.n_spatial).sqrt() * scale
    values = _average_lead(band_means(per_radius, bands), 1)              # (batch, 3)
    return {name: finish(values[:, i], reduce, pair.is_torch) for i, name in enumerate(BAND_NAMES)}


def boundary_rmse(pred, true, *, reduce: str = "mean"):
    """RMS error on the boundary faces, per sample (PDEBench's bRMSE term; CHONN's boundary discrepancy).

    ``sqrt(mean of e² over the boundary points)`` with every face taken in full (1D: the two end points;
    2D: the four edges, ``2·Nx + 2·Ny`` points, corners twice); leading non-spatial axes are averaged
    after the square root. Continuous form: ``(|∂D|⁻¹ ∮_{∂D} e² dS)^½``.

    Args:
        pred, true: arrays ``(batch, *spatial)`` or xarray fields.
        reduce: ``"mean"``, ``"median"`` or ``"none"``.
    """
    pair = as_pair(pred, true, min_ndim=2, reduce=reduce)
    per_face = boundary_points(pair.pred - pair.true, pair.n_spatial).square().mean(dim=-1).sqrt()
    return finish(_average_lead(per_face, 0), reduce, pair.is_torch)
