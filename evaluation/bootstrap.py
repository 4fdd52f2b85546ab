"""Bootstrap confidence intervals of a metric over test samples: the samples drawn again with replacement, the
metric's reduction (mean or median) taken of each draw, and the interval between the draws' quantiles (the
percentile bootstrap; Efron & Tibshirani 1993, ch. 13). Seeded, so an evaluation's intervals are the same run to run.

Example:
    >>> low, high = bootstrap_interval(per_sample_rel_l2, resamples=1000, seed=0)
"""

from __future__ import annotations

import numpy as np

__all__ = ["bootstrap_interval", "LEVEL"]

#: the intervals' confidence level
LEVEL = 0.95
#: draws held in memory at once (each ``n_samples`` indices)
_BATCH = 256


def bootstrap_interval(values, *, reduce: str = "mean", resamples: int = 1000, seed: int = 0,
                       level: float = LEVEL) -> tuple[float, float]:
    """``(low, high)``: the ``(1 - level) / 2`` and ``(1 + level) / 2`` quantiles of ``reduce(values[draw])`` over
    ``resamples`` draws of ``len(values)`` samples with replacement.

    Args:
        values: ``(n_samples,)`` one value per sample (NaN: left out).
        reduce: ``"mean"`` or ``"median"``, as the metric reduces its samples.

    Raises:
        ValueError: no finite value, ``resamples`` < 1, or another ``reduce``.
    """
    if reduce not in ("mean", "median"):
        raise ValueError(f"reduce: expected 'mean' or 'median', found {reduce!r}")
    if resamples < 1:
        raise ValueError(f"resamples: expected at least 1, found {resamples}")
    values = np.asarray(values, dtype=np.float64).reshape(-1)
    values = values[np.isfinite(values)]
    if values.size == 0:
        raise ValueError("values: expected at least one finite value, found none")
    rng, stats = np.random.default_rng(seed), []
    for start in range(0, resamples, _BATCH):
        draws = rng.integers(0, values.size, size=(min(_BATCH, resamples - start), values.size))
        stats.append(np.mean(values[draws], axis=1) if reduce == "mean" else np.median(values[draws], axis=1))
    low, high = np.quantile(np.concatenate(stats), [(1 - level) / 2, (1 + level) / 2])
    return float(low), float(high)
