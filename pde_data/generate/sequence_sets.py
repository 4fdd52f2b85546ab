"""Sequence data sets in the data model: irregular degradation trajectories (NAC) and gapped digits (PDNA).

Both follow the sequence convention of :mod:`pde_data.core.model`: variables ``(sample, time[, feature])``, an
irregular ``time`` coordinate ``(sample, time)``, unequal lengths padded to a common ``time`` size with a
``length`` variable ``(sample,)``. Sample ``i`` draws from ``np.random.default_rng([seed, i])`` alone, so
it is the same in a set of any size (and in any shard of it).

=============================  ==========================================================================
set                            variables
=============================  ==========================================================================
:func:`generate_degradation`   inputs ``health``, ``gap`` ``(sample, time)``; targets ``rul`` ``(sample,)``,
                               ``rul_step`` ``(sample, time)``; ``length``; ``t_fail``, ``power``
:func:`generate_gapped_digits` input ``pixels`` ``(sample, time, feature)`` (8 rows of 8 pixels); target
                               ``label`` ``(sample,)``, ``n_classes`` 10; ``length`` when gapped
=============================  ==========================================================================

Example:
    >>> ds = generate_degradation(512, min_length=16, max_length=32, seed=0)
    >>> ds["health"].dims, ds["time"].dims, int(ds["length"][0])
    (('sample', 'time'), ('sample', 'time'), 27)
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
import xarray as xr

from pde_data.generate.defaults import DEFAULTS, SEEDS
from pde_data.core.model import FEATURE, LENGTH, ROLE, SAMPLE, TARGET, TIME, padded_time, valid_mask
from pde_data.core.params import ParameterError

__all__ = ["generate_degradation", "generate_gapped_digits"]

_STEP = (SAMPLE, TIME)
_NOISE = 0.02  # std of the health indicator's noise (examples/nac_sequences.py)
_DIGIT_ROWS = 8


def _per_sample(seed: int, samples: np.ndarray, draw: Callable[[np.random.Generator], np.ndarray]) -> np.ndarray:
    """``draw(rng)`` of every sample stacked ``(len(samples), ...)``, sample ``i`` from ``default_rng([seed, i])``.

    The one loop over samples: seeding each sample on its own is what makes it independent of the set's size.
    """
    return np.stack([draw(np.random.default_rng([seed, int(i)])) for i in samples])


def _sample_indices(n: int, samples: Sequence[int] | None) -> np.ndarray:
    idx = np.arange(n) if samples is None else np.asarray(samples, dtype=np.int64)
    if n < 1 or (idx.size and (idx.min() < 0 or idx.max() >= n)):
        raise ParameterError("samples", f"expected indices in [0, {n}) with n >= 1, found n={n}"
                             + (f", indices {idx.min()} .. {idx.max()}" if idx.size else ""))
    return idx


def generate_degradation(n: int, *, min_length: int = DEFAULTS["degradation"]["min_length"],
                         max_length: int = DEFAULTS["degradation"]["max_length"], seed: int = SEEDS["degradation"],
                         samples: Sequence[int] | None = None) -> xr.Dataset:
    """Irregularly sampled degradation trajectories and their remaining useful life (RUL; NAC scores it, Eq. 58).

    Trajectory ``i`` is a noisy monotone health indicator ``h(t) = 1 - (t / T_f)^p + ε``, ``ε ~ N(0, 0.02²)``,
    failure time ``T_f ~ U(50, 150)``, shape ``p ~ U(1.5, 3)``, observed at ``L ~ U{min_length .. max_length}``
    times with exponential gaps, the last at the cut-off ``t_last ~ U(0.3, 0.95)·T_f``; the target is
    ``RUL = T_f - t_last`` (the set of ``examples/nac_sequences.py``, with unequal lengths).

    Args:
        n: size of the full set. min_length, max_length: range of the numbers of observations (>= 1).
        seed: the set's seed. samples: generate only these sample indices (a shard); default all.

    Returns:
        A Dataset padded to ``max_length`` steps: ``health`` and ``gap`` (time since the previous
        observation, the first since ``t = 0``) ``(sample, time)``; ``rul`` ``(sample,)``; ``rul_step``
        ``(sample, time)`` (``T_f - t`` at every observation); ``length``; ``t_fail``, ``power``
        ``(sample,)``; the ``time`` coordinate ``(sample, time)``.
    """
    if not 1 <= min_length <= max_length:
        raise ParameterError(("min_length", "max_length"), "1 <= {min_length} <= {max_length}",
                             f"{min_length}, {max_length}", ["min_length", "max_length"])
    idx = _sample_indices(n, samples)
    draws = _per_sample(seed, idx, lambda rng: np.concatenate(
        [rng.random(4), rng.standard_exponential(max_length), rng.standard_normal(max_length)]))
    u, gaps, noise = draws[:, :4], draws[:, 4:4 + max_length], draws[:, 4 + max_length:]
    t_fail, power = 50 + 100 * u[:, 0], 1.5 + 1.5 * u[:, 1]
    t_last = t_fail * (0.3 + 0.65 * u[:, 2])
    length = min_length + np.floor(u[:, 3] * (max_length - min_length + 1)).astype(np.int64)
    mask = valid_mask(length, max_length)
    arrival = np.cumsum(gaps * mask, axis=1)
    time = padded_time(t_last[:, None] * arrival / arrival[:, -1:], length)
    # valid times stay below t_last < T_f; the minimum keeps the padding's powers finite (they are zeroed)
    health = 1 - (np.minimum(time, t_fail[:, None]) / t_fail[:, None]) ** power[:, None] + _NOISE * noise
    return xr.Dataset(
        {"health": (_STEP, np.where(mask, health, 0.0), {"long_name": "noisy monotone health indicator"}),
         "gap": (_STEP, np.where(mask, np.diff(time, axis=1, prepend=0.0), 0.0),
                 {"long_name": "time since the previous observation (the first: since t = 0)"}),
         "rul": (SAMPLE, t_fail - t_last, {"long_name": "remaining useful life at the last observation",
                                           ROLE: TARGET}),
         "rul_step": (_STEP, np.where(mask, t_fail[:, None] - time, 0.0),
                      {"long_name": "remaining useful life at each observation", ROLE: TARGET}),
         LENGTH: (SAMPLE, length, {"long_name": "number of valid time steps"}),
         "t_fail": (SAMPLE, t_fail, {"long_name": "failure time T_f"}),
         "power": (SAMPLE, power, {"long_name": "shape p of the degradation 1 - (t / T_f)^p"})},
        coords={SAMPLE: idx, TIME: (_STEP, time, {"long_name": "observation times (padding continues the last step)"})},
        attrs={"seed": seed, "n_samples": n, "min_length": min_length, "max_length": max_length,
               "t_fail": "U(50, 150)", "power": "U(1.5, 3)", "t_last": "U(0.3, 0.95) * t_fail", "noise": _NOISE},
    )


def _centred_gap(n_steps: int, size: np.ndarray) -> np.ndarray:
    """``(sample, n_steps)`` bool, True inside each sample's centred gap of ``size[i]`` steps (the geometry of
    ``evaluation.gapped.gap_mask``: the gap starts at ``(n_steps - size) // 2``)."""
    start = (n_steps - size) // 2
    k = np.arange(n_steps)
    return (k >= start[:, None]) & (k < (start + size)[:, None])


def generate_gapped_digits(*, seed: int = SEEDS["digits"], gap: float = DEFAULTS["digits"]["gap"]) -> xr.Dataset:
    """scikit-learn's 8x8 digits read row by row, whole or with a centred gap removed (PDNA, Sec. 4, Table 2).

    Each image is a sequence of 8 steps (its rows) of 8 features (pixels / 16, in [0, 1]); ``label`` is
    the digit. With ``gap > 0`` sample ``i`` loses a centred gap of ``k_i`` rows, ``k_i`` uniform on
    ``{0, ..., K}``, ``K = max(1, round(gap · 8))`` (the protocol's gap of fraction ``gap`` is the
    largest): its other rows move forward, keep their original times (row indices, so the ``time``
    coordinate ``(sample, time)`` shows the gap) and leave ``k_i`` padded steps at the end (``length``).
    PDNA zeroes gapped inputs at test time instead (:mod:`evaluation.gapped`); this set gives
    continuous-time models the gap as a longer step.

    Args:
        seed: seed of the gap sizes (sample ``i`` draws from ``default_rng([seed, i])``).
        gap: the largest gap, a fraction of the 8 steps in ``[0, 1)``; 0 gives the whole sequences with
            a shared ``time`` coordinate ``(time,)`` and no ``length``.

    Returns:
        ``pixels`` ``(sample, time, feature)`` float32, ``label`` ``(sample,)`` int64 (``n_classes`` 10),
        and with ``gap > 0`` ``length`` ``(sample,)`` and ``time`` ``(sample, time)``.
    """
    if not 0 <= gap < 1:
        raise ParameterError("gap", f"expected a fraction in [0, 1), found {gap}")
    from sklearn.datasets import load_digits  # shipped with scikit-learn (offline); heavy, so imported here

    digits = load_digits()
    pixels = (digits.images / 16.0).astype(np.float32)  # (sample, row = time, column = feature)
    n = pixels.shape[0]
    data = {"label": (SAMPLE, digits.target.astype(np.int64), {"long_name": "digit", "n_classes": 10})}
    attrs = {"source": "sklearn.datasets.load_digits, rows as time steps", "seed": seed, "gap": gap}
    if gap == 0:
        data["pixels"] = ((SAMPLE, TIME, FEATURE), pixels, {"long_name": "pixel intensity / 16"})
        return xr.Dataset(data, coords={SAMPLE: np.arange(n), TIME: np.arange(_DIGIT_ROWS, dtype=np.float64)},
                          attrs=attrs)
    largest = max(1, round(gap * _DIGIT_ROWS))
    size = _per_sample(seed, np.arange(n), lambda rng: rng.integers(0, largest + 1, size=1))[:, 0]
    removed = _centred_gap(_DIGIT_ROWS, size)
    order = np.argsort(removed, axis=1, kind="stable")  # kept rows first, in their original order
    length = _DIGIT_ROWS - size
    mask = valid_mask(length, _DIGIT_ROWS)
    kept = np.take_along_axis(pixels, order[..., None], axis=1) * mask[..., None]
    data["pixels"] = ((SAMPLE, TIME, FEATURE), kept, {"long_name": "pixel intensity / 16 (kept rows, then padding)"})
    data[LENGTH] = (SAMPLE, length, {"long_name": "number of valid time steps (rows kept)"})
    time = padded_time(order.astype(np.float64), length)
    return xr.Dataset(data, coords={SAMPLE: np.arange(n), TIME: (_STEP, time, {"long_name": "original row index"})},
                      attrs={**attrs, "largest_gap_steps": largest})
