"""Darcy at 128²: our sparse direct solve per sample vs PDEBench's explicit time stepping to steady state.

PDEBench reached the steady state of ``-∇·(a∇u) = beta`` by stepping ``u_t = ∇·(a∇u) + beta`` (CHONN,
Eq. 54) explicitly to t = 1.75 with ``dt = 0.25 · 0.5 · dx² / max a``; at 128² and max a = 1 that is
229,376 steps. The stepper below uses the same finite-volume operator as ``pde_data.generate.darcy`` (face
coefficient = mean of the two cells, ghost cell ``-u`` beyond each wall, i.e. u = 0 at half a cell),
vectorized in torch; a fraction of its steps is timed and the full run **extrapolated** linearly.
A check row confirms the direct solution is a fixed point of the stepper (its right-hand side ~ 0,
relative to the operator's scale ``n² max|u| max a``). Both run on one thread (SuperLU is
single-threaded; on a shared 2-core machine torch's intra-op threads only add contention).

Run: ``python -m bench.bench_darcy [--quick]``.
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
import torch.nn.functional as F

from bench._util import Row, best_time, print_table
from pde_data.generate.darcy import darcy_coefficient
from pde_data.solvers.darcy import cell_centres, solve_darcy
__all__ = ["run", "explicit_rhs", "explicit_steps"]

_T_FINAL = 1.75


def explicit_rhs(u: torch.Tensor, a: torch.Tensor, beta: float) -> torch.Tensor:
    """``∇·(a∇u) + beta`` on cell centres, ``(n, n)`` tensors, u = 0 on the walls via ghost cells ``-u``."""
    n = u.shape[-1]
    up = F.pad(u[None, None], (1, 1, 1, 1), mode="constant")[0, 0]
    up[0, 1:-1], up[-1, 1:-1], up[1:-1, 0], up[1:-1, -1] = -u[0], -u[-1], -u[:, 0], -u[:, -1]
    ap = F.pad(a[None, None], (1, 1, 1, 1), mode="replicate")[0, 0]
    fx = 0.5 * (ap[1:, 1:-1] + ap[:-1, 1:-1]) * (up[1:, 1:-1] - up[:-1, 1:-1])  # (n+1, n) x-faces
    fy = 0.5 * (ap[1:-1, 1:] + ap[1:-1, :-1]) * (up[1:-1, 1:] - up[1:-1, :-1])  # (n, n+1) y-faces
    return (fx[1:] - fx[:-1] + fy[:, 1:] - fy[:, :-1]) * n * n + beta


def explicit_steps(u: torch.Tensor, a: torch.Tensor, *, beta: float, dt: float, n_steps: int) -> torch.Tensor:
    """``n_steps`` forward-Euler steps of ``u_t = ∇·(a∇u) + beta`` (PDEBench's parabolic route, Eq. 54)."""
    for _ in range(n_steps):
        u = u + dt * explicit_rhs(u, a, beta)
    return u


def run(quick: bool = False) -> list[Row]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _run(quick)
    finally:
        torch.set_num_threads(threads)


def _run(quick: bool) -> list[Row]:
    n, beta = 128, 1.0
    a_np = darcy_coefficient(np.random.default_rng(0), cell_centres(n))
    direct = best_time(lambda: solve_darcy(a_np, forcing=beta), repeat=2 if quick else 5)
    a = torch.as_tensor(a_np, dtype=torch.float32)
    dt = 0.25 * 0.5 / n**2 / float(a.max())
    total_steps = int(np.ceil(_T_FINAL / dt))
    timed_steps = 200 if quick else 2000
    u0 = torch.zeros(n, n)
    per_step = best_time(lambda: explicit_steps(u0, a, beta=beta, dt=dt, n_steps=timed_steps),
                         repeat=1 if quick else 3) / timed_steps
    explicit = per_step * total_steps
    u_direct = torch.as_tensor(solve_darcy(a_np, forcing=beta), dtype=torch.float64)
    residual = explicit_rhs(u_direct, a.double(), beta).abs().max().item() / (n * n * u_direct.abs().max().item())
    return [
        Row("darcy", f"direct FV solve {n}^2 (splu)", direct, "s/sample", f"{1 / direct:.2f} solves/s", threads=1),
        Row("darcy", f"explicit stepping to t={_T_FINAL}", explicit, "s/sample",
            f"{total_steps} steps, dt={dt:.3g}; extrapolated from {timed_steps} timed steps", threads=1),
        Row("darcy", "speed-up direct vs explicit", explicit / direct, "x", "explicit time / direct time", threads=1),
        Row("darcy", "steady-state check", residual, "relative",
            "max|rhs| of the stepper at the direct solution / (n² max|u|)", threads=1),
    ]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer repeats and timed steps")
    print_table(run(quick=parser.parse_args().quick), title="Darcy: direct solve vs explicit stepping")
