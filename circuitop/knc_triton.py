"""The Kirchhoff cell's fused ZOH scan as Triton kernels: the CUDA path of ``KirchhoffCell``.

The same computation as the CPU kernel (``csrc/kirchhoff.cpp``) and its torch twin ``_ZohScanFn``
(CHONN Eqs. 32-34, the cell's readout Eq. 22):

    Δ_t = softplus(z_t) dt_t,   a_t = exp(-Δ_t λ),   φ_t = (1 - a_t) / λ,
    v_t = a_t v_{t-1} + φ_t b_t u_t,   y_t = Σ_n c_t[n] v_t[:, n] + skip u_t,   v_{-1} = 0,

on ``u (batch, time, d_inner)``, ``proj = [z | b | c] (batch, time, d_inner + 2 d_state)``, optional
real steps ``dt (batch, time)``, ``λ (d_inner, d_state)`` and ``skip (d_inner)``. One program per
sequence holds its ``(d_inner, d_state)`` state in registers and walks the time steps; no
``(batch, time, d_inner, d_state)`` tensor is ever built. The forward keeps the state at the start of
every chunk of ``K`` steps; the backward walks the chunks in reverse, recomputes one chunk's states
into a ``(batch, K, d_inner, d_state)`` scratch buffer and steps back through it (the adjoint of
``csrc/kirchhoff.cpp``'s header). Memory per token: ``(d_inner + 2 d_state)`` inputs and
``d_inner d_state / K`` checkpoint values, against ``d_inner d_state`` saved states (and more
temporaries) in the torch formulation.

``triton`` is an optional dependency (``pip install circuitop[gpu]``), imported only when this module
is: by the cell for CUDA tensors, and by the tests, which run the kernels on CPU tensors under
``TRITON_INTERPRET=1``.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .scan import TRITON_CHUNK as CHUNK  # steps per checkpoint (the backward's scratch holds CHUNK states)

__all__ = ["TritonZohScanFn", "CHUNK"]


@triton.jit
def _expm1(x):
    """expm1(x) for x <= 0 without cancellation: a 10-term Taylor series for |x| < 0.1 (truncation
    below 3e-18 relative), exp(x) - 1 beyond."""
    series = x * (1.0 + x / 2 * (1.0 + x / 3 * (1.0 + x / 4 * (1.0 + x / 5 * (1.0 + x / 6 * (
        1.0 + x / 7 * (1.0 + x / 8 * (1.0 + x / 9 * (1.0 + x / 10)))))))))
    return tl.where(tl.abs(x) < 0.1, series, tl.exp(x) - 1.0)


@triton.jit
def _softplus(z):
    return tl.maximum(z, 0.0) + tl.log(1.0 + tl.exp(-tl.abs(z)))


@triton.jit
def _step(u_ptr, proj_ptr, dt_ptr, row, d, n, dm, nm, lam, D, N, P, HAS_DT: tl.constexpr):
    """The inputs of one time step and its coefficients: u, z, b, c, Δ, a, φ, q = b u."""
    u = tl.load(u_ptr + row * D + d, mask=dm, other=0.0)
    z = tl.load(proj_ptr + row * P + d, mask=dm, other=0.0)
    bv = tl.load(proj_ptr + row * P + D + n, mask=nm, other=0.0)
    cv = tl.load(proj_ptr + row * P + D + N + n, mask=nm, other=0.0)
    delta = _softplus(z)
    if HAS_DT:
        delta = delta * tl.load(dt_ptr + row)
    neg_rate = -delta[:, None] * lam
    a = tl.exp(neg_rate)
    phi = -_expm1(neg_rate) / lam
    q = u[:, None] * bv[None, :]
    return u, z, bv, cv, delta, a, phi, q


@triton.jit
def _channels(lam_ptr, skip_ptr, D, N, BD: tl.constexpr, BN: tl.constexpr):
    """The program's channel and state indices, their masks (padded to powers of two) and λ, skip."""
    d = tl.arange(0, BD)
    n = tl.arange(0, BN)
    dm, nm = d < D, n < N
    m2 = dm[:, None] & nm[None, :]
    state = d[:, None] * N + n[None, :]
    lam = tl.load(lam_ptr + state, mask=m2, other=1.0)
    skip = tl.load(skip_ptr + d, mask=dm, other=0.0)
    return d, n, dm, nm, m2, state, lam, skip


@triton.jit
def _zoh_forward_kernel(u_ptr, proj_ptr, dt_ptr, lam_ptr, skip_ptr, y_ptr, ckpt_ptr, T, D, N, P, NC,
                        HAS_DT: tl.constexpr, K: tl.constexpr, BD: tl.constexpr, BN: tl.constexpr):
    b = tl.program_id(0)
    d, n, dm, nm, m2, state, lam, skip = _channels(lam_ptr, skip_ptr, D, N, BD, BN)
    v = tl.zeros((BD, BN), dtype=lam.dtype)
    for t in range(T):
        if t % K == 0:
            tl.store(ckpt_ptr + (b * NC + t // K) * D * N + state, v, mask=m2)
        row = b * T + t
        u, z, bv, cv, delta, a, phi, q = _step(u_ptr, proj_ptr, dt_ptr, row, d, n, dm, nm, lam, D, N, P, HAS_DT)
        v = tl.where(m2, a * v + phi * q, 0.0)
        y = tl.sum(v * cv[None, :], axis=1) + skip * u
        tl.store(y_ptr + row * D + d, y, mask=dm)


@triton.jit
def _zoh_backward_kernel(u_ptr, proj_ptr, dt_ptr, lam_ptr, skip_ptr, ckpt_ptr, gy_ptr, scratch_ptr,
                         du_ptr, dproj_ptr, ddt_ptr, dlam_ptr, dskip_ptr, T, D, N, P, NC,
                         HAS_DT: tl.constexpr, K: tl.constexpr, BD: tl.constexpr, BN: tl.constexpr):
    b = tl.program_id(0)
    d, n, dm, nm, m2, state, lam, skip = _channels(lam_ptr, skip_ptr, D, N, BD, BN)
    nil = -1.0 / lam
    carry = tl.zeros((BD, BN), dtype=lam.dtype)  # a_{t+1} g_{t+1}
    dlam = tl.zeros((BD, BN), dtype=lam.dtype)
    dskip = tl.zeros((BD,), dtype=lam.dtype)
    for cc in range(NC):
        c = NC - 1 - cc
        # recompute this chunk's states from its checkpoint
        v = tl.load(ckpt_ptr + (b * NC + c) * D * N + state, mask=m2, other=0.0)
        for k in range(K):
            t = c * K + k
            if t < T:
                u, z, bv, cv, delta, a, phi, q = _step(u_ptr, proj_ptr, dt_ptr, b * T + t, d, n, dm, nm, lam,
                                                       D, N, P, HAS_DT)
                v = tl.where(m2, a * v + phi * q, 0.0)
                tl.store(scratch_ptr + (b * K + k) * D * N + state, v, mask=m2)
        # and step back through them
        for kk in range(K):
            k = K - 1 - kk
            t = c * K + k
            if t < T:
                row = b * T + t
                u, z, bv, cv, delta, a, phi, q = _step(u_ptr, proj_ptr, dt_ptr, row, d, n, dm, nm, lam,
                                                       D, N, P, HAS_DT)
                v = tl.load(scratch_ptr + (b * K + k) * D * N + state, mask=m2, other=0.0)
                if k > 0:
                    v_prev = tl.load(scratch_ptr + (b * K + k - 1) * D * N + state, mask=m2, other=0.0)
                else:
                    v_prev = tl.load(ckpt_ptr + (b * NC + c) * D * N + state, mask=m2, other=0.0)
                dy = tl.load(gy_ptr + row * D + d, mask=dm, other=0.0)
                g = tl.where(m2, dy[:, None] * cv[None, :] + carry, 0.0)
                g_phi = g * phi
                du = skip * dy + tl.sum(g_phi * bv[None, :], axis=1)
                db = tl.sum(g_phi * u[:, None], axis=0)
                dc = tl.sum(dy[:, None] * v, axis=0)
                dr = -a * g * (v_prev + q * nil)  # dL/dr with r = Δ λ (a = exp(-r))
                ddelta = tl.sum(tl.where(m2, dr * lam, 0.0), axis=1)
                dlam += tl.where(m2, dr * delta[:, None] + g_phi * q * nil, 0.0)
                dskip += dy * u
                carry = a * g
                sig = 1.0 / (1.0 + tl.exp(-z))
                if HAS_DT:
                    step = tl.load(dt_ptr + row)
                    tl.store(ddt_ptr + row, tl.sum(tl.where(dm, ddelta * _softplus(z), 0.0), axis=0))
                    dz = ddelta * sig * step
                else:
                    dz = ddelta * sig
                tl.store(du_ptr + row * D + d, du, mask=dm)
                tl.store(dproj_ptr + row * P + d, dz, mask=dm)
                tl.store(dproj_ptr + row * P + D + n, db, mask=nm)
                tl.store(dproj_ptr + row * P + D + N + n, dc, mask=nm)
    tl.store(dlam_ptr + b * D * N + state, dlam, mask=m2)
    tl.store(dskip_ptr + b * D + d, dskip, mask=dm)


def _sizes(u: torch.Tensor, lam: torch.Tensor) -> dict:
    batch, length, d_inner = u.shape
    d_state = lam.shape[-1]
    return dict(T=length, D=d_inner, N=d_state, P=d_inner + 2 * d_state, NC=triton.cdiv(length, CHUNK),
                K=CHUNK, BD=triton.next_power_of_2(d_inner), BN=triton.next_power_of_2(d_state))


class TritonZohScanFn(torch.autograd.Function):
    """``y = TritonZohScanFn.apply(u, proj, dt, lam, skip)`` (module docstring), ``dt`` may be None;
    all tensors on one device and of one dtype, ``u (batch, time, d_inner)``."""

    @staticmethod
    def forward(ctx, u, proj, dt, lam, skip):
        u, proj, lam, skip = (t.contiguous() for t in (u, proj, lam, skip))
        dt = None if dt is None else dt.to(u.dtype).contiguous()
        sizes = _sizes(u, lam)
        y = torch.empty_like(u)
        checkpoints = torch.empty(u.shape[0], sizes["NC"], sizes["D"], sizes["N"], dtype=u.dtype, device=u.device)
        _zoh_forward_kernel[(u.shape[0],)](u, proj, u if dt is None else dt, lam, skip, y, checkpoints,
                                           HAS_DT=dt is not None, **sizes)
        ctx.save_for_backward(u, proj, dt, lam, skip, checkpoints)
        return y

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_y):
        u, proj, dt, lam, skip, checkpoints = ctx.saved_tensors
        sizes = _sizes(u, lam)
        batch = u.shape[0]
        scratch = torch.empty(batch, sizes["K"], sizes["D"], sizes["N"], dtype=u.dtype, device=u.device)
        du, dproj = torch.empty_like(u), torch.empty_like(proj)
        ddt = None if dt is None else torch.empty_like(dt)
        dlam = torch.empty(batch, *lam.shape, dtype=u.dtype, device=u.device)
        dskip = torch.empty(batch, *skip.shape, dtype=u.dtype, device=u.device)
        _zoh_backward_kernel[(batch,)](u, proj, u if dt is None else dt, lam, skip, checkpoints,
                                       grad_y.contiguous(), scratch, du, dproj, u if ddt is None else ddt,
                                       dlam, dskip, HAS_DT=dt is not None, **sizes)
        return du, dproj, ddt, dlam.sum(0), dskip.sum(0)
