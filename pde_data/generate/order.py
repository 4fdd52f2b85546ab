"""The 1D order benchmark (CHONN, Eqs. 39-43): targets ``y = (I - tau^2 d_ss)^(-n) x`` on a periodic grid.

The target is the Fourier multiplier of Eq. (39),

    y_hat(k) = H_n(k) x_hat(k),   H_n(k) = (1 + tau^2 k^2)^(-n),

with ``k = 2*pi*m`` the **angular** wavenumber of mode ``m`` on s in [0, 1), so that the spatial form
Eq. (40), ``(I - tau^2 d_ss)^n y = x``, holds to round-off, and ``T_n = T_1^n`` (Eqs. 41-43). Inputs
mix low-frequency modes (m = 1..4), broadband oscillations (m = 5..32) and 1-3 periodised Gaussian
pulses (CHONN, text after Eq. 43). Each sample draws from ``np.random.default_rng([seed, sample])``, so
any subset (a shard) has the same bytes as in the full set.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import xarray as xr

from pde_data.generate.defaults import DEFAULTS, SEEDS
from pde_data.core.model import S, SAMPLE
from pde_data.core.params import ParameterError

__all__ = ["generate_order_benchmark", "generate_order_splits", "transfer", "order_inputs", "SPLITS"]

#: The standard splits: name → (samples, seed) (CHONN, order benchmark; orders T1-T4).
SPLITS = {"train": (12_000, 42), "val": (2_000, 43), "test": (2_000, 44)}
_LOW, _BROAD = 4, 32
_D = DEFAULTS["order"]  # the registry's defaults (pde_data.generate.registry.GENERATORS), defined once


def _check(order: int, tau: float, n_points: int) -> None:
    if not isinstance(order, (int, np.integer)) or order < 1:
        raise ParameterError("order", f"expected an integer >= 1, found {order!r}")
    if not tau > 0:
        raise ParameterError("tau", f"expected a positive number, found {tau!r}")
    if n_points < 2 * _BROAD + 2:
        raise ParameterError("n_points", f"at least {2 * _BROAD + 2} (to resolve mode {_BROAD})", str(n_points))


def transfer(x: np.ndarray, order: int, *, tau: float = _D["tau"]) -> np.ndarray:
    """Apply ``T_n = (I - tau^2 d_ss)^(-n)`` spectrally along the last axis (CHONN, Eq. 39).

    Args:
        x: ``(..., n_points)`` samples of a periodic signal on ``s_m = m / n_points``.
        order: ``n >= 1``. tau: the length scale (0.08 in the paper).
    """
    n = x.shape[-1]
    k = 2 * np.pi * np.fft.rfftfreq(n, d=1.0 / n)  # angular wavenumber 2*pi*m
    return np.fft.irfft(np.fft.rfft(x, axis=-1) * (1 + tau**2 * k**2) ** (-order), n=n, axis=-1)


def _one_input(rng: np.random.Generator, s: np.ndarray) -> np.ndarray:
    modes = np.arange(1, _BROAD + 1)
    scale = np.where(modes <= _LOW, 1.0 / modes, 0.3 / np.sqrt(modes))  # smooth part, then broadband
    cos, sin = rng.standard_normal((2, _BROAD)) * scale[None]
    phase = 2 * np.pi * modes[:, None] * s[None]
    signal = cos @ np.cos(phase) + sin @ np.sin(phase)
    n_pulses = rng.integers(1, 4)
    centres, widths = rng.uniform(0, 1, n_pulses), rng.uniform(0.01, 0.05, n_pulses)
    amplitudes = rng.uniform(-1.5, 1.5, n_pulses)
    distance = (s[None] - centres[:, None] + 0.5) % 1.0 - 0.5  # periodised
    return signal + amplitudes @ np.exp(-0.5 * (distance / widths[:, None]) ** 2)


def order_inputs(samples: Sequence[int], *, n_points: int = _D["n_points"], seed: int = SEEDS["order"]) -> np.ndarray:
    """Inputs ``(len(samples), n_points)`` for the given sample indices (sample ``i`` uses rng ``[seed, i]``)."""
    s = np.arange(n_points) / n_points
    return np.stack([_one_input(np.random.default_rng([seed, int(i)]), s) for i in samples])


def generate_order_benchmark(
    n_samples: int, order: int, *, n_points: int = _D["n_points"], tau: float = _D["tau"], seed: int = SEEDS["order"],
    samples: Sequence[int] | None = None,
) -> xr.Dataset:
    """The order-``n`` benchmark set: ``input``, ``target`` with dims ``(sample, s)``, ``s = m / n_points``.

    Args:
        n_samples: size of the full set. order: ``n`` in Eq. (40) (T1-T4 are 1-4).
        n_points: grid points on [0, 1). tau: length scale. seed: the set's seed.
        samples: generate only these sample indices (a shard); default all ``range(n_samples)``.
    """
    _check(order, tau, n_points)
    idx = np.arange(n_samples) if samples is None else np.asarray(samples)
    if n_samples < 1 or (idx.size and (idx.min() < 0 or idx.max() >= n_samples)):
        raise ParameterError("samples", f"indices in [0, {n_samples}) with n_samples >= 1", f"n_samples={n_samples}")
    x = order_inputs(idx, n_points=n_points, seed=seed)
    return _dataset(x, transfer(x, order, tau=tau), idx, order=order, tau=tau, seed=seed)


def _dataset(x: np.ndarray, y: np.ndarray, idx: np.ndarray, **params) -> xr.Dataset:
    s = np.arange(x.shape[-1]) / x.shape[-1]
    dims = (SAMPLE, S)
    return xr.Dataset(
        {"input": (dims, x, {"long_name": "input signal x(s)"}),
         "target": (dims, y, {"long_name": "target y = (I - tau^2 d_ss)^(-order) x"})},
        coords={SAMPLE: idx, S: (S, s, {"long_name": "periodic coordinate s in [0, 1)", "grid": "points m/n"})},
        attrs={**params, "problem": "order benchmark (CHONN, Eqs. 39-43)",
               "transfer": "H_n(k) = (1 + tau^2 k^2)^(-n), k = 2*pi*m (angular)"},
    )


def generate_order_splits(
    *, orders: Sequence[int] = (1, 2, 3, 4), n_points: int = _D["n_points"], tau: float = _D["tau"],
    splits: dict[str, tuple[int, int]] | None = None,
) -> dict[tuple[str, int], xr.Dataset]:
    """The standard sets: ``{(split, order): Dataset}`` for train/val/test (12,000/2,000/2,000, seeds 42/43/44).

    Each split's inputs are drawn once and shared by all orders, as the same seed gives the same inputs.
    """
    out = {}
    for name, (size, seed) in (splits or SPLITS).items():
        idx = np.arange(size)
        x = order_inputs(idx, n_points=n_points, seed=seed)
        for order in orders:
            _check(order, tau, n_points)
            out[(name, order)] = _dataset(x, transfer(x, order, tau=tau), idx, order=order, tau=tau, seed=seed)
    return out
