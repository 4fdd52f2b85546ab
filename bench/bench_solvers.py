"""PDE solvers: Navier–Stokes steps/s against a straightforward twin, shallow-water cell updates/s.

Navier–Stokes, a batch of 16 GRF samples at 64², float64 and float32, 1 and 2 threads:
``pde_data.solvers.navier_stokes.make_step`` against :class:`NumpyPort` below (the same CNAB2 step, a loop over
samples with numpy FFTs) and against the FFT floor (the step's five FFTs alone on preallocated buffers),
interleaved in one process; a check row gives the two trajectories' largest difference (round-off).

Shallow water: SSP-RK2 steps of ``pde_data.solvers.shallow_water`` at 128² (two MUSCL + HLL evaluations),
reported as cell updates per second, float32 and float64, 1 and 2 threads: the fused C++ kernel
(``shallow_water.step`` on CPU) against the eager torch step it replaced (``ssp_rk2_step``, its
reference twin; issue #21: ≥ 3×), interleaved in one process, each with its distance from a
memory-traffic floor; a check row gives the two trajectories' largest difference (round-off). At 1
thread the eager step also runs in a subprocess with malloc's defaults (before
``retain_freed_memory``).

Run: ``python -m bench.bench_solvers [--quick]``.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from bench._util import Row, best_time, best_times_interleaved, print_table
from pde_data import retain_freed_memory
from pde_data.solvers.grf import gaussian_random_field_2d
from pde_data.solvers.navier_stokes import fno_forcing, make_step
from pde_data.solvers.shallow_water import SWE_KERNEL, make_rhs, ssp_rk2_step, step

__all__ = ["run", "NumpyPort"]


class NumpyPort:
    """The same CNAB2 step (``pde_data.solvers.navier_stokes``), ported plainly to numpy as a user would write it
    from the FNO generator: a loop over samples, ``numpy.fft.rfft2``/``irfft2`` per sample, the
    wavenumber arrays built once. The baseline the solver must beat (issue: ≥ 2× in float64, ≥ 5× in
    float32). ``w_hat`` (batch, n, n//2+1) complex is advanced in place by :meth:`step`."""

    def __init__(self, n: int, *, visc: float, dt: float, forcing: np.ndarray):
        real = forcing.dtype
        kx = np.fft.fftfreq(n, 1.0 / n).astype(real)[:, None]
        ky = np.fft.rfftfreq(n, 1.0 / n).astype(real)[None, :]
        lam = 4 * np.pi**2 * (kx**2 + ky**2)
        inv_lap = np.where(lam > 0, 1.0 / np.where(lam > 0, lam, 1.0), 0.0).astype(real)
        self.ddx = 2j * np.pi * np.where(np.abs(kx) < n // 2, kx, 0.0) + 0 * ky  # odd derivative: no Nyquist
        self.ddy = 2j * np.pi * np.where(np.abs(ky) < n // 2, ky, 0.0) + 0 * kx
        self.inv_lap = inv_lap
        kmax = (2.0 / 3.0) * (n // 2)
        self.dealias = ((np.abs(kx) <= kmax) & (np.abs(ky) <= kmax)).astype(real)
        self.retain = (1 - 0.5 * dt * visc * lam) / (1 + 0.5 * dt * visc * lam)
        self.gain = dt / (1 + 0.5 * dt * visc * lam)
        self.f_hat = np.fft.rfft2(forcing)
        self.n, self.prev = n, None

    def nonlinear(self, w_hat: np.ndarray) -> np.ndarray:
        n, psi = self.n, w_hat * self.inv_lap
        u = np.fft.irfft2(self.ddy * psi, s=(n, n))
        v = np.fft.irfft2(-self.ddx * psi, s=(n, n))
        wx = np.fft.irfft2(self.ddx * w_hat, s=(n, n))
        wy = np.fft.irfft2(self.ddy * w_hat, s=(n, n))
        return np.fft.rfft2(u * wx + v * wy) * self.dealias

    def step(self, w_hat: np.ndarray) -> None:
        now = np.stack([self.nonlinear(sample) for sample in w_hat])
        prev = now if self.prev is None else self.prev
        rhs = self.f_hat - 1.5 * now + 0.5 * prev
        w_hat[:] = self.retain * w_hat + self.gain * rhs
        self.prev = now


def _fft_floor(n: int, batch: int, dtype: torch.dtype) -> Callable[[], None]:
    """The FFTs of one step and nothing else: 4 batched inverse real FFTs (u, v, ∂xω, ∂yω) and one
    forward, on preallocated buffers."""
    cdtype = torch.complex64 if dtype == torch.float32 else torch.complex128
    spectra = torch.randn(4 * batch, n, n // 2 + 1, dtype=cdtype)
    fields = torch.empty(4 * batch, n, n, dtype=dtype)
    product, spectrum = fields[:batch].clone(), torch.empty(batch, n, n // 2 + 1, dtype=cdtype)

    def ffts():
        torch.fft.irfft2(spectra, s=(n, n), out=fields)
        torch.fft.rfft2(product, out=spectrum)

    return ffts


def _ns_rows(n: int, batch: int, dtype: torch.dtype, n_steps: int, rounds: int, threads: int) -> list[Row]:
    """Ours, the numpy port and the FFT floor, interleaved, at ``threads`` torch threads."""
    torch.set_num_threads(threads)
    visc, dt = 1e-3, 1e-4
    w0 = gaussian_random_field_2d(batch, n, seed=0, dtype=dtype)
    f = fno_forcing(n, dtype=dtype)
    step = make_step(n, batch, visc=visc, dt=dt, forcing_hat=torch.fft.rfft2(f), dtype=dtype, device="cpu")
    w_hat = torch.fft.rfft2(w0)
    port = NumpyPort(n, visc=visc, dt=dt, forcing=f.numpy())
    port_hat = np.fft.rfft2(w0.numpy())
    floor = _fft_floor(n, batch, dtype)

    def ours():
        for _ in range(n_steps):
            step(w_hat)

    def numpy_port():
        for _ in range(n_steps):
            port.step(port_hat)

    def ffts():
        for _ in range(n_steps):
            floor()

    t = best_times_interleaved({"ours": ours, "numpy": numpy_port, "fft": ffts}, rounds=rounds)
    gap = float(np.abs(torch.fft.irfft2(w_hat, s=(n, n)).numpy() - np.fft.irfft2(port_hat, s=(n, n))).max()
                / float(w0.abs().max()))
    name = "navier_stokes"
    case = f"{batch}x{n}^2 {str(dtype).removeprefix('torch.')}"
    return [
        Row(name, f"{case}: steps/s ours / numpy port", n_steps / t["ours"], "steps/s",
            f"numpy port {n_steps / t['numpy']:.4g} steps/s", threads=threads),
        Row(name, f"{case}: speed-up over the numpy port", t["numpy"] / t["ours"], "x", "target >= 2 (f64), >= 5 (f32)",
            threads=threads),
        Row(name, f"{case}: step / FFT floor", t["ours"] / t["fft"], "x", "target <= 1.5; the step's 5 FFTs alone",
            threads=threads),
        Row(name, f"{case}: max |ours - port| / max|w0|", gap, "", "same trajectory, round-off", threads=threads),
    ]


def _swe_case(n: int, batch: int, dtype: torch.dtype):
    """A radial dam break state (batch, 3, n, n), its cell width and a CFL-0.4 step size per sample."""
    length = 5.0
    x = (torch.arange(n, dtype=torch.float64) + 0.5) * (length / n) - length / 2
    r2 = x[:, None] ** 2 + x[None, :] ** 2
    h = torch.where(r2 < 0.25, 2.0, 1.0).to(dtype).expand(batch, n, n)
    q = torch.stack([h, torch.zeros_like(h), torch.zeros_like(h)], dim=1)
    return q, length / n, torch.full((batch,), 0.4 * length / n / 3.0, dtype=torch.float64)


def _swe_runs(n: int, batch: int, dtype: torch.dtype, n_steps: int) -> dict[str, Callable[[], torch.Tensor]]:
    """``n_steps`` SSP-RK2 steps from the dam break: the fused kernel and the eager torch step."""
    q, dx, dt = _swe_case(n, batch, dtype)
    rhs = make_rhs(dx=dx, g=1.0)

    def fused():
        state = q
        for _ in range(n_steps):
            state = step(state, dt, dx=dx, g=1.0)
        return state

    def eager():
        state = q
        for _ in range(n_steps):
            state = ssp_rk2_step(rhs, state, dt)
        return state

    return {"fused": fused, "eager": eager}


def _swe_steps(n: int, batch: int, dtype: torch.dtype, n_steps: int, repeat: int) -> float:
    """Best time of ``n_steps`` eager SSP-RK2 steps."""
    return best_time(_swe_runs(n, batch, dtype, n_steps)["eager"], repeat=repeat, warmup=1)


_DEFAULT_ALLOCATOR = """
import sys, torch
from bench.bench_solvers import _swe_steps
torch.set_num_threads(1)
print(_swe_steps(*map(int, sys.argv[1:3]), getattr(torch, sys.argv[3]), *map(int, sys.argv[4:6])))
"""


def _swe_default_allocator(n: int, batch: int, dtype: torch.dtype, n_steps: int, repeat: int) -> float:
    """The eager steps in a fresh process whose malloc keeps its defaults: the solver as it ran before
    :func:`pde_data.retain_freed_memory` (which cannot be undone within a process)."""
    args = [str(n), str(batch), str(dtype).removeprefix("torch."), str(n_steps), str(repeat)]
    out = subprocess.run([sys.executable, "-c", _DEFAULT_ALLOCATOR, *args], capture_output=True, text=True,
                         check=True, cwd=Path(__file__).resolve().parent.parent)
    return float(out.stdout.strip().splitlines()[-1])


def _bandwidth(dtype: torch.dtype) -> float:
    """Bytes/s of a 64 MiB ``torch.add(a, b, out=c)`` (two streams read, one written): the memory floor."""
    a = torch.ones(16 << 20 if dtype == torch.float32 else 8 << 20, dtype=dtype)
    b, c = a.clone(), torch.empty_like(a)
    seconds = best_time(lambda: torch.add(a, b, out=c), repeat=5, warmup=1)
    return 3 * a.numel() * a.element_size() / seconds


def _swe_rows(n: int, batch: int, dtype: torch.dtype, n_steps: int, rounds: int, threads: int) -> list[Row]:
    """The fused kernel and the eager torch step, interleaved at ``threads`` torch threads, against each
    other and the memory-traffic floor of one step; the same trajectory from both."""
    torch.set_num_threads(threads)
    retain_freed_memory()
    runs = _swe_runs(n, batch, dtype, n_steps)
    t = best_times_interleaved(runs, rounds=rounds, repeat={"fused": 5, "eager": 1})
    cells = n * n * batch * n_steps
    # a fused step must at least read q and write the new state in each of its two stages
    floor = 2 * 2 * 3 * n * n * batch * (torch.finfo(dtype).bits // 8) * n_steps / _bandwidth(dtype)
    q0 = _swe_case(n, batch, dtype)[0]
    gap = float((runs["fused"]() - runs["eager"]()).abs().max() / q0.abs().max())
    case = f"{n}^2 batch {batch} {str(dtype).removeprefix('torch.')}"
    name = "shallow_water"
    return [
        Row(name, f"{case}: cell updates/s fused / eager", cells / t["fused"], "cells/s",
            f"eager torch {cells / t['eager']:.3g} cells/s; SSP-RK2 step = 2 MUSCL-HLL evaluations", threads=threads),
        Row(name, f"{case}: speed-up of the fused kernel over eager torch", t["eager"] / t["fused"], "x",
            "target >= 3 (issue #21)", threads=threads),
        Row(name, f"{case}: fused step / memory floor", t["fused"] / floor, "x",
            "floor: read q and write q per stage at the measured bandwidth of torch.add", threads=threads),
        Row(name, f"{case}: eager step / memory floor", t["eager"] / floor, "x", "the same floor", threads=threads),
        Row(name, f"{case}: max |fused - eager| / max|q0|", gap, "", f"after {n_steps} steps: round-off",
            threads=threads),
    ]


def _swe_allocator_rows(n: int, batch: int, dtype: torch.dtype, n_steps: int, repeat: int) -> list[Row]:
    """The eager step in this process (freed blocks reused) against the default allocator (a subprocess,
    run before and after, best kept), 1 thread."""
    torch.set_num_threads(1)
    retain_freed_memory()
    before = _swe_default_allocator(n, batch, dtype, n_steps, repeat)
    ours = _swe_steps(n, batch, dtype, n_steps, repeat)
    default = min(before, _swe_default_allocator(n, batch, dtype, n_steps, repeat))
    case = f"{n}^2 batch {batch} {str(dtype).removeprefix('torch.')}"
    return [Row("shallow_water", f"{case}: eager speed-up over the default allocator", default / ours, "x",
                f"eager {n * n * batch * n_steps / ours:.3g} cells/s, default allocator "
                f"{n * n * batch * n_steps / default:.3g} cells/s", threads=1)]


def run(quick: bool = False) -> list[Row]:
    """Benchmark rows (``quick``: a few steps per case). Navier–Stokes and shallow water at 1 and 2
    torch threads; the thread count is restored afterwards."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _rows(*((3, 1) if quick else (20, 3)))
    finally:
        torch.set_num_threads(threads)


def _rows(steps: int, repeat: int) -> list[Row]:
    rows = []
    for dtype in (torch.float64, torch.float32):
        for threads in (1, 2):
            rows += _ns_rows(64, 16, dtype, steps, repeat, threads=threads)
    if SWE_KERNEL.load() is None:
        rows.append(Row("shallow_water", "fused kernel unavailable: 'fused' rows time the eager step", float("nan"),
                        "", SWE_KERNEL.error or "disabled by CIRCUITOP_NATIVE=0"))
    for dtype in (torch.float32, torch.float64):
        for threads in (1, 2):
            rows += _swe_rows(128, 4, dtype, max(2, steps // 4), repeat, threads=threads)
        rows += _swe_allocator_rows(128, 4, dtype, max(2, steps // 4), repeat)
    fused = [r.value for r in rows if r.benchmark == "shallow_water" and r.unit == "cells/s" and r.threads == 1]
    rows.append(Row("shallow_water", "128^2 float32 / float64 fused throughput", fused[0] / fused[1], "x", threads=1))
    return rows


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few steps per case")
    print_table(run(quick=parser.parse_args().quick), title="PDE solvers (CPU)")
