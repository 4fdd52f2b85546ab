"""``evaluate --pred/--true``: line the truth up with the predictions, and check that both lie on the
same coordinates before anything is scored.

- **Variables:** the truth's variables that ``pred`` does not predict are left out.
- **Samples:** a prediction file holding some samples of a data set (``pred.nc`` of ``evaluate --run``
  has a ``sample`` coordinate naming the source's sample indices) is scored against those samples of
  the truth; otherwise both must have the same number of samples.
- **Frames:** predictions of the first ``n`` frames (a rollout shorter than the data) are scored
  against the truth's first ``n`` frames.
- **Coordinates:** every coordinate the two files share (``time``, ``x``, ``y``, ...) must agree to
  ``rtol`` (relative to the coordinate's extent); a shifted or rescaled grid is an error naming the
  coordinate, unless ``ignore_coords``.
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from pde_data.core.model import SAMPLE, TIME

__all__ = ["align", "check_coords"]


def _sample_ids(pred: xr.Dataset) -> np.ndarray | None:
    if SAMPLE not in pred.coords:
        return None
    ids = np.asarray(pred[SAMPLE].values)
    return ids if ids.dtype.kind in "iu" else None


def align(pred: xr.Dataset, true: xr.Dataset) -> xr.Dataset:
    """``true`` restricted to the variables, samples and leading frames ``pred`` holds.

    Raises:
        ValueError: ``pred`` names samples ``true`` does not have, or has more frames than ``true``.
    """
    names = list(pred.data_vars)
    if set(names) < set(true.data_vars):  # the truth has more variables (e.g. a run's inputs): score pred's
        true = true[names]
    n_pred, n_true = pred.sizes.get(SAMPLE), true.sizes.get(SAMPLE)
    ids = _sample_ids(pred)
    if n_pred != n_true and ids is not None:
        if ids.size and (ids.min() < 0 or ids.max() >= n_true):
            raise ValueError(f"expected --pred's samples (its 'sample' coordinate, {ids.min()}..{ids.max()}) among "
                             f"the {n_true} samples of --true")
        true = true.isel({SAMPLE: ids})
        if SAMPLE in true.coords or SAMPLE in pred.coords:
            true = true.assign_coords({SAMPLE: pred[SAMPLE].values})
    if TIME in pred.dims and TIME in true.dims and pred.sizes[TIME] != true.sizes[TIME]:
        if pred.sizes[TIME] > true.sizes[TIME]:
            raise ValueError(f"expected --pred to have at most the {true.sizes[TIME]} frames of --true, found "
                             f"{pred.sizes[TIME]}")
        true = true.isel({TIME: slice(0, pred.sizes[TIME])})
    return true


def check_coords(pred: xr.Dataset, true: xr.Dataset, *, rtol: float = 1e-6) -> None:
    """Raise a one-line ``ValueError`` for the first shared numeric coordinate that differs.

    Two coordinates agree when every value is within ``rtol`` × (the coordinate's extent, or 1 if it is
    a single point) of the other's; the ``sample`` coordinate is matched by :func:`align` instead.
    """
    for name in sorted(set(map(str, pred.coords)) & set(map(str, true.coords)) - {SAMPLE}):
        a, b = np.asarray(pred[name].values), np.asarray(true[name].values)
        if a.dtype.kind not in "iuf" or b.dtype.kind not in "iuf":
            continue
        if a.shape != b.shape:
            raise ValueError(f"coordinate '{name}': expected the same length in --pred and --true, found "
                             f"{a.shape} and {b.shape} (pass --ignore-coords to score them anyway)")
        extent = float(np.ptp(b)) if b.size > 1 else 1.0
        gap = np.abs(a.astype(np.float64) - b.astype(np.float64))
        if gap.size and gap.max() > rtol * max(extent, 1e-300):
            k = int(np.argmax(gap))
            raise ValueError(f"coordinate '{name}': expected the same values in --pred and --true, found "
                             f"{a.flat[k]!r} and {b.flat[k]!r} at index {k} (pass --ignore-coords to score "
                             "them anyway)")
