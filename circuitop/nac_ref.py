"""Dense all-pairs reference for NAC: every formula written out plainly on the full pair tensor.

=============  ================================  =====================================
name           shape                             meaning
=============  ================================  =====================================
q              (batch, heads, T_q, D)            projected queries
k, v           (batch, heads, T_k, D)            projected keys, values
u              (batch, heads, T_q, T_k, 2·D)     u_ij = [q_i; k_j], materialized
phi, omega     (batch, heads, T_q, T_k)          Eqs. 15–16 via the backbone's plain path
time           (batch, heads, T_q, T_k)          σ(t_a·t_sample + t_b)
out            (batch, heads, T_q, D)            Σ_j α_ij v_j t_ij (Eq. 19 quadrature)
=============  ================================  =====================================
"""

from __future__ import annotations

import math

import torch
from torch import nn

__all__ = ["nac_attention_ref"]


def nac_attention_ref(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, backbone: nn.Module, time_map: nn.Module,
                      *, mode: str = "exact", t_sample: torch.Tensor | None = None,
                      key_valid: torch.Tensor | None = None, causal: bool = False, euler_steps: int = 5,
                      delta_t: float = 0.5) -> tuple[torch.Tensor, dict]:
    """NAC-PW (all pairs) computed plainly; O(T_q·T_k·2D) memory. See the module table for shapes.

    Args:
        backbone: an ``NCPBackbone`` (its ``forward`` maps u → (φ, ω)).
        time_map: a ``PairTimeMap`` (its ``forward`` maps (u, t_sample) → t).
        key_valid: ``(batch, T_k)`` bool, True = usable key.
    """
    t_q, t_k = q.shape[2], k.shape[2]
    u = torch.cat([q[:, :, :, None, :].expand(-1, -1, -1, t_k, -1),
                   k[:, :, None, :, :].expand(-1, -1, t_q, -1, -1)], dim=-1)
    phi, omega = backbone(u)
    tau = time_map(u, t_sample)
    if mode == "exact":
        logits = phi / omega * (1.0 - torch.exp(-omega * tau))
    elif mode == "steady":
        logits = phi / omega
    else:
        logits = torch.zeros_like(phi)
        for _ in range(euler_steps):
            logits = logits + delta_t * (-omega * logits + phi)
    usable = torch.ones(q.shape[0], 1, t_q, t_k, dtype=torch.bool, device=q.device)
    if key_valid is not None:
        usable = usable & key_valid[:, None, None, :]
    if causal:
        usable = usable & torch.tril(torch.ones(t_q, t_k, dtype=torch.bool, device=q.device))
    usable = usable.expand_as(logits)
    weights = torch.zeros_like(logits)
    for_softmax = logits.masked_fill(~usable, -math.inf)
    rows = usable.any(-1)
    weights[rows] = torch.softmax(for_softmax[rows], dim=-1)
    out = torch.einsum("bhij,bhij,bhjd->bhid", weights, tau, v)
    return out, {"phi": phi, "omega": omega, "time": tau, "logits": logits, "weights": weights}
