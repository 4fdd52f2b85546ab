"""Darcy flow (CHONN, Eqs. 51-53; PDEBench beta = 1): ``-∇·(a ∇u) = f`` on (0,1)², ``u = 0`` on ∂D.

Instead of PDEBench's time stepping of the parabolic Eq. (54) to t ≈ 1.75, the steady finite-volume
system is solved directly (one sparse LU per sample). On the cell-centred grid ``x_i = (i + 1/2) h``,
``h = 1/n`` ("ij" indexing), cell P with neighbours N:

    sum_N a_PN (u_P - u_N) / h^2 + sum_walls 2 a_P u_P / h^2 = f_P,   a_PN = (a_P + a_N) / 2,

i.e. arithmetic-mean face coefficients and the wall flux of u = 0 imposed at half a cell (coefficient
``2 a_P / h^2``). The scheme is second-order accurate for smooth ``a`` and ``u``.
"""

from __future__ import annotations

import numpy as np

from pde_data.core.params import ParameterError

__all__ = ["cell_centres", "darcy_matrix", "solve_darcy"]


def cell_centres(n_grid: int) -> np.ndarray:
    """``(i + 1/2) / n_grid`` for i = 0..n-1 (PDEBench's Darcy grid)."""
    if n_grid < 2:
        raise ParameterError("n_grid", f"expected at least 2 cells, found {n_grid}")
    return (np.arange(n_grid) + 0.5) / n_grid


def darcy_matrix(a: np.ndarray) -> "scipy.sparse.csc_matrix":
    """The finite-volume matrix of ``-∇·(a∇·)`` with u = 0 on the walls (module docstring).

    Args:
        a: ``(n, n)`` positive cell coefficients on the unit square; unknown ``(i, j)`` has index ``i*n + j``.
    """
    a = np.asarray(a, dtype=np.float64)
    if a.ndim != 2 or a.shape[0] != a.shape[1]:
        raise ParameterError("a", f"expected a square (n, n) coefficient field, found shape {a.shape}")
    if not np.all(a > 0):
        raise ParameterError("a", f"expected positive coefficients, found minimum {np.min(a)}")
    n = a.shape[0]
    scale = n * n  # 1 / h^2
    index = np.arange(n * n).reshape(n, n)
    west, east = index[:-1, :].ravel(), index[1:, :].ravel()  # faces normal to x
    south, north = index[:, :-1].ravel(), index[:, 1:].ravel()  # faces normal to y
    first = np.concatenate([west, south])
    second = np.concatenate([east, north])
    flat = a.ravel()
    face = 0.5 * (flat[first] + flat[second]) * scale
    walls = np.zeros((n, n))
    walls[0, :] += 1; walls[-1, :] += 1; walls[:, 0] += 1; walls[:, -1] += 1  # noqa: E702
    diagonal = np.bincount(first, face, n * n) + np.bincount(second, face, n * n) + 2 * scale * (walls * a).ravel()
    rows = np.concatenate([first, second, np.arange(n * n)])
    cols = np.concatenate([second, first, np.arange(n * n)])
    values = np.concatenate([-face, -face, diagonal])
    import scipy.sparse  # here: scipy.sparse takes 0.2 s to import, and a run that reads data needs none of it

    return scipy.sparse.csc_matrix((values, (rows, cols)), shape=(n * n, n * n))


def solve_darcy(a: np.ndarray, *, forcing: float | np.ndarray = 1.0) -> np.ndarray:
    """Solve ``-∇·(a∇u) = f`` (Eq. 51), ``u = 0`` on ∂D (Eq. 52), one sparse LU factorization per sample.

    Args:
        a: ``(n, n)`` or ``(batch, n, n)`` coefficient on cell centres.
        forcing: ``f``, a scalar (PDEBench's beta) or an array broadcastable to ``a``.

    Returns:
        u: same shape as ``a``, on the cell centres.
    """
    a = np.asarray(a, dtype=np.float64)
    stacked = a[None] if a.ndim == 2 else a
    if stacked.ndim != 3:
        raise ParameterError("a", f"expected shape (n, n) or (batch, n, n), found {a.shape}")
    f = np.broadcast_to(np.asarray(forcing, dtype=np.float64), stacked.shape)
    u = np.empty_like(stacked)
    import scipy.sparse.linalg

    for b in range(stacked.shape[0]):
        # the matrix is symmetric: a symmetric fill-reducing ordering factorizes ~1.5x faster than COLAMD
        lu = scipy.sparse.linalg.splu(darcy_matrix(stacked[b]), permc_spec="MMD_AT_PLUS_A",
                                      options={"SymmetricMode": True})
        u[b] = lu.solve(f[b].ravel()).reshape(stacked.shape[1:])
    return u[0] if a.ndim == 2 else u
