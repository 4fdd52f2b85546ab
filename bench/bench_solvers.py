"""PDE solvers: Navier–Stokes steps/s against a straightforward twin, shallow-water cell updates/s.

Navier–Stokes: ``pde_data.navier_stokes.make_step`` (rfft2, wavenumber arrays built once, preallocated
buffers, real multipliers through ``view_as_real``) against :func:`step_ref` below, the same CNAB2
algorithm written the plain way (full complex FFTs, wavenumbers, Laplacian and dealiasing mask rebuilt
and every intermediate allocated on each step). Both run side by side in one process; a check row gives
their largest difference after the timed steps (round-off only).

Shallow water: one SSP-RK2 step of ``pde_data.shallow_water`` at 128² (two MUSCL + HLL evaluations),
reported as cell updates per second, float32 and float64.

Run: ``python -m bench.bench_solvers [--quick]``.
"""

from __future__ import annotations

import argparse
import math

import torch

from bench._util import Row, best_time, print_table
from pde_data.grf import gaussian_random_field_2d
from pde_data.navier_stokes import fno_forcing, make_step
from pde_data.shallow_water import make_rhs, ssp_rk2_step

__all__ = ["run", "step_ref"]


def step_ref(w: torch.Tensor, n_prev: torch.Tensor | None, *, visc: float, dt: float, f: torch.Tensor):
    """One CNAB2 step in physical space, written plainly: returns ``(w_next, N̂ⁿ)``.

    Shapes: ``w`` (batch, n, n) real, ``n_prev`` (batch, n, n) complex or None (first step), ``f`` (n, n).
    """
    n = w.shape[-1]
    k = torch.fft.fftfreq(n, 1.0 / n, dtype=w.dtype, device=w.device)
    kx, ky = torch.meshgrid(k, k, indexing="ij")
    lam = 4 * math.pi**2 * (kx**2 + ky**2)
    lap = lam.clone()
    lap[0, 0] = 1.0
    kdx = torch.where(kx.abs() < n // 2, kx, torch.zeros_like(kx))
    kdy = torch.where(ky.abs() < n // 2, ky, torch.zeros_like(ky))
    kmax = (2.0 / 3.0) * (n // 2)
    dealias = ((kx.abs() <= kmax) & (ky.abs() <= kmax)).to(w.dtype)
    w_hat = torch.fft.fft2(w)
    psi_hat = w_hat / lap
    psi_hat[..., 0, 0] = 0
    u = torch.fft.ifft2(2j * math.pi * kdy * psi_hat).real
    v = torch.fft.ifft2(-2j * math.pi * kdx * psi_hat).real
    wx = torch.fft.ifft2(2j * math.pi * kdx * w_hat).real
    wy = torch.fft.ifft2(2j * math.pi * kdy * w_hat).real
    n_hat = torch.fft.fft2(u * wx + v * wy) * dealias
    prev = n_hat if n_prev is None else n_prev
    rhs = torch.fft.fft2(f) - 1.5 * n_hat + 0.5 * prev
    w_hat = ((1 - 0.5 * dt * visc * lam) * w_hat + dt * rhs) / (1 + 0.5 * dt * visc * lam)
    return torch.fft.ifft2(w_hat).real, n_hat


def _ns_rows(n: int, batch: int, dtype: torch.dtype, n_steps: int, repeat: int) -> list[Row]:
    visc, dt = 1e-3, 1e-4
    w0 = gaussian_random_field_2d(batch, n, seed=0, dtype=dtype)
    f = fno_forcing(n, dtype=dtype)
    step = make_step(n, batch, visc=visc, dt=dt, forcing_hat=torch.fft.rfft2(f), dtype=dtype, device="cpu")
    w_hat = torch.fft.rfft2(w0)
    state = {"w": w0.clone(), "n": None}

    def ours():
        for _ in range(n_steps):
            step(w_hat)

    def plain():
        for _ in range(n_steps):
            state["w"], state["n"] = step_ref(state["w"], state["n"], visc=visc, dt=dt, f=f)

    t_ours = best_time(ours, repeat=repeat, warmup=1)
    t_plain = best_time(plain, repeat=repeat, warmup=1)
    gap = float((torch.fft.irfft2(w_hat, s=(n, n)) - state["w"]).abs().max() / w0.abs().max())
    name, case = "navier_stokes", f"{n}^2 batch {batch} {str(dtype).removeprefix('torch.')}"
    return [
        Row(name, f"{case} steps/s (ours)", n_steps / t_ours, "steps/s"),
        Row(name, f"{case} steps/s (plain)", n_steps / t_plain, "steps/s"),
        Row(name, f"{case} speed-up", t_plain / t_ours, "x", "plain time / ours, same run"),
        Row(name, f"{case} max |ours - plain| / max|w0|", gap, "", "same trajectory, round-off"),
    ]


def _swe_rows(n: int, batch: int, dtype: torch.dtype, n_steps: int, repeat: int) -> list[Row]:
    length = 5.0
    x = (torch.arange(n, dtype=torch.float64) + 0.5) * (length / n) - length / 2
    r2 = x[:, None] ** 2 + x[None, :] ** 2
    h = torch.where(r2 < 0.25, 2.0, 1.0).to(dtype).expand(batch, n, n)
    q = torch.stack([h, torch.zeros_like(h), torch.zeros_like(h)], dim=1)
    rhs = make_rhs(dx=length / n, g=1.0)
    dt = torch.full((batch,), 0.4 * length / n / 3.0, dtype=torch.float64)

    def ours():
        state = q
        for _ in range(n_steps):
            state = ssp_rk2_step(rhs, state, dt)

    seconds = best_time(ours, repeat=repeat, warmup=1)
    case = f"{n}^2 batch {batch} {str(dtype).removeprefix('torch.')}"
    return [Row("shallow_water", f"{case} cell updates/s", n * n * batch * n_steps / seconds, "cells/s",
                "SSP-RK2 step = 2 MUSCL-HLL evaluations")]


def run(quick: bool = False) -> list[Row]:
    """Benchmark rows (``quick``: a few steps per case). Runs on one CPU thread (shared 2-core hosts
    make two-thread timings of small FFTs erratic); the thread count is restored afterwards."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _rows(*((3, 1) if quick else (20, 3)))
    finally:
        torch.set_num_threads(threads)


def _rows(steps: int, repeat: int) -> list[Row]:
    rows = []
    for dtype in (torch.float32, torch.float64):
        rows += _ns_rows(256, 1, dtype, steps, repeat)
        rows += _ns_rows(64, 8, dtype, steps, repeat)
    for dtype in (torch.float32, torch.float64):
        rows += _swe_rows(128, 4, dtype, max(2, steps // 4), repeat)
    ours = {r.case: r.value for r in rows if r.benchmark == "shallow_water"}
    f32, f64 = ours.values()
    rows.append(Row("shallow_water", "128^2 float32 / float64 throughput", f32 / f64, "x", "1 thread"))
    return rows


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few steps per case")
    print_table(run(quick=parser.parse_args().quick), title="PDE solvers (CPU, 1 thread)")
