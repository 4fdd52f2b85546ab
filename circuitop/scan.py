"""The first-order linear recurrence h_t = a_t * h_{t-1} + b_t, as a fast chunked scan and a plain loop.

This is the discrete state update of the Kirchhoff Neural Cell, v_k = ᾱ_k v_{k-1} + β̄_k u_k
(CHONN, Eqs. 21 and 32). The fast path never multiplies more than one chunk of
coefficients together and never forms a cumulative product over the whole sequence, so nothing
overflows for any length; products of coefficients with |a| <= 1 can only underflow to 0, which is
exact enough (the contribution they weigh is that small).

Algorithm (three levels, no Python loop over time steps; T = time, Q = chunk length, n = T / Q):

1. *Chunk summaries.* For every chunk at once (vectorised over batch, chunks and channels), the
   product A_c of its Q coefficients and the state S_c it ends in when started from zero — Q fused
   multiply-adds over tensors of size (batch, n, channels).
2. *Across chunks.* The pairs (A_c, S_c) compose like the recurrence itself, so the states entering
   the chunks come from a Hillis–Steele scan over n chunks: log2(n) vectorised steps.
3. *Within chunks.* The recurrence is re-run inside every chunk from its entering state, writing h.

Work is O(T) for levels 1 and 3 (two passes over a and b, one write of h) plus O(n log n) on the
small chunk summaries; the Python overhead is 2Q + O(log n) tensor operations per direction, each
over all chunks at once (Q <= 32 by default, so the count does not grow with T beyond log n).
Inputs are not checked for NaN here (a full extra pass); the cells and blocks check their inputs.
The backward pass is the same scan run in reverse (``_ScanFn``):
g_t = dL/dh_t + a_{t+1} g_{t+1},  dL/db_t = g_t,  dL/da_t = g_t h_{t-1},  dL/dh0 = a_0 g_0.

The KNC's unfused path (an initial state ``v0`` or ``return_state``) uses the internal
``forward_scan`` / ``reverse_scan``; its default fused path is ``circuitop/csrc/kirchhoff.cpp``.
"""

from __future__ import annotations

import math

import torch
from torch.nn import functional as F

__all__ = ["selective_scan", "selective_scan_ref", "chunk_length", "forward_scan", "reverse_scan", "TRITON_CHUNK"]

#: steps per chunk (scanned in parallel) and per saved state of the Triton kernels (circuitop.knc_triton), here
#: so that it reads without triton
TRITON_CHUNK = 16

#: Default chunk length on CPU, tuned with ``bench/bench_scan.py`` (see ``chunk_length``).
_MIN_CHUNK, _MAX_CHUNK = 8, 32


def _check_inputs(a: torch.Tensor, b: torch.Tensor, h0: torch.Tensor | None) -> None:
    if a.dim() < 2:
        raise ValueError(f"a: expected shape (batch, time, ...) with rank >= 2, found {tuple(a.shape)}")
    if a.shape != b.shape:
        raise ValueError(f"b: expected the shape of a {tuple(a.shape)}, found {tuple(b.shape)}")
    if a.dtype != b.dtype or (h0 is not None and h0.dtype != a.dtype):
        found = (a.dtype, b.dtype) + (() if h0 is None else (h0.dtype,))
        raise ValueError(f"a, b, h0: expected one dtype, found {found}")
    if a.shape[1] == 0:
        raise ValueError(f"a: expected at least one time step, found shape {tuple(a.shape)}")
    if h0 is not None and h0.shape != a.shape[:1] + a.shape[2:]:
        expected = tuple(a.shape[:1] + a.shape[2:])
        raise ValueError(f"h0: expected shape (batch, ...) = {expected}, found {tuple(h0.shape)}")


def selective_scan_ref(a: torch.Tensor, b: torch.Tensor, h0: torch.Tensor | None = None) -> torch.Tensor:
    """Reference twin of :func:`selective_scan`: a plain Python loop over time, autograd through it.

    Same arguments, shapes and result as :func:`selective_scan`.
    """
    _check_inputs(a, b, h0)
    h = torch.zeros_like(b[:, 0]) if h0 is None else h0
    states = []
    for a_t, b_t in zip(a.unbind(1), b.unbind(1)):  # unbind: O(T) backward, unlike indexing a[:, t]
        h = torch.addcmul(b_t, a_t, h)  # a_t * h + b_t
        states.append(h)
    return torch.stack(states, dim=1)


def selective_scan(a: torch.Tensor, b: torch.Tensor, h0: torch.Tensor | None = None, *,
                   chunk_size: int | None = None) -> torch.Tensor:
    """Scan h_t = a_t * h_{t-1} + b_t along dim 1 (Eq. 32 of CHONN), in parallel.

    ====  ===========================  =====================================
    name  shape                        meaning
    ====  ===========================  =====================================
    a     ``(batch, time, *channels)``  retention coefficients ᾱ_t
    b     ``(batch, time, *channels)``  injections β̄_t u_t
    h0    ``(batch, *channels)``        state before the first step (or 0)
    out   ``(batch, time, *channels)``  states h_t
    ====  ===========================  =====================================

    Any real ``a`` is accepted (zeros and negative values included); the scan is stable whenever
    the recurrence is, i.e. for |a_t| <= 1 — the KNC's ᾱ = exp(-Δλ) lies in (0, 1). Differentiable in
    ``a``, ``b`` and ``h0`` through a reverse scan.

    One chunked torch scan on every device and dtype (the module docstring has the algorithm).

    Args:
        chunk_size: chunk length Q of the scan (default: about sqrt(time), between 8 and 32).

    Example:
        >>> a, b = torch.full((1, 4, 1), 0.5), torch.ones(1, 4, 1)
        >>> selective_scan(a, b)[0, :, 0]
        tensor([1.0000, 1.5000, 1.7500, 1.8750])
    """
    _check_inputs(a, b, h0)
    if chunk_size is not None and chunk_size < 1:
        raise ValueError(f"chunk_size: expected a positive integer, found {chunk_size}")
    q = chunk_size or chunk_length(a.shape[1])
    return _ScanFn.apply(a, b, h0, min(q, a.shape[1]))


def chunk_length(length: int) -> int:
    """About sqrt(length) as a power of two in [8, 32]: balances the Q per-position operations of
    levels 1 and 3 against the size of each (batch, length / Q, channels) operation. On the CPU,
    Q = 32 was fastest at time 4096 for 64 and 64 x 16 channels (``bench/bench_scan.py``)."""
    q = 2 ** round(math.log2(max(length, 1)) / 2)
    return max(_MIN_CHUNK, min(_MAX_CHUNK, q))


class _ScanFn(torch.autograd.Function):
    """Chunked scan with a reverse-scan backward (no autograd graph through the chunks)."""

    @staticmethod
    def forward(ctx, a, b, h0, q):
        shape = a.shape
        a3, b3 = a.reshape(shape[0], shape[1], -1), b.reshape(shape[0], shape[1], -1)
        h03 = None if h0 is None else h0.reshape(shape[0], -1)
        h = forward_scan(a3, b3, h03, q)
        ctx.save_for_backward(a3, h, h03)
        ctx.q, ctx.shape, ctx.has_h0 = q, shape, h0 is not None
        return h.view(shape)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_h):
        a, h, h0 = ctx.saved_tensors
        shape = ctx.shape
        g = reverse_scan(a, grad_h.reshape(a.shape), ctx.q)
        grad_a = torch.empty_like(a)
        torch.mul(g[:, 1:], h[:, :-1], out=grad_a[:, 1:])
        if h0 is None:
            grad_a[:, 0] = 0
        else:
            torch.mul(g[:, 0], h0, out=grad_a[:, 0])
        grad_h0 = (a[:, 0] * g[:, 0]).view(shape[:1] + shape[2:]) if ctx.has_h0 else None
        return grad_a.view(shape), g.view(shape), grad_h0, None


def _chunked(a: torch.Tensor, b: torch.Tensor, q: int):
    """Views ``(batch, n, q, channels)`` of ``(batch, time, channels)`` tensors, the end padded with
    a = b = 0 when q does not divide time (harmless: padding comes after every real step, and in
    reverse it starts from a zero state)."""
    batch, length, channels = a.shape
    n = -(-length // q)
    if n * q != length:
        pad = (0, 0, 0, n * q - length)
        a, b = F.pad(a, pad), F.pad(b, pad)
    return a.view(batch, n, q, channels), b.view(batch, n, q, channels)


def _unchunked(h: torch.Tensor, length: int) -> torch.Tensor:
    h = h.view(h.shape[0], -1, h.shape[-1])
    return h[:, :length] if h.shape[1] != length else h


def forward_scan(a, b, h0, q: int) -> torch.Tensor:
    """h_t = a_t h_{t-1} + b_t on ``(batch, time, channels)``: levels 1–3 of the module docstring."""
    av, bv = _chunked(a, b, q)
    # Level 1: chunk products A_c and chunk states S_c from a zero start.
    prod, state = av.prod(dim=2), torch.zeros_like(av[:, :, 0])
    for i in range(q):
        state = torch.addcmul(bv[:, :, i], av[:, :, i], state)
    # Level 2: states entering each chunk.
    carry = _chunk_carries(prod, state, h0, reverse=False)
    # Level 3: re-run every chunk from its entering state, writing h in place.
    h = torch.empty_like(av)
    for i in range(q):
        carry = torch.addcmul(bv[:, :, i], av[:, :, i], carry, out=h[:, :, i])
    return _unchunked(h, a.shape[1])


def reverse_scan(a, grad_h, q: int) -> torch.Tensor:
    """g_t = grad_h_t + a_{t+1} g_{t+1} (the adjoint of the forward scan), run backwards in time.

    The quantity passed from step t to step t-1 is s_t = a_t g_t = a_t (grad_h_t + s_{t+1}), itself a
    reverse linear recurrence with coefficients a_t, so no shifted copy of ``a`` is needed.
    """
    av, gv = _chunked(a, grad_h, q)
    prod, state = av.prod(dim=2), torch.zeros_like(av[:, :, 0])
    for i in reversed(range(q)):
        state = torch.add(gv[:, :, i], state).mul_(av[:, :, i])
    carry = _chunk_carries(prod, state, None, reverse=True)
    g = torch.empty_like(gv)
    for i in reversed(range(q)):
        carry = torch.mul(torch.add(gv[:, :, i], carry, out=g[:, :, i]), av[:, :, i])
    return _unchunked(g, a.shape[1])


def _chunk_carries(prod, state, h0, *, reverse: bool) -> torch.Tensor:
    """States entering each of the n chunks, from chunk maps x -> prod_c * x + state_c, by an
    inclusive Hillis–Steele scan along dim 1 (log2(n) vectorised steps)."""
    if reverse:
        prod, state = prod.flip(1), state.flip(1)
    shift = 1
    while shift < prod.shape[1]:
        new_state, new_prod = torch.empty_like(state), torch.empty_like(prod)
        new_state[:, :shift], new_prod[:, :shift] = state[:, :shift], prod[:, :shift]
        torch.addcmul(state[:, shift:], prod[:, shift:], state[:, :-shift], out=new_state[:, shift:])
        torch.mul(prod[:, shift:], prod[:, :-shift], out=new_prod[:, shift:])
        state, prod, shift = new_state, new_prod, 2 * shift
    first = torch.zeros_like(state[:, :1]) if h0 is None else h0.unsqueeze(1)
    if h0 is not None:
        state = torch.addcmul(state, prod, first)
    carry = torch.cat([first, state[:, :-1]], 1)
    return carry.flip(1) if reverse else carry
