"""Second-order finite-volume solver for the 2D shallow-water equations (CHONN, Eqs. 62–64, flat bottom).

Square cell-centred grid of n² cells on [−L/2, L/2]² (cell centres x_i = −L/2 + (i + ½)Δx, "ij"),
outflow boundaries (two zero-gradient ghost cells per side). Semi-discretisation: MUSCL reconstruction
of (h, hu, hv) with a slope limiter (MC by default, as PDEBench's PyClaw runs), HLL fluxes
(:mod:`pde_data.solvers._swe_flux`), unsplit:

    dq/dt = L(q) = −(F_{i+½,j} − F_{i−½,j})/Δx − (G_{i,j+½} − G_{i,j−½})/Δy,

integrated by SSP-RK2 (Heun; Shu & Osher 1988): q¹ = q + Δt L(q), qⁿ⁺¹ = ½ q + ½ (q¹ + Δt L(q¹)).
Each sample takes its own steps Δt = cfl / max((|u| + c)/Δx + (|v| + c)/Δy), cut to land exactly on
the frame times, so a sample's trajectory does not depend on the rest of its batch. With cfl ≤ ½ the
limited reconstruction and HLL keep h positive.

On CPU a whole step of every sample is one call of a hand-written C++ kernel (``pde_data/solvers/csrc/swe.cpp``,
:data:`SWE_KERNEL`, built by :mod:`pde_data.core.native`): each stage is one pass over the grid, row by row
with the faces' states and fluxes in small per-thread buffers, where the torch formulation below
(:func:`make_rhs`, :func:`ssp_rk2_step`) runs ~250 small operations per step, far above its
memory-traffic floor (``bench/bench_solvers.py`` times both against it: RESULTS.md's bench section);
``torch.compile`` of that step was measured slower in float32 (RESULTS.md, "Measured by hand, once").
The torch formulation stays as the kernel's reference twin (the two agree to round-off: torch takes
its square roots from MKL, not correctly rounded) and runs on other devices, with
``CIRCUITOP_NATIVE=0``, or when the kernel cannot be built (one warning).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F

from pde_data.core.allocator import retain_freed_memory
from pde_data.solvers._swe_flux import LIMITERS, face_states, hll_flux, max_rate
from pde_data.core.native import NativeKernel
from pde_data.core.params import ParameterError

__all__ = ["make_rhs", "ssp_rk2_step", "step", "cfl_rate", "simulate_shallow_water", "cell_centres", "SWE_KERNEL"]

#: the fused step and CFL rate (``ssp_rk2_step`` and ``max_rate``). The flags change no result: nothing
#: here enables floating-point traps or reads errno, and products and sums stay separately rounded as in
#: torch; the first two let GCC vectorise the min/max selects and square roots.
SWE_KERNEL = NativeKernel(Path(__file__).with_name("csrc") / "swe.cpp",
                          extra_cflags=("-fno-trapping-math", "-fno-math-errno", "-ffp-contract=off"))


def cell_centres(n: int, length: float) -> torch.Tensor:
    """Cell centres −L/2 + (i + ½)L/n, i = 0..n−1, of the square grid, ``(n,)`` float64 (PDEBench's rdb for L = 5)."""
    return (torch.arange(n, dtype=torch.float64) + 0.5) * (length / n) - 0.5 * length


def make_rhs(*, dx: float, g: float, limiter: str = "mc") -> Callable[[torch.Tensor], torch.Tensor]:
    """The semi-discrete operator L(q) of the module docstring, for q (batch, 3, n, n)."""

    def rhs(q: torch.Tensor) -> torch.Tensor:
        qp = F.pad(q, (2, 2, 2, 2), mode="replicate")  # zero-gradient (outflow) ghost cells
        flux_x = hll_flux(*face_states(qp[..., 2:-2], 2, limiter), normal=1, g=g)
        flux_y = hll_flux(*face_states(qp[:, :, 2:-2, :], 3, limiter), normal=2, g=g)
        return -(flux_x.diff(dim=2) + flux_y.diff(dim=3)) / dx

    return rhs


def ssp_rk2_step(rhs: Callable[[torch.Tensor], torch.Tensor], q: torch.Tensor, dt: torch.Tensor) -> torch.Tensor:
    """One SSP-RK2 (Heun) step with per-sample step sizes ``dt`` (batch,); ``dt = 0`` leaves a sample as is."""
    dt = dt.to(q.dtype)[:, None, None, None]
    stage = q + dt * rhs(q)
    return 0.5 * (q + stage + dt * rhs(stage))


def step(q: torch.Tensor, dt: torch.Tensor, *, dx: float, g: float, limiter: str = "mc") -> torch.Tensor:
    """One SSP-RK2 step of every sample: the fused kernel of :data:`SWE_KERNEL` on CPU, else its torch
    twin ``ssp_rk2_step(make_rhs(dx=dx, g=g, limiter=limiter), q, dt)``.

    Args:
        q: states (batch, 3, n, n) = (h, hu, hv), float32 or float64.
        dt: step sizes (batch,) float64; ``dt = 0`` leaves a sample as it is.
        dx: cell width (= Δy); g: gravitational acceleration; limiter: ``"mc"`` or ``"minmod"``.

    Returns:
        The new states (batch, 3, n, n), q's dtype.
    """
    ops = _native_ops(q)
    if ops is None:
        return ssp_rk2_step(make_rhs(dx=dx, g=g, limiter=limiter), q, dt)
    return ops.ssp_rk2_step(q.contiguous(), dt.to(torch.float64).contiguous(), dx, g, limiter)


def cfl_rate(q: torch.Tensor, *, dx: float, g: float) -> torch.Tensor:
    """Per-sample max over cells of (|u| + c)/Δx + (|v| + c)/Δy, (batch,) in q's dtype: the fused kernel
    of :data:`SWE_KERNEL` on CPU, else its torch twin :func:`pde_data.solvers._swe_flux.max_rate`."""
    ops = _native_ops(q)
    return max_rate(q, dx, g) if ops is None else ops.max_rate(q.contiguous(), dx, g)


def _native_ops(q: torch.Tensor):
    """The compiled kernel for a CPU float32/float64 state, else None (a failed build warns once, at the
    caller of :func:`step` or :func:`cfl_rate`)."""
    if q.device.type != "cpu" or q.dtype not in (torch.float32, torch.float64):
        return None
    return SWE_KERNEL.load(stacklevel=2)


def simulate_shallow_water(
    h: torch.Tensor, hu: torch.Tensor | None, hv: torch.Tensor | None, *, length: float, t_final: float,
    n_frames: int, g: float = 1.0, cfl: float = 0.4, limiter: str = "mc", store_momenta: bool = True,
    callback: Callable[[float], None] | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """Solve the shallow-water equations (CHONN, Eqs. 62–64) and return frames at t = t_final·k/(n_frames − 1).

    Frame 0 is the initial state, as in PDEBench's ``2D_rdb_NA_NA.h5`` (101 frames at linspace(0, 1, 101)).

    Args:
        h, hu, hv: depth and momenta (batch, n, n) on the grid of :func:`cell_centres` (``hu``/``hv``
            None: at rest); float32 or float64, any device.
        length: side L of the square domain [−L/2, L/2]².
        t_final, n_frames: final time > 0 and number of frames >= 2 (including t = 0).
        g: gravitational acceleration g_r.
        cfl: Courant number of each step (0 < cfl <= 0.5 keeps h positive).
        limiter: ``"mc"`` or ``"minmod"``.
        store_momenta: also return the momentum frames (else None for them).
        callback: called with the simulated time after each frame.

    Returns:
        ``(h, hu, hv)`` frames, each (batch, n_frames, n, n).

    Raises:
        ValueError: bad shapes, negative or non-finite depth, cfl outside (0, 0.5], bad times.
        FloatingPointError: the state became non-finite or negative (names the time and the sample).
    """
    q = _check_state(h, hu, hv)
    retain_freed_memory()  # every stage allocates its temporaries afresh: reuse the blocks (pde_data.core.allocator)
    _check_options(length=length, t_final=t_final, n_frames=n_frames, g=g, cfl=cfl, limiter=limiter)
    batch, n = q.shape[0], q.shape[-1]
    frames = torch.empty(batch, n_frames, 3 if store_momenta else 1, n, n, dtype=q.dtype, device=q.device)
    frames[:, 0] = q[:, : frames.shape[2]]
    t = torch.zeros(batch, dtype=torch.float64, device=q.device)
    for k in range(1, n_frames):
        t_frame = t_final * k / (n_frames - 1)
        q = _advance_to(q, t, t_frame, dx=length / n, g=g, cfl=cfl, limiter=limiter)
        _check_frame(q, t_prev=t_final * (k - 1) / (n_frames - 1), t=t_frame)
        frames[:, k] = q[:, : frames.shape[2]]
        if callback is not None:
            callback(t_frame)
    if not store_momenta:
        return frames[:, :, 0], None, None
    return frames[:, :, 0], frames[:, :, 1], frames[:, :, 2]


def _advance_to(q, t, t_frame, *, dx, g, cfl, limiter) -> torch.Tensor:
    """Step every sample until its time ``t`` (updated in place) equals ``t_frame`` exactly."""
    while True:
        remaining = t_frame - t
        active = remaining > 1e-14 * max(t_frame, 1.0)
        if not bool(active.any()):
            t.fill_(t_frame)
            return q
        dt_cfl = cfl / cfl_rate(q, dx=dx, g=g).to(torch.float64)
        last = dt_cfl >= remaining
        dt = torch.where(active, torch.minimum(dt_cfl, remaining), torch.zeros_like(remaining))
        q = step(q, dt, dx=dx, g=g, limiter=limiter)
        t.copy_(torch.where(last | ~active, torch.full_like(t, t_frame), t + dt))


def _check_state(h, hu, hv) -> torch.Tensor:
    if not isinstance(h, torch.Tensor) or h.ndim != 3 or h.shape[-1] != h.shape[-2]:
        shape = tuple(h.shape) if isinstance(h, torch.Tensor) else type(h).__name__
        raise ParameterError("h", f"expected a tensor (batch, n, n) on a square grid, found {shape}")
    if h.dtype not in (torch.float32, torch.float64):
        raise ParameterError("h", f"expected float32 or float64, found {h.dtype}")
    if h.shape[-1] < 4:
        raise ParameterError("h", f"expected at least 4 cells per side, found {h.shape[-1]}")
    momenta = [torch.zeros_like(h) if m is None else m for m in (hu, hv)]
    for name, m in zip(("hu", "hv"), momenta):
        if m.shape != h.shape:
            raise ValueError(f"{name}: expected the shape of h {tuple(h.shape)}, found {tuple(m.shape)}")
    q = torch.stack([h, *(m.to(h.dtype) for m in momenta)], dim=1)
    if not torch.isfinite(q).all():
        raise ParameterError(("h", "hu", "hv"), "expected finite values, found NaN or inf")
    if not (h > 0).all():
        raise ParameterError("h", f"expected a positive depth everywhere, found min {float(h.min()):.3g}")
    return q


def _check_options(*, length, t_final, n_frames, g, cfl, limiter) -> None:
    for name, value in (("length", length), ("t_final", t_final), ("g", g)):
        if not value > 0 or not math.isfinite(value):
            raise ValueError(f"{name}: expected a finite value > 0, found {value}")
    if not isinstance(n_frames, int) or n_frames < 2:
        raise ParameterError("n_frames", f"expected an integer >= 2 (frame 0 is the initial state), found {n_frames!r}")
    if not 0 < cfl <= 0.5:
        raise ParameterError("cfl", f"expected 0 < cfl <= 0.5 (stability and positivity of h), found {cfl}")
    if limiter not in LIMITERS:
        raise ParameterError("limiter", f"expected one of {sorted(LIMITERS)}, found {limiter!r}")


def _check_frame(q: torch.Tensor, *, t_prev: float, t: float) -> None:
    good = (torch.isfinite(q).flatten(1).all(dim=1)) & (q[:, 0].flatten(1).amin(dim=1) >= 0)
    if not good.all():
        i = int((~good).nonzero()[0])
        raise FloatingPointError(f"shallow-water state became non-finite or negative between t={t_prev:.6g} "
                                 f"and t={t:.6g} in sample {i}")
