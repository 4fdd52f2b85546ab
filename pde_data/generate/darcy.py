"""Darcy pairs ``a → u`` (CHONN, Eqs. 51-53; PDEBench): random coefficients solved by
:func:`pde_data.solvers.darcy.solve_darcy`.

PDEBench's coefficient (CHONN, Darcy setup): the sum of 5 Gaussians ``exp(-|x - c|^2 / s)``,
``c ~ U[0,1]^2``, ``s = 0.5 U(0,1)``, thresholded to ``a = 1`` where the sum exceeds its mean, else 0.1.
PDEBench took the mean over a 200-sample batch; here it is **each sample's own mean**, so samples are
independent and shards reproducible (rng ``[seed, sample]``). A swept forcing (``beta`` a
:class:`~pde_data.core.sweep.Sweep`, PDEBench's β files in one set) draws each sample's β from its parameter
stream and stores it as the parameter ``beta (sample,)``; the coefficients are those of the fixed-β set.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import xarray as xr

from pde_data.generate.defaults import DEFAULTS, SEEDS
from pde_data.core.model import PARAMETER, ROLE, SAMPLE, X, Y
from pde_data.core.params import ParameterError
from pde_data.core.sweep import Sweep, drawn
from pde_data.solvers.darcy import cell_centres, solve_darcy

__all__ = ["darcy_coefficient", "generate_darcy"]

_D = DEFAULTS["darcy"]  # the registry's defaults (pde_data.generate.registry.GENERATORS), defined once


def darcy_coefficient(rng: np.random.Generator, x: np.ndarray, *, n_gaussians: int = 5) -> np.ndarray:
    """PDEBench's two-valued coefficient ``(n, n)`` from ``n_gaussians`` random Gaussians (module docstring)."""
    centres = rng.uniform(0, 1, (n_gaussians, 2))
    widths = 0.5 * rng.uniform(0, 1, n_gaussians)
    dx2 = (x[None, :, None] - centres[:, 0, None, None]) ** 2
    dy2 = (x[None, None, :] - centres[:, 1, None, None]) ** 2
    total = np.exp(-(dx2 + dy2) / widths[:, None, None]).sum(axis=0)
    return np.where(total > total.mean(), 1.0, 0.1)


def generate_darcy(
    n_samples: int, *, n_grid: int = _D["n_grid"], beta: float | Sweep = _D["beta"], seed: int = SEEDS["darcy"],
    samples: Sequence[int] | None = None,
) -> xr.Dataset:
    """Darcy pairs ``a → u`` (dims sample, x, y) on ``n_grid``² cell centres with forcing ``beta``.

    Args:
        n_samples: size of the full set. n_grid: cells per axis. beta: constant forcing, or a :class:`Sweep`
            each sample's forcing is drawn from (stored as ``beta (sample,)``). seed: the set's seed.
        samples: generate only these sample indices (a shard); default ``range(n_samples)``.
    """
    if not (min(beta.ends()) > 0 and beta.problem() is None if isinstance(beta, Sweep) else beta > 0):
        raise ParameterError("beta", "a positive forcing (or a range of them, LOW..HIGH[:log])", str(beta))
    x = cell_centres(n_grid)
    idx = np.arange(n_samples) if samples is None else np.asarray(samples)
    if n_samples < 1 or (idx.size and (idx.min() < 0 or idx.max() >= n_samples)):
        raise ParameterError("samples", f"indices in [0, {n_samples}) with n_samples >= 1", f"n_samples={n_samples}")
    a = np.stack([darcy_coefficient(np.random.default_rng([seed, int(i)]), x) for i in idx])
    betas = drawn(beta, seed, idx)
    u = solve_darcy(a, forcing=betas[:, None, None] if isinstance(beta, Sweep) else beta)
    grid = {"grid": "cell centres (i + 1/2)/n"}
    dims = (SAMPLE, X, Y)
    swept = {"beta": ((SAMPLE,), betas, {"long_name": "forcing beta of the sample", ROLE: PARAMETER,
                                          "range": str(beta)})} if isinstance(beta, Sweep) else {}
    return xr.Dataset(
        {"a": (dims, a, {"long_name": "permeability a (1 or 0.1)"}),
         "u": (dims, u, {"long_name": "solution u of -div(a grad u) = beta, u = 0 on the boundary"}), **swept},
        coords={SAMPLE: idx, X: (X, x, grid), Y: (Y, x.copy(), grid)},
        attrs={"problem": "Darcy flow (CHONN, Eqs. 51-53; PDEBench)",
               "beta": str(beta) if isinstance(beta, Sweep) else float(beta), "seed": int(seed),
               "n_grid": int(n_grid), "threshold": "each sample's own mean (PDEBench: mean of a 200-sample batch)"},
    )
