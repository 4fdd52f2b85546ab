"""Pseudo-spectral solver for 2D incompressible Navier–Stokes in vorticity form (FNO benchmark).

    ∂t ω + u·∇ω = ν Δω + f,   ∇·u = 0,   on the periodic unit square      (CHONN, Eqs. 66–68)

Stream function ψ̂ = ω̂ / (4π²|k|²) (mean mode 0), velocity u = ∂ψ/∂y, v = −∂ψ/∂x, as in the FNO
generator (``navier_stokes_2d``). The nonlinear term N = u ∂xω + v ∂yω is formed in physical space and
dealiased with the 2/3 rule (modes with |kx| or |ky| > (2/3)(n/2) dropped). Odd derivatives drop the
Nyquist mode (ours; the FNO code keeps it, where it is not a real derivative).

Time stepping (CNAB2): Crank–Nicolson on ν Δω, second-order Adams–Bashforth on −N + f,

    ω̂ⁿ⁺¹ = [(1 − ½Δt ν λ) ω̂ⁿ + Δt (f̂ − 3/2 N̂ⁿ + 1/2 N̂ⁿ⁻¹)] / (1 + ½Δt ν λ),   λ = 4π²|k|²,

second order in Δt (the FNO code uses explicit Euler for N, first order); the first step takes
N̂⁻¹ = N̂⁰ (one Euler step, local error O(Δt²)). All work is batched rfft2 on the input's device and dtype.
"""

from __future__ import annotations

import functools
import math
from typing import Callable

import torch

from pde_data.core.allocator import retain_freed_memory
from pde_data.solvers.grf import fft_wavenumbers
from pde_data.core.params import ParameterError

__all__ = ["fno_forcing", "make_step", "velocity", "advective_cfl", "simulate_navier_stokes", "steps_per_record"]


def fno_forcing(n: int, *, dtype=torch.float64, device=None) -> torch.Tensor:
    """FNO forcing f = 0.1 (sin 2π(x+y) + cos 2π(x+y)) on the grid x_i = i/n (CHONN, Eq. 70), shape (n, n)."""
    x = torch.arange(n, dtype=torch.float64) / n
    s = 2.0 * math.pi * (x[:, None] + x[None, :])
    return (0.1 * (torch.sin(s) + torch.cos(s))).to(dtype=dtype, device=device)


class _Spectral:
    """Wavenumber arrays of the rfft2 layout (n, n//2 + 1), built once per grid, dtype and device."""

    def __init__(self, n: int, dtype: torch.dtype, device: torch.device):
        kx = fft_wavenumbers(n, dtype=dtype, device=device)[:, None]
        ky = torch.fft.rfftfreq(n, d=1.0 / n, dtype=dtype, device=device)[None, :]
        self.lam = 4.0 * math.pi**2 * (kx**2 + ky**2)  # symbol of −Δ
        inv_lap = torch.where(self.lam > 0, 1.0 / torch.where(self.lam > 0, self.lam, 1.0), 0.0)
        ddx = 2j * math.pi * torch.where(kx.abs() < n // 2, kx, 0.0)  # odd derivative: no Nyquist mode
        ddy = 2j * math.pi * torch.where(ky.abs() < n // 2, ky, 0.0)
        # stack of symbols giving (u, v, ∂xω, ∂yω) from ω̂: u = ∂yψ, v = −∂xψ, ψ̂ = ω̂/λ
        self.ops = torch.stack(torch.broadcast_tensors(ddy * inv_lap, -ddx * inv_lap, ddx, ddy))
        kmax = (2.0 / 3.0) * (n // 2)
        self.dealias = ((kx.abs() <= kmax) & (ky.abs() <= kmax)).to(dtype)
        self.n = n


@functools.lru_cache(maxsize=16)
def _spectral(n: int, dtype: torch.dtype, device: torch.device) -> _Spectral:
    """Wavenumber arrays shared by the step and the per-record CFL checks (built once per grid)."""
    return _Spectral(n, dtype, device)


def make_step(
    n: int, batch: int, *, visc: float | torch.Tensor, dt: float, forcing_hat: torch.Tensor | None,
    dtype: torch.dtype, device: torch.device | str,
) -> Callable[[torch.Tensor], torch.Tensor]:
    """Build one CNAB2 step (module docstring) with preallocated buffers.

    Args:
        n, batch: grid points per side and batch size of the spectral state ``ω̂`` (batch, n, n//2+1).
        visc: ν, one for the batch or one per sample ``(batch,)`` (a viscosity sweep).
        forcing_hat: ``rfft2(f)`` broadcastable to (batch, n, n//2+1), or None.

    Returns:
        ``step(w_hat)``: advances ``w_hat`` in place by ``dt`` and returns it. The closure keeps N̂ⁿ⁻¹ for
        Adams–Bashforth, so one step function drives one trajectory (its first call is an Euler step).
    """
    retain_freed_memory()  # torch's c2r FFT allocates every step: reuse the blocks (pde_data.core.allocator)
    spec = _spectral(n, dtype, torch.device(device))
    if isinstance(visc, torch.Tensor):  # per sample: (batch, 1, 1) against the wavenumbers (n, n//2+1)
        visc = visc.to(dtype=dtype, device=device)[:, None, None]
    a_plus = 1.0 + 0.5 * dt * visc * spec.lam
    # real multipliers act on (re, im) pairs through view_as_real: no complex copies per step
    retain = ((1.0 - 0.5 * dt * visc * spec.lam) / a_plus)[..., None]
    gain = (dt / a_plus)[..., None]
    dealias = spec.dealias[..., None]
    cdtype = torch.complex64 if dtype == torch.float32 else torch.complex128
    fields_hat = torch.empty(4, batch, n, n // 2 + 1, dtype=cdtype, device=device)
    fields = torch.empty(4, batch, n, n, dtype=dtype, device=device)
    product = torch.empty(batch, n, n, dtype=dtype, device=device)
    buffers = [torch.empty(batch, n, n // 2 + 1, dtype=cdtype, device=device) for _ in range(2)]
    history = {"first": True}

    def nonlinear(w_hat: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        torch.mul(spec.ops[:, None], w_hat[None], out=fields_hat)
        torch.fft.irfft2(fields_hat, s=(n, n), out=fields)
        torch.mul(fields[0], fields[2], out=product).addcmul_(fields[1], fields[3])
        torch.fft.rfft2(product, out=out)
        torch.view_as_real(out).mul_(dealias)
        return out

    def step(w_hat: torch.Tensor) -> torch.Tensor:
        now, prev = buffers
        nonlinear(w_hat, now)
        if history.pop("first", False):
            prev.copy_(now)
        rhs = prev.mul_(0.5).add_(now, alpha=-1.5)  # −(3/2 N̂ⁿ − 1/2 N̂ⁿ⁻¹), written into the old buffer
        if forcing_hat is not None:
            rhs.add_(forcing_hat)
        torch.view_as_real(rhs).mul_(gain)
        torch.view_as_real(w_hat).mul_(retain).add_(torch.view_as_real(rhs))
        buffers.reverse()  # N̂ⁿ becomes N̂ⁿ⁻¹
        return w_hat

    return step


def velocity(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Velocity (u, v) = (∂ψ/∂y, −∂ψ/∂x) with −Δψ = ω, for vorticity ``w`` (batch, n, n)."""
    spec = _spectral(w.shape[-1], w.dtype, w.device)
    uv = torch.fft.irfft2(spec.ops[:2, None] * torch.fft.rfft2(w)[None], s=w.shape[-2:])
    return uv[0], uv[1]


def advective_cfl(w: torch.Tensor, dt: float) -> torch.Tensor:
    """Per-sample advective Courant number Δt · max(|u|/Δx + |v|/Δy), Δx = Δy = 1/n; shape (batch,)."""
    u, v = velocity(w)
    return dt * w.shape[-1] * (u.abs() + v.abs()).amax(dim=(-2, -1))


def steps_per_record(interval: float, dt: float) -> int:
    """Smallest number of equal steps of at most ``dt`` covering ``interval`` (records land exactly)."""
    return max(1, math.ceil(interval / dt * (1.0 - 1e-12)))


def simulate_navier_stokes(w0: torch.Tensor, *, visc: float | torch.Tensor, t_final: float, n_records: int,
                           dt: float = 1e-4, forcing: str | torch.Tensor | None = "fno", record_initial: bool = False,
                           max_cfl: float = 0.2, callback: Callable[[float], None] | None = None,
                           first_sample: int = 0) -> torch.Tensor:
    """Solve CHONN Eqs. 66–70 from ``w0`` and return vorticity records (CNAB2, module docstring).

    Records are taken at t = t_final·k/n_records, k = 1..n_records (k = 0 too with ``record_initial``);
    each record interval is split into equal steps of at most ``dt``, so records land exactly.

    Args:
        w0: initial vorticity (batch, n, n) (or (n, n)), float32 or float64, any device; n even.
        visc: viscosity ν ≥ 0, one for the batch or one per sample ``(batch,)``.
        t_final: final time > 0.
        n_records: number of records after t = 0.
        dt: largest time step (default 1e-4, as the FNO data).
        forcing: ``"fno"`` (Eq. 70), None, or an array (n, n) or (batch, n, n) on the same grid.
        max_cfl: limit on Δt·max(|u|/Δx + |v|/Δy), checked at t = 0 (ValueError) and at every record
            (RuntimeError). CNAB2's explicit part is only weakly stable for advection: in our probes
            (64², ν = 1e−4, strong GRF) CFL 0.25 ran and CFL 0.30 blew up, hence the default 0.2.
        callback: called with the simulated time after every record (progress bars).
        first_sample: index of ``w0``'s first sample in its data set, used only to name a failing sample.

    Returns:
        (batch, n_records [+1], n, n) vorticity in ``w0``'s dtype and device.

    Raises:
        ValueError: bad shapes, dtypes, non-finite input, or a step above the CFL limit at t = 0.
        FloatingPointError: the solution became non-finite (names the time and the sample).
        RuntimeError: the CFL limit was exceeded during the run (names the time and the sample).
    """
    w0 = _check_vorticity(w0)
    unbatched = w0.ndim == 2
    w = w0[None] if unbatched else w0
    _check_times(visc=visc, t_final=t_final, n_records=n_records, dt=dt, max_cfl=max_cfl)
    batch, n = w.shape[0], w.shape[-1]
    f_hat = _forcing_hat(forcing, w)
    m = steps_per_record(t_final / n_records, dt)
    dt_step = t_final / n_records / m
    cfl = advective_cfl(w, dt_step)
    if (cfl > max_cfl).any():
        i = int(cfl.argmax())
        raise ParameterError("dt", f"step {dt_step:.3g} gives advective CFL {float(cfl[i]):.3g} > max_cfl={max_cfl} "
                             f"at t=0 in sample {first_sample + i}; use dt <= {dt_step * max_cfl / float(cfl[i]):.3g}")
    step = make_step(n, batch, visc=visc, dt=dt_step, forcing_hat=f_hat, dtype=w.dtype, device=w.device)
    out = torch.empty(batch, n_records + int(record_initial), n, n, dtype=w.dtype, device=w.device)
    if record_initial:
        out[:, 0] = w
    w_hat = torch.fft.rfft2(w)
    for k in range(1, n_records + 1):
        for _ in range(m):
            step(w_hat)
        record = out[:, k - 1 + int(record_initial)]
        torch.fft.irfft2(w_hat, s=(n, n), out=record)
        _check_record(record, dt_step, max_cfl, t_prev=t_final * (k - 1) / n_records, t=t_final * k / n_records,
                      first_sample=first_sample)
        if callback is not None:
            callback(t_final * k / n_records)
    return out[0] if unbatched else out


def _check_vorticity(w0) -> torch.Tensor:
    if not isinstance(w0, torch.Tensor):
        raise ParameterError("w0", f"expected a torch.Tensor (batch, n, n), found {type(w0).__name__}")
    if w0.ndim not in (2, 3) or w0.shape[-1] != w0.shape[-2]:
        raise ParameterError("w0", f"expected a square grid (batch, n, n) or (n, n), found shape {tuple(w0.shape)}")
    if w0.shape[-1] % 2 or w0.shape[-1] < 4:
        raise ParameterError("w0", f"expected an even grid size n >= 4, found n={w0.shape[-1]}")
    if w0.dtype not in (torch.float32, torch.float64):
        raise ParameterError("w0", f"expected float32 or float64, found {w0.dtype}")
    if not torch.isfinite(w0).all():
        raise ParameterError("w0", "expected finite values, found NaN or inf")
    return w0


def _check_times(*, visc, t_final, n_records, dt, max_cfl) -> None:
    values = visc.tolist() if isinstance(visc, torch.Tensor) else [visc]
    if not all(v >= 0.0 and math.isfinite(v) for v in values):
        raise ParameterError("visc", f"expected a finite viscosity >= 0, found {visc}")
    if not t_final > 0.0 or not math.isfinite(t_final):
        raise ParameterError("t_final", f"expected a finite time > 0, found {t_final}")
    if not isinstance(n_records, int) or n_records < 1:
        raise ParameterError("n_records", f"expected a positive integer, found {n_records!r}")
    if not dt > 0.0 or not math.isfinite(dt):
        raise ParameterError("dt", f"expected a finite step > 0, found {dt}")
    if not max_cfl > 0.0:
        raise ParameterError("max_cfl", f"expected > 0, found {max_cfl}")


def _forcing_hat(forcing, w: torch.Tensor) -> torch.Tensor | None:
    n = w.shape[-1]
    if forcing is None:
        return None
    if isinstance(forcing, str):
        if forcing != "fno":
            raise ParameterError("forcing", f"expected 'fno', None or an array, found {forcing!r}")
        return torch.fft.rfft2(fno_forcing(n, dtype=w.dtype, device=w.device))
    f = torch.as_tensor(forcing, dtype=w.dtype, device=w.device)
    if f.shape not in ((n, n), (w.shape[0], n, n)):
        raise ParameterError("forcing", f"shape ({n}, {n}) or ({w.shape[0]}, {n}, {n})", str(tuple(f.shape)))
    if not torch.isfinite(f).all():
        raise ParameterError("forcing", "expected finite values, found NaN or inf")
    return torch.fft.rfft2(f)


def _check_record(w: torch.Tensor, dt: float, max_cfl: float, *, t_prev: float, t: float,
                  first_sample: int = 0) -> None:
    finite = torch.isfinite(w).flatten(1).all(dim=1)
    if not finite.all():
        i = int((~finite).nonzero()[0])
        raise FloatingPointError(f"Navier–Stokes solution became non-finite between t={t_prev:.6g} and "
                                 f"t={t:.6g} in sample {first_sample + i}")
    cfl = advective_cfl(w, dt)
    if (cfl > max_cfl).any():
        i = int(cfl.argmax())
        raise RuntimeError(f"advective CFL {float(cfl[i]):.3g} exceeded max_cfl={max_cfl} at t={t:.6g} in "
                           f"sample {first_sample + i}; rerun with a smaller dt")
