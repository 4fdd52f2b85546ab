"""The Neuronal Attention Circuit layer (NAC, Sections 2–2.2.1), built as the paper states it.

Per head h, for each query i and each selected key j (Top-K by Algorithm 2, or all keys when ``topk=None``):

    u_ij = [q_i; k_j],  φ_ij = σ(head_φ(NCP(u_ij))),  ω_ij = softplus(head_ω(NCP(u_ij))) + ε   (Eqs. 14–16)
    t_ij = σ(t_a(u_ij)·t_sample_i + t_b(u_ij))                                                 (Section 2.2)
    a_ij = logit of da/dt = −ω a + φ, a₀ = 0, by mode exact / euler / steady                  (Eqs. 17, 2, 18)
    α_ij = softmax_j(a_ij),  out_i = Σ_j α_ij v_j t_ij                                         (Eq. 19)

then heads are concatenated and projected (Section 2.2.1). q, k, v come from sparse NCP sensory gates (Eq. 13).
Unlike the authors' code, φ and ω depend on the pair (see ``docs/specs/cells.md``).
"""

from __future__ import annotations

import torch
from torch import nn

from pde_data.core.model import time_steps
from circuitop.nac_ode import MODES, PairTimeMap, nac_logits
from circuitop.nac_topk import CANDIDATE_MODES, gather_keys, select_topk, usable_keys
from circuitop.ncp import NCPBackbone, NCPProjection

__all__ = ["NeuronalAttentionCircuit", "sequence_timestamps"]


def sequence_timestamps(obj, *, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Per-sample timestamps ``(batch, time)``, t − t₀, from an xarray sequence's ``time`` coordinate."""
    dt = time_steps(obj, dtype=torch.float64)
    return (dt.cumsum(1) - dt[:, :1]).to(dtype)


def _check_config(d_model, num_heads, topk, mode, euler_steps, delta_t, block_multiple, candidates):
    if num_heads < 1 or d_model < 1 or d_model % num_heads:
        raise ValueError(f"d_model: expected a positive multiple of num_heads={num_heads}, found {d_model}")
    if topk is not None and (not isinstance(topk, int) or topk < 1):
        raise ValueError(f"topk: expected None (all pairs) or an integer >= 1, found {topk!r}")
    if mode not in MODES:
        raise ValueError(f"mode: expected one of {MODES}, found {mode!r}")
    if euler_steps < 1 or not delta_t > 0:
        raise ValueError(f"euler_steps, delta_t: expected >= 1 and > 0, found {euler_steps}, {delta_t}")
    if not block_multiple >= 1:
        raise ValueError(f"block_multiple: expected >= 1, found {block_multiple}")
    if candidates not in CANDIDATE_MODES:
        raise ValueError(f"topk_candidates: expected one of {CANDIDATE_MODES}, found {candidates!r}")


def _check_tensor(name: str, x: torch.Tensor, shape: tuple) -> None:
    if x.shape != torch.Size(shape):
        raise ValueError(f"{name}: expected shape {tuple(shape)}, found {tuple(x.shape)}")
    if x.is_floating_point() and not torch.isfinite(x).all():
        raise ValueError(f"{name}: expected finite values, found NaN or inf")


def _masked_softmax(logits: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Softmax over the last axis with invalid entries at weight 0 (a row with no valid key gets all zeros)."""
    any_valid = valid.any(-1, keepdim=True)
    logits = logits.masked_fill(~valid, float("-inf")).masked_fill(~any_valid, 0.0)
    return torch.softmax(logits, dim=-1) * valid


class NeuronalAttentionCircuit(nn.Module):
    """Multi-head NAC attention on ``(batch, time, d_model)`` (self) or separate queries and keys (cross).

    Args:
        d_model: model width, divisible by ``num_heads``.
        num_heads: H; each head has width D = d_model / H and its own backbone and time maps.
        topk: keys per query chosen by the block-centroid Top-K (Algorithm 2); ``None`` = all pairs (NAC-PW).
        sparsity: NCP sparsity of the sensory gates and the backbone, in [0, 1).
        mode: ``"exact"`` (Eq. 17), ``"euler"`` (Eq. 2) or ``"steady"`` (Eq. 18).
        euler_steps, delta_t: Euler steps and step size (horizon euler_steps·delta_t).
        block_multiple: candidate blocks = min(all, ⌈block_multiple·topk⌉) in the Top-K selection.
        topk_candidates: ``"repaired"`` (the default, with ``block_multiple``) or ``"paper"``: Algorithm 2's
            ⌈topk / B_s⌉ candidate blocks, as printed (see :mod:`circuitop.nac_topk`).
        causal: key j is usable by query i only if j ≤ i.
        backbone_units: backbone neurons per head (default D + ⌊D/0.6⌋, the paper's rule per head).
        seed: wiring seed.

    Example:
        >>> nac = NeuronalAttentionCircuit(64, 4, topk=8)
        >>> x, stamps = torch.randn(2, 128, 64), torch.rand(2, 128).cumsum(1)
        >>> y, att = nac(x, t=stamps, return_attention=True)     # y: (2, 128, 64); att["phi"]: (2, 4, 128, 8)
    """

    def __init__(self, d_model: int, num_heads: int, *, topk: int | None = 8, sparsity: float = 0.5,
                 mode: str = "exact", euler_steps: int = 5, delta_t: float = 0.5, block_multiple: float = 4.0,
                 causal: bool = False, backbone_units: int | None = None, seed: int = 22222,
                 topk_candidates: str = "repaired"):
        super().__init__()
        _check_config(d_model, num_heads, topk, mode, euler_steps, delta_t, block_multiple, topk_candidates)
        d_head = d_model // num_heads
        self.q_proj = NCPProjection(d_model, d_model, sparsity=sparsity, seed=seed)
        self.k_proj = NCPProjection(d_model, d_model, sparsity=sparsity, seed=seed + 1)
        self.v_proj = NCPProjection(d_model, d_model, sparsity=sparsity, seed=seed + 2)
        n_motor = max(1, d_head // 2)
        units = backbone_units if backbone_units is not None else max(d_head + int(d_head / 0.6), n_motor + 3)
        self.backbone = NCPBackbone(d_head, num_heads, units=units, n_motor=n_motor, sparsity=sparsity,
                                    seed=seed + 3)
        self.time_map = PairTimeMap(d_head, num_heads)
        self.out_proj = nn.Linear(d_model, d_model)
        self.d_model, self.num_heads, self.topk, self.mode = d_model, num_heads, topk, mode
        self.euler_steps, self.delta_t = euler_steps, delta_t
        self.block_multiple, self.causal, self.topk_candidates = block_multiple, causal, topk_candidates

    def forward(self, x: torch.Tensor, t: torch.Tensor | None = None, mask: torch.Tensor | None = None,
                return_attention: bool = False):
        """Self-attention. x ``(batch, time, d_model)``; t ``(batch, time)`` timestamps (None: t_sample = 1);
        mask ``(batch, time)`` bool, True = real key, False = padding. Returns ``(batch, time, d_model)``
        and, with ``return_attention``, a dict (see :meth:`attend`)."""
        _check_tensor("x", x, (*x.shape[:2], self.d_model) if x.ndim == 3 else (-1, -1, self.d_model))
        return self.forward_cross(x, x, x, t=t, mask=mask, return_attention=return_attention)

    def forward_cross(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                      t: torch.Tensor | None = None, mask: torch.Tensor | None = None,
                      return_attention: bool = False):
        """Cross-attention. query ``(batch, T_q, d_model)``; key, value ``(batch, T_k, d_model)``;
        t ``(batch, T_q)`` per-query timestamps; mask ``(batch, T_k)`` bool key mask (True = keep)."""
        for name, x in (("query", query), ("key", key), ("value", value)):
            if x.ndim != 3:
                raise ValueError(f"{name}: expected shape (batch, time, {self.d_model}), found {tuple(x.shape)}")
        (b, t_q), t_k = query.shape[:2], key.shape[1]
        for name, x, length in (("query", query, t_q), ("key", key, t_k), ("value", value, t_k)):
            _check_tensor(name, x, (b, length, self.d_model))
        if t is not None:
            _check_tensor("t", t, (b, t_q))
        if mask is not None:
            _check_tensor("mask", mask, (b, t_k))
            if mask.dtype != torch.bool:
                raise ValueError(f"mask: expected dtype torch.bool, found {mask.dtype}")
        q, k, v = self.project(query, key, value)
        heads, aux = self.attend(q, k, v, t_sample=t, key_valid=mask)
        out = self.out_proj(heads.transpose(1, 2).reshape(b, t_q, self.d_model))
        return (out, aux) if return_attention else out

    def project(self, query, key, value) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Sensory-gate projections split into heads: each ``(batch, heads, time, D)``."""
        def split(x):
            return x.reshape(x.shape[0], x.shape[1], self.num_heads, -1).transpose(1, 2)
        return split(self.q_proj(query)), split(self.k_proj(key)), split(self.v_proj(value))

    def _select(self, q, k, key_valid):
        """(indices ``(batch, heads, T_q, K)`` or None for all pairs, valid mask broadcastable to the pairs)."""
        b, h, t_q, d = q.shape
        t_k = k.shape[2]
        if self.topk is None:
            valid = usable_keys(key_valid, 0, t_q, t_k, self.causal, q.device)  # (batch or 1, T_q or 1, T_k)
            return None, valid[:, None].expand(b, h, t_q, t_k)
        kv = None if key_valid is None else key_valid[:, None].expand(b, h, t_k).reshape(b * h, t_k)
        idx, valid = select_topk(q.reshape(b * h, t_q, d), k.reshape(b * h, t_k, d), self.topk,
                                 block_multiple=self.block_multiple, key_valid=kv, causal=self.causal,
                                 candidates=self.topk_candidates)
        return idx.reshape(b, h, t_q, -1), valid.reshape(b, h, t_q, -1)

    def attend(self, q, k, v, *, t_sample=None, key_valid=None):
        """NAC on per-head tensors q ``(batch, heads, T_q, D)``, k, v ``(batch, heads, T_k, D)``.

        Returns the head outputs ``(batch, heads, T_q, D)`` and a dict of per-pair tensors
        ``(batch, heads, T_q, P)`` (P = K_eff, or T_k for all pairs): ``phi``, ``omega``, ``time``,
        ``logits``, ``weights`` (zero for unusable keys), ``valid``, and ``indices`` (the key of each pair).
        """
        idx, valid = self._select(q, k, key_valid)
        # one gather of every per-key quantity: backbone first-layer part, time-map part, value
        key_bb, key_t = self.backbone.key_part(k), self.time_map.key_part(k)
        parts = gather_keys(torch.cat([key_bb, key_t, v], -1), idx).split(
            [key_bb.shape[-1], key_t.shape[-1], v.shape[-1]], dim=-1)
        phi, omega = self.backbone.gates(self.backbone.query_part(q)[:, :, :, None] + parts[0])
        tau = self.time_map.pair_time(self.time_map.query_part(q)[:, :, :, None] + parts[1], t_sample)
        logits = nac_logits(phi, omega, tau, mode=self.mode, euler_steps=self.euler_steps, delta_t=self.delta_t)
        weights = _masked_softmax(logits, valid)
        if idx is None:
            heads = (weights * tau) @ v
            idx = torch.arange(k.shape[2], device=q.device).expand_as(valid)
        else:
            heads = torch.einsum("bhtp,bhtpd->bhtd", weights * tau, parts[2])
        aux = {"phi": phi, "omega": omega, "time": tau, "logits": logits, "weights": weights,
               "valid": valid, "indices": idx}
        return heads, aux
