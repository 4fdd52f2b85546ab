"""The Kirchhoff cell's fused ZOH scan as Triton kernels: the CUDA path of ``KirchhoffCell``.

The same computation as the CPU kernel (``csrc/kirchhoff.cpp``) and its torch twin ``_ZohScanFn``
(CHONN Eqs. 32-34, the cell's readout Eq. 22):

    Δ_t = softplus(z_t) dt_t,   a_t = exp(-Δ_t λ),   φ_t = (1 - a_t) / λ,
    v_t = a_t v_{t-1} + φ_t b_t u_t,   y_t = Σ_n c_t[n] v_t[:, n] + skip u_t,   v_{-1} = 0,

on ``u (batch, time, d_inner)``, ``proj = [z | b | c] (batch, time, d_inner + 2 d_state)``, optional
real steps ``dt (batch, time)``, ``λ (d_inner, d_state)`` and ``skip (d_inner)``.

One program per sequence and block of ``BD`` channels (channels are independent; grid ``(batch, d_inner /
BD)``) walks the sequence in chunks of ``BT`` steps. Within a chunk the recurrence is solved in parallel, as
a scan of the affine maps ``v ↦ a_t v + φ_t b_t u_t`` (``tl.associative_scan``, depth log BT), and the state
entering the chunk is carried from the last one: a step's latency is paid once per chunk, not per step.
With few sequences the channel block shrinks until every multiprocessor has a program (:func:`_sizes`; the
speed-up this gives is yet to be measured on a GPU). The forward keeps the state entering every chunk. The backward walks the chunks in reverse: it recomputes a
chunk's states from its checkpoint with the same scan, and solves the adjoint recurrence

    g_t = c_t dy_t + a_{t+1} g_{t+1}       (g = dL/dv_t,  g_T = 0)

with a reverse scan; then dr_t = dL/d(Δ_t λ) = -g_t (v_t - b_t u_t / λ) (from a_t v_{t-1} = v_t - φ_t b_t u_t),
and the gradients of u, z, b, c, dt, λ and skip follow as in ``csrc/kirchhoff.cpp``. Sums over channels (the
gradients of b, c and dt) are per channel block, added up after the kernel. No ``(batch, time, d_inner,
d_state)`` tensor is built: memory per token is ``(d_inner + 2 d_state)`` inputs and ``d_inner d_state / BT``
checkpoint values, against ``d_inner d_state`` saved states in the torch formulation.

``triton`` is an optional dependency (``pip install circuitop[gpu]``), imported only when this module
is: by the cell for CUDA tensors, and by the tests, which run the kernels on CPU tensors under
``TRITON_INTERPRET=1``.
"""

from __future__ import annotations

import functools

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
def _combine(a1, x1, a2, x2):
    """The composition of the affine maps v ↦ a1 v + x1, then v ↦ a2 v + x2 (the scan's operator)."""
    return a1 * a2, a2 * x1 + x2


@triton.jit
def _decay(proj_ptr, dt_ptr, row, tm, d, dm, lam, P, HAS_DT: tl.constexpr):
    """Δ (BT, BD) and a = exp(-Δ λ) (BT, BD, BN) of the steps ``row`` (BT,), z from ``proj``."""
    z = tl.load(proj_ptr + row[:, None] * P + d[None, :], mask=tm[:, None] & dm[None, :], other=0.0)
    delta = _softplus(z)
    if HAS_DT:
        delta = delta * tl.load(dt_ptr + row, mask=tm, other=0.0)[:, None]
    neg_rate = -delta[:, :, None] * lam[None, :, :]
    return z, delta, neg_rate


@triton.jit
def _chunk(u_ptr, proj_ptr, dt_ptr, row, tm, d, dm, n, nm, lam, D, N, P, HAS_DT: tl.constexpr):
    """The inputs of the steps ``row`` (BT,) and their coefficients: u, z, Δ (BT, BD); b, c (BT, BN);
    a, φ, q = b u (BT, BD, BN)."""
    md = tm[:, None] & dm[None, :]
    mn = tm[:, None] & nm[None, :]
    u = tl.load(u_ptr + row[:, None] * D + d[None, :], mask=md, other=0.0)
    bv = tl.load(proj_ptr + row[:, None] * P + D + n[None, :], mask=mn, other=0.0)
    cv = tl.load(proj_ptr + row[:, None] * P + D + N + n[None, :], mask=mn, other=0.0)
    z, delta, neg_rate = _decay(proj_ptr, dt_ptr, row, tm, d, dm, lam, P, HAS_DT)
    a = tl.exp(neg_rate)
    phi = -_expm1(neg_rate) / lam[None, :, :]
    q = u[:, :, None] * bv[:, None, :]
    return u, z, bv, cv, delta, a, phi, q


@triton.jit
def _channels(lam_ptr, skip_ptr, D, N, BD: tl.constexpr, BN: tl.constexpr):
    """The program's channel block and state indices, their masks (padded to powers of two) and λ, skip."""
    d = tl.program_id(1) * BD + tl.arange(0, BD)
    n = tl.arange(0, BN)
    dm, nm = d < D, n < N
    m2 = dm[:, None] & nm[None, :]
    state = d[:, None] * N + n[None, :]
    lam = tl.load(lam_ptr + state, mask=m2, other=1.0)
    skip = tl.load(skip_ptr + d, mask=dm, other=0.0)
    return d, n, dm, nm, m2, state, lam, skip


@triton.jit
def _row(x, steps, k: tl.constexpr):
    """Row ``k`` of ``x (BT, BD, BN)``: (BD, BN)."""
    return tl.sum(tl.where((steps == k)[:, None, None], x, 0.0), axis=0)


@triton.jit
def _zoh_forward_kernel(u_ptr, proj_ptr, dt_ptr, lam_ptr, skip_ptr, y_ptr, ckpt_ptr, T, D, N, P, NC,
                        HAS_DT: tl.constexpr, BT: tl.constexpr, BD: tl.constexpr, BN: tl.constexpr):
    b = tl.program_id(0)
    d, n, dm, nm, m2, state, lam, skip = _channels(lam_ptr, skip_ptr, D, N, BD, BN)
    steps = tl.arange(0, BT)
    v = tl.zeros((BD, BN), dtype=lam.dtype)
    for c in range(NC):
        tl.store(ckpt_ptr + (b * NC + c) * D * N + state, v, mask=m2)
        t = c * BT + steps
        tm = t < T
        row = b * T + t
        u, z, bv, cv, delta, a, phi, q = _chunk(u_ptr, proj_ptr, dt_ptr, row, tm, d, dm, n, nm, lam, D, N, P, HAS_DT)
        decay, drive = tl.associative_scan((a, phi * q), 0, _combine)
        states = drive + decay * v[None, :, :]
        y = tl.sum(states * cv[:, None, :], axis=2) + skip[None, :] * u
        tl.store(y_ptr + row[:, None] * D + d[None, :], y, mask=tm[:, None] & dm[None, :])
        v = _row(states, steps, BT - 1)  # (the last chunk's padded steps are never carried on)


@triton.jit
def _adjoint(proj_ptr, dt_ptr, gy_ptr, row, t, T, d, dm, md, lam, cv, g_next, D, P, HAS_DT: tl.constexpr):
    """dy (BT, BD) of the steps ``row`` and g = dL/dv (BT, BD, BN) from g_t = c_t dy_t + a_{t+1} g_{t+1}: a
    reverse scan with a_{t+1} (0 past the end), from ``g_next``, g at the first step of the later chunk."""
    nxt = t + 1 < T
    _, _, rate_next = _decay(proj_ptr, dt_ptr, row + 1, nxt, d, dm, lam, P, HAS_DT)
    a_next = tl.where(nxt[:, None, None], tl.exp(rate_next), 0.0)
    dy = tl.load(gy_ptr + row[:, None] * D + d[None, :], mask=md, other=0.0)
    reach, acc = tl.associative_scan((a_next, dy[:, :, None] * cv[:, None, :]), 0, _combine, reverse=True)
    return dy, acc + reach * g_next[None, :, :]


@triton.jit
def _grads(u, bv, delta, phi, q, states, dy, g, lam, skip):
    """A chunk's gradients from its states v and adjoints g: du (BT, BD); db, dc (BT, BN), this channel block's
    share; dL/dΔ (BT, BD); and its share of dL/dλ (BD, BN). With r = Δ λ (a = exp(-r)) and a v_{t-1} = v_t - φ q:
    dL/dr = -g (v_t - q / λ)."""
    g_phi = g * phi
    du = skip[None, :] * dy + tl.sum(g_phi * bv[:, None, :], axis=2)
    db = tl.sum(g_phi * u[:, :, None], axis=1)
    dc = tl.sum(dy[:, :, None] * states, axis=1)
    q_over = q / lam[None, :, :]
    dr = -g * (states - q_over)
    ddelta = tl.sum(dr * lam[None, :, :], axis=2)
    return du, db, dc, ddelta, tl.sum(dr * delta[:, :, None] - g_phi * q_over, axis=0)


@triton.jit
def _zoh_backward_kernel(u_ptr, proj_ptr, dt_ptr, lam_ptr, skip_ptr, ckpt_ptr, gy_ptr,
                         du_ptr, dproj_ptr, dbc_ptr, ddt_ptr, dlam_ptr, dskip_ptr, T, D, N, P, NC, BT_ALL,
                         HAS_DT: tl.constexpr, BT: tl.constexpr, BD: tl.constexpr, BN: tl.constexpr):
    b = tl.program_id(0)
    block = tl.program_id(1)
    d, n, dm, nm, m2, state, lam, skip = _channels(lam_ptr, skip_ptr, D, N, BD, BN)
    steps = tl.arange(0, BT)
    g_next = tl.zeros((BD, BN), dtype=lam.dtype)  # g at the first step of the later chunk
    dlam = tl.zeros((BD, BN), dtype=lam.dtype)
    dskip = tl.zeros((BD,), dtype=lam.dtype)
    for cc in range(NC):
        c = NC - 1 - cc
        t = c * BT + steps
        tm = t < T
        row = b * T + t
        md = tm[:, None] & dm[None, :]
        u, z, bv, cv, delta, a, phi, q = _chunk(u_ptr, proj_ptr, dt_ptr, row, tm, d, dm, n, nm, lam, D, N, P, HAS_DT)
        v0 = tl.load(ckpt_ptr + (b * NC + c) * D * N + state, mask=m2, other=0.0)
        decay, drive = tl.associative_scan((a, phi * q), 0, _combine)
        states = drive + decay * v0[None, :, :]
        dy, g = _adjoint(proj_ptr, dt_ptr, gy_ptr, row, t, T, d, dm, md, lam, cv, g_next, D, P, HAS_DT)
        du, db, dc, ddelta, dlam_chunk = _grads(u, bv, delta, phi, q, states, dy, g, lam, skip)
        dlam += dlam_chunk
        dskip += tl.sum(dy * u, axis=0)
        sig = 1.0 / (1.0 + tl.exp(-z))
        if HAS_DT:
            step = tl.load(dt_ptr + row, mask=tm, other=0.0)
            tl.store(ddt_ptr + block * BT_ALL + row, tl.sum(tl.where(md, ddelta * _softplus(z), 0.0), axis=1), mask=tm)
            dz = ddelta * sig * step[:, None]
        else:
            dz = ddelta * sig
        tl.store(du_ptr + row[:, None] * D + d[None, :], du, mask=md)
        tl.store(dproj_ptr + row[:, None] * P + d[None, :], dz, mask=md)
        mn = tm[:, None] & nm[None, :]
        tl.store(dbc_ptr + (block * BT_ALL + row[:, None]) * 2 * N + n[None, :], db, mask=mn)
        tl.store(dbc_ptr + (block * BT_ALL + row[:, None]) * 2 * N + N + n[None, :], dc, mask=mn)
        g_next = _row(g, steps, 0)
    tl.store(dlam_ptr + b * D * N + state, dlam, mask=m2)
    tl.store(dskip_ptr + b * D + d, dskip, mask=dm)


#: elements of one (steps, channels, states) tile a program holds per tensor (the channel block is sized to it)
TILE = 4096
#: the fewest channels per program: each channel block adds a (batch, time, 2 d_state) partial sum of the
#: gradients of b and c to the backward's memory
MIN_BD = 4


@functools.cache
def _multiprocessors(device: torch.device) -> int:
    """Streaming multiprocessors of a CUDA ``device`` (0 elsewhere: the interpreter's CPU tensors)."""
    return torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 0


def _sizes(u: torch.Tensor, lam: torch.Tensor) -> dict:
    """Block sizes of the kernels: a program scans ``BD`` channels of one sequence through the whole length.
    Few sequences (a CKB's: batch × scan orders, each a whole flattened field) would leave most of a GPU idle,
    so the channel block is halved, down to :data:`MIN_BD`, until the grid has a program per multiprocessor
    (8 sequences of 64 channels: 32 programs at the tile's 16 channels, 128 at 4)."""
    batch, length, d_inner = u.shape
    d_state = lam.shape[-1]
    bn = triton.next_power_of_2(d_state)
    bd = min(triton.next_power_of_2(d_inner), max(1, TILE // (CHUNK * bn)))
    while bd > MIN_BD and batch * triton.cdiv(d_inner, bd) < _multiprocessors(u.device):
        bd //= 2
    return dict(T=length, D=d_inner, N=d_state, P=d_inner + 2 * d_state, NC=triton.cdiv(length, CHUNK),
                BT=CHUNK, BD=bd, BN=bn)


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
        grid = (u.shape[0], triton.cdiv(sizes["D"], sizes["BD"]))
        _zoh_forward_kernel[grid](u, proj, u if dt is None else dt, lam, skip, y, checkpoints,
                                  HAS_DT=dt is not None, **sizes)
        ctx.save_for_backward(u, proj, dt, lam, skip, checkpoints)
        return y

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_y):
        u, proj, dt, lam, skip, checkpoints = ctx.saved_tensors
        sizes = _sizes(u, lam)
        batch, length = u.shape[:2]
        blocks = triton.cdiv(sizes["D"], sizes["BD"])
        du, dproj = torch.empty_like(u), torch.empty_like(proj)
        dbc = torch.empty(blocks, batch, length, 2 * sizes["N"], dtype=u.dtype, device=u.device)
        ddt = None if dt is None else torch.empty(blocks, batch, length, dtype=u.dtype, device=u.device)
        dlam = torch.empty(batch, *lam.shape, dtype=u.dtype, device=u.device)
        dskip = torch.empty(batch, *skip.shape, dtype=u.dtype, device=u.device)
        _zoh_backward_kernel[(batch, blocks)](u, proj, u if dt is None else dt, lam, skip, checkpoints,
                                              grad_y.contiguous(), du, dproj, dbc, u if ddt is None else ddt,
                                              dlam, dskip, BT_ALL=batch * length, HAS_DT=dt is not None, **sizes)
        dproj[..., sizes["D"]:] = dbc.sum(0)
        return du, dproj, None if ddt is None else ddt.sum(0), dlam.sum(0), dskip.sum(0)
