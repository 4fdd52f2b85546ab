"""Errors grouped by a PDE parameter's value, the values inside the training range apart from those outside it.

A conditioned model is judged where it was not trained: on held-out parameter values between the training
values (interpolation) and beyond them (extrapolation). :func:`by_parameter` groups per-sample errors by value:
one group per distinct value when there are few (a sweep of files, one value each), else equal-width bins whose
edges include the training range's ends, so that no group mixes values inside and outside it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

__all__ = ["ParameterGroup", "by_parameter"]


@dataclass(frozen=True)
class ParameterGroup:
    """The samples whose parameter lies in ``[low, high]``: how many, their mean error, their mean value, and
    where the group lies against the training range: ``"inside"``, ``"below"`` or ``"above"``."""

    low: float
    high: float
    value: float
    samples: int
    error: float
    where: str

    def to_dict(self) -> dict:
        return asdict(self)


def by_parameter(values: np.ndarray, errors: np.ndarray, train_range: tuple[float, float], *,
                 groups: int = 8) -> list[ParameterGroup]:
    """Per-sample ``errors`` ``(n,)`` grouped by the samples' parameter ``values`` ``(n,)``, in increasing value.

    Args:
        values, errors: one per sample.
        train_range: ``(low, high)``, the parameter's range over the training samples.
        groups: at most this many distinct values get a group each; more are binned into ``groups`` equal-width
            bins, each split at the training range's ends.

    Example:
        >>> [g.where for g in by_parameter(np.array([0.1, 0.5, 3.0]), np.array([.2, .1, .4]), (0.2, 1.0))]
        ['below', 'inside', 'above']
    """
    values, errors = np.asarray(values, dtype=np.float64), np.asarray(errors, dtype=np.float64)
    if values.shape != errors.shape or values.ndim != 1 or not values.size:
        raise ValueError(f"values, errors: expected two non-empty (n,) arrays, found shapes {values.shape}, "
                         f"{errors.shape}")
    low, high = train_range
    tol = 1e-6 * max(abs(low), abs(high), 1e-30)  # a range stored in float32 still holds its own ends
    side = np.where(values < low - tol, 0, np.where(values > high + tol, 2, 1))
    distinct = np.unique(values)
    if distinct.size <= groups:
        bins = np.searchsorted(distinct, values)
    else:
        bins = np.searchsorted(np.linspace(distinct[0], distinct[-1], groups + 1)[1:-1], values, side="right")
    found = []
    for key in np.unique(np.stack([side, bins], axis=1), axis=0):
        mine = (side == key[0]) & (bins == key[1])
        v = values[mine]
        found.append(ParameterGroup(float(v.min()), float(v.max()), float(v.mean()), int(mine.sum()),
                                    float(errors[mine].mean()), ("below", "inside", "above")[key[0]]))
    return sorted(found, key=lambda g: g.value)
