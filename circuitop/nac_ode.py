"""NAC logit dynamics: the closed-form, Euler and steady-state solutions of da/dt = −ω a + φ, and the
per-pair pseudo-time t (NAC, Eqs. 1–3, 17–18 and "Construction of Time Vector")."""

from __future__ import annotations

import math

import torch
from torch import nn

__all__ = ["MODES", "nac_logits", "PairTimeMap"]

#: The computation modes of Section 2: closed form (Eq. 17), explicit Euler (Eq. 2), steady state (Eq. 18).
MODES = ("exact", "euler", "steady")


def nac_logits(phi: torch.Tensor, omega: torch.Tensor, t: torch.Tensor, *, mode: str = "exact",
               euler_steps: int = 5, delta_t: float = 0.5) -> torch.Tensor:
    """Attention logits a for da/dt = −ω a + φ from a₀ = 0 (Eq. 1).

    exact:  a_t = (φ/ω)(1 − e^(−ω t))                    (Eq. 17, t = the pair's pseudo-time)
    euler:  a_{n+1} = a_n + Δt(−ω a_n + φ), n < steps     (Eq. 2; horizon steps·Δt, t unused)
    steady: a* = φ/ω                                       (Eq. 18, t unused)

    Args:
        phi: content-target gate φ ∈ (0, 1), any shape, e.g. ``(batch, heads, T_q, K)``.
        omega: time-constant gate ω > 0, same shape.
        t: pseudo-time, broadcastable to ``phi``.
        mode: one of :data:`MODES`.
        euler_steps: number of Euler steps.
        delta_t: Euler step Δt.
    """
    if mode == "exact":
        return phi / omega * -torch.expm1(-omega * t)
    if mode == "steady":
        return phi / omega
    if mode == "euler":
        a = torch.zeros_like(phi)
        for _ in range(euler_steps):  # loop over solver steps (5 by default), never over sequence time
            a = a + delta_t * (phi - omega * a)
        return a
    raise ValueError(f"mode: expected one of {MODES}, found {mode!r}")


class PairTimeMap(nn.Module):
    """Per-pair pseudo-time t = σ(t_a·t_sample + t_b) with t_a, t_b affine in u = [q; k] (Section 2.2).

    t_a = w_a·[q; k] + c_a and t_b = w_b·[q; k] + c_b, one map per head. Being affine, each splits into a
    per-query part and a per-key part (:meth:`query_part`, :meth:`key_part`), added per pair in :meth:`pair_time`.

    Args:
        d_head: per-head width D.
        num_heads: H.
    """

    def __init__(self, d_head: int, num_heads: int):
        super().__init__()
        self.w = nn.Parameter(torch.randn(num_heads, 2 * d_head, 2) / math.sqrt(2 * d_head))
        # c_a = 1, c_b = 0: t starts near σ(1) ≈ 0.73 for t_sample = 1, away from the sigmoid's flat tails.
        self.c = nn.Parameter(torch.tensor([1.0, 0.0]).repeat(num_heads, 1))
        self.d_head = d_head

    def query_part(self, q: torch.Tensor) -> torch.Tensor:
        """(t_a, t_b) query halves plus offsets, ``(batch, heads, T_q, 2)`` from q ``(batch, heads, T_q, D)``."""
        return torch.einsum("bhtd,hdc->bhtc", q, self.w[:, : self.d_head]) + self.c[:, None]

    def key_part(self, k: torch.Tensor) -> torch.Tensor:
        """(t_a, t_b) key halves, ``(batch, heads, T_k, 2)`` from k ``(batch, heads, T_k, D)``."""
        return torch.einsum("bhtd,hdc->bhtc", k, self.w[:, self.d_head:])

    @staticmethod
    def pair_time(pair: torch.Tensor, t_sample: torch.Tensor | None) -> torch.Tensor:
        """t ``(batch, heads, T_q, P)`` from summed parts ``(batch, heads, T_q, P, 2)``; t_sample ``(batch, T_q)``."""
        ts = 1.0 if t_sample is None else t_sample[:, None, :, None]
        return torch.sigmoid(pair[..., 0] * ts + pair[..., 1])

    def forward(self, u: torch.Tensor, t_sample: torch.Tensor | None = None) -> torch.Tensor:
        """t for concatenated pairs u ``(batch, heads, T_q, P, 2·D)`` (plain path)."""
        pair = torch.einsum("bhtpd,hdc->bhtpc", u, self.w) + self.c[:, None, None]
        return self.pair_time(pair, t_sample)
