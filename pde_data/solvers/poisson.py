"""The Poisson solver (CHONN, Eq. 56): ``-Δu = f`` on [0,1]², ``u = 0`` on the boundary, by the sine transform.

Grid: ``n_grid`` points per axis **including both boundaries**, ``x_p = p / (n_grid - 1)``, ``"ij"`` indexing;
the interior points are exactly the DST-I grid, so :func:`solve_poisson` inverts the Laplacian mode by mode
(eigenvalues ``pi^2 (p^2 + q^2)``).
"""

from __future__ import annotations

import numpy as np

from pde_data.core.params import ParameterError

__all__ = ["poisson_grid", "solve_poisson"]


def poisson_grid(n_grid: int) -> np.ndarray:
    """The ``n_grid`` points ``p / (n_grid - 1)`` on [0, 1], boundaries included."""
    if n_grid < 3:
        raise ParameterError("n_grid", f"expected at least 3 points (one interior), found {n_grid}")
    return np.arange(n_grid) / (n_grid - 1)


def _eigenvalues(n_interior: int) -> np.ndarray:
    p = np.arange(1, n_interior + 1)
    return np.pi**2 * (p[:, None] ** 2 + p[None, :] ** 2)


def solve_poisson(f: np.ndarray) -> np.ndarray:
    """Solve ``-Δu = f`` (Eq. 56), ``u = 0`` on the boundary, by the sine transform (DST-I).

    Args:
        f: ``(..., n, n)`` source on the grid of :func:`poisson_grid` (boundary values are ignored).

    Returns:
        u: ``(..., n, n)`` with zero boundary rows and columns; exact for sources in the span of
        ``sin(pi p x) sin(pi q y)``, p, q <= n - 2.
    """
    f = np.asarray(f, dtype=np.float64)
    if f.ndim < 2 or f.shape[-1] != f.shape[-2] or f.shape[-1] < 3:
        raise ParameterError("f", f"expected shape (..., n, n) with n >= 3, found {f.shape}")
    import scipy.fft  # here, not at the top: scipy's import (0.2 s) is paid only by a Poisson solve

    interior = f[..., 1:-1, 1:-1]
    coefficients = scipy.fft.dstn(interior, type=1, axes=(-2, -1)) / _eigenvalues(interior.shape[-1])
    u = np.zeros_like(f)
    u[..., 1:-1, 1:-1] = scipy.fft.idstn(coefficients, type=1, axes=(-2, -1))
    return u
