"""Poisson benchmark (CHONN, Eqs. 56-58; the CNO data): ``-Δu = f`` on [0,1]², ``u = 0`` on the boundary.

Sources (Eq. 58 with r = -1/2) and their exact solutions:

    f = (pi / K^2) sum_{i,j=1..K} a_ij (i^2 + j^2)^(1/2) sin(pi i x) sin(pi j y),   a_ij ~ U[-1, 1],
    u = (1 / (pi K^2)) sum_{i,j=1..K} a_ij (i^2 + j^2)^(-1/2) sin(pi i x) sin(pi j y),

since ``-Δ sin(pi i x) sin(pi j y) = pi^2 (i^2 + j^2) sin(pi i x) sin(pi j y)``.

Grid: ``n_grid`` points per axis **including both boundaries**, ``x_p = p / (n_grid - 1)``, p = 0..n-1
(64 points on [0, 1] as in the CNO data), ``"ij"`` indexing. The boundary rows hold u = 0; the interior
points ``p / ((n-2) + 1)`` are exactly the DST-I grid, so :func:`pde_data.solvers.poisson.solve_poisson` inverts the Laplacian
mode by mode (eigenvalues ``pi^2 (p^2 + q^2)``) and reproduces the analytic ``u`` to round-off whenever
``K <= n_grid - 2``. Each sample draws its coefficients from ``np.random.default_rng([seed, sample])``.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import xarray as xr

from pde_data.generate.defaults import DEFAULTS, SEEDS
from pde_data.core.model import SAMPLE, X, Y
from pde_data.solvers.poisson import poisson_grid
from pde_data.core.params import ParameterError

__all__ = ["generate_poisson"]

_D = DEFAULTS["poisson"]  # the registry's defaults (pde_data.generate.registry.GENERATORS), defined once


def _fields(coef: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """f and u (Eq. 58 and its solution) for coefficients ``(batch, K, K)`` on grid ``x``."""
    k = coef.shape[-1]
    modes = np.arange(1, k + 1)
    sines = np.sin(np.pi * modes[:, None] * x[None])  # (K, n)
    radius = np.sqrt(modes[:, None] ** 2 + modes[None, :] ** 2)
    f = np.pi / k**2 * np.einsum("ip,bij,jq->bpq", sines, coef * radius, sines)
    u = 1.0 / (np.pi * k**2) * np.einsum("ip,bij,jq->bpq", sines, coef / radius, sines)
    return f, u


def generate_poisson(
    n_samples: int, *, K: int = _D["K"], n_grid: int = _D["n_grid"], seed: int = SEEDS["poisson"],
    samples: Sequence[int] | None = None,
) -> xr.Dataset:
    """Poisson pairs ``f → u`` with their coefficients: ``f``, ``u`` (sample, x, y), ``coef`` (sample, i, j).

    Args:
        n_samples: size of the full set. K: modes per axis (16 in distribution, 20 out of distribution).
        n_grid: points per axis, boundaries included. seed: the set's seed.
        samples: generate only these sample indices (a shard); default ``range(n_samples)``.
    """
    if not isinstance(K, (int, np.integer)) or K < 1:
        raise ParameterError("K", f"expected an integer >= 1, found {K!r}")
    x = poisson_grid(n_grid)
    if n_grid < K + 2:  # the grid's sine modes are 1 .. n_grid - 2 (sin((n_grid - 1)πx) vanishes on it)
        raise ParameterError("n_grid", f"expected at least K + 2 = {K + 2} points per axis (boundaries included) "
                             f"to resolve the source's highest mode K = {K}, found {n_grid}")
    idx = np.arange(n_samples) if samples is None else np.asarray(samples)
    if n_samples < 1 or (idx.size and (idx.min() < 0 or idx.max() >= n_samples)):
        raise ParameterError("samples", f"indices in [0, {n_samples}) with n_samples >= 1", f"n_samples={n_samples}")
    coef = np.stack([np.random.default_rng([seed, int(i)]).uniform(-1, 1, (K, K)) for i in idx])
    f, u = _fields(coef, x)
    grid = {"grid": "points p/(n-1) on [0, 1], boundaries included (u = 0 there)"}
    dims = (SAMPLE, X, Y)
    return xr.Dataset(
        {"f": (dims, f, {"long_name": "source f (CHONN Eq. 58, r = -1/2)"}),
         "u": (dims, u, {"long_name": "solution u of -Laplace(u) = f, u = 0 on the boundary"}),
         "coef": ((SAMPLE, "i", "j"), coef, {"long_name": "a_ij ~ U[-1, 1]"})},
        coords={SAMPLE: idx, X: (X, x, grid), Y: (Y, x.copy(), grid), "i": np.arange(1, K + 1), "j": np.arange(1, K + 1)},
        attrs={"problem": "Poisson (CHONN, Eqs. 56-58)", "K": int(K), "r": -0.5, "seed": int(seed), "n_grid": int(n_grid)},
    )
