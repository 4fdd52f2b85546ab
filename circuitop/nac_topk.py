"""Sub-quadratic Top-K key selection for NAC (NAC, Algorithm 2, repaired) and its dense reference.

Selection score: the per-head dot product s_ij = q_i · k_j (Algorithm 2's fine score; no 1/√D scale, which
does not change the ranking). Keys are cut into blocks of B_s = ⌊√T_k⌋ (the last block ragged, so every key
is selectable); block centroids k̄_b (mean over the block's valid keys) give coarse scores q_i · k̄_b; the
top M = min(N_b, block_multiple · K) blocks per query are candidates (the top K keys may lie in K different
blocks, so M ≥ K blocks are needed to be able to find them); exact scores are computed only inside the
candidates, and the top K of those are returned. Padded, masked and (with ``causal``) future keys score −∞.

With ``causal``, a query i may use only blocks wholly in its past plus its own (diagonal) block, which is
always a candidate, so the selection never depends on future keys. Selection is discrete (no gradient) and
runs over query chunks whose buffers stay below a fixed element budget, so the T_q × T_k score matrix is
never held. Candidate scores are computed grouped by key block (the queries that picked block b form one
matmul with b's keys, so keys are never copied per query); when the candidates cover at least half the
keys, they are read from one matmul of the chunk against all keys instead (at most twice the candidate
work; identical result). Cost: O(T_q·(N_b + M·B_s)·D) = O(T·√T·K·D) time, the paper's O(n√n k).
"""

from __future__ import annotations

import math

import torch

__all__ = ["select_topk", "select_topk_ref", "gather_keys", "candidate_blocks", "usable_keys", "CANDIDATE_MODES"]

#: ``"repaired"``: M = min(N_b, ⌈block_multiple·K⌉) candidate blocks (can reach the exact top K);
#: ``"paper"``: Algorithm 2 as printed, M = ⌈K / B_s⌉ blocks (just enough keys to return K of them).
CANDIDATE_MODES = ("repaired", "paper")

_CHUNK_ELEMENTS = 2**21


def gather_keys(x: torch.Tensor, indices: torch.Tensor | None) -> torch.Tensor:
    """Per-pair key features ``(batch, heads, T_q, K, F)`` from ``x`` ``(batch, heads, T_k, F)``.

    ``indices`` ``(batch, heads, T_q, K)``; ``None`` means all keys and returns the broadcast view
    ``(batch, heads, 1, T_k, F)`` without copying.
    """
    if indices is None:
        return x[:, :, None]
    b, h, tq, k = indices.shape
    flat = indices.reshape(b, h, tq * k, 1).expand(-1, -1, -1, x.shape[-1])
    return torch.gather(x, 2, flat).reshape(b, h, tq, k, x.shape[-1])


def usable_keys(key_valid: torch.Tensor | None, start: int, count: int, t_k: int, causal: bool, device) -> torch.Tensor:
    """Boolean ``(G or 1, count or 1, T_k)`` of keys the queries start … start + count − 1 may use."""
    ok = torch.ones(1, 1, t_k, dtype=torch.bool, device=device)
    if key_valid is not None:
        ok = ok & key_valid[:, None, :]
    if causal:
        ok = ok & (torch.arange(t_k, device=device) <= torch.arange(start, start + count, device=device)[:, None])
    return ok


def select_topk_ref(q: torch.Tensor, k: torch.Tensor, topk: int, *, key_valid: torch.Tensor | None = None,
                    causal: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact Top-K keys from the full score matrix (reference; O(T_q·T_k) memory).

    Args:
        q: ``(G, T_q, D)``; k: ``(G, T_k, D)``; key_valid: ``(G, T_k)`` bool, True = usable key.

    Returns:
        indices ``(G, T_q, K_eff)`` and valid ``(G, T_q, K_eff)`` with K_eff = min(topk, T_k).
    """
    usable = usable_keys(key_valid, 0, q.shape[1], k.shape[1], causal, q.device)
    scores = (q @ k.transpose(-1, -2)).masked_fill(~usable, float("-inf"))
    values, indices = scores.topk(min(topk, k.shape[1]), dim=-1)
    return indices, values > float("-inf")


def candidate_blocks(t_k: int, topk: int, *, candidates: str = "repaired", block_multiple: float = 4.0) -> tuple[int, int, int]:
    """``(B_s, N_b, M)``: block size ⌊√T_k⌋, block count and candidate blocks per query (see :data:`CANDIDATE_MODES`)."""
    if candidates not in CANDIDATE_MODES:
        raise ValueError(f"candidates: expected one of {CANDIDATE_MODES}, found {candidates!r}")
    bs = max(math.isqrt(t_k), 1)
    nb = -(-t_k // bs)
    wanted = math.ceil(topk / bs) if candidates == "paper" else math.ceil(block_multiple * topk)
    return bs, nb, min(nb, max(wanted, 1))


def _blocks(k, ok_keys):
    """Block size, count, blocked keys ``(G, N_b, B_s, D)``, blocked usability and valid-key centroids."""
    g, t_k, d = k.shape
    bs = max(math.isqrt(t_k), 1)
    nb = -(-t_k // bs)
    pad = nb * bs - t_k
    kb = torch.nn.functional.pad(k, (0, 0, 0, pad)).reshape(g, nb, bs, d)
    okb = torch.nn.functional.pad(ok_keys, (0, pad)).reshape(ok_keys.shape[0], nb, bs)
    count = okb.sum(-1, keepdim=True)
    centroid = (kb * okb[..., None]).sum(2) / count.clamp(min=1)
    centroid = centroid.masked_fill(count == 0, float("nan"))  # no usable key: never preferred
    return bs, nb, kb, okb, centroid


def _coarse_scores(qc, centroid, s, bs, t_k, causal):
    """Coarse scores ``(G, C, N_b)`` of queries s… against block centroids (−∞ for unusable blocks)."""
    coarse = torch.nan_to_num(qc @ centroid.transpose(-1, -2), nan=float("-inf"))
    if causal:
        pos = torch.arange(s, s + qc.shape[1], device=qc.device)[:, None]
        start = torch.arange(centroid.shape[1], device=qc.device)[None, :] * bs
        end = (start + bs - 1).clamp(max=t_k - 1)
        coarse = coarse.masked_fill(start > pos, float("-inf"))
        coarse = coarse.masked_fill((start <= pos) & (pos <= end), float("inf"))  # own block: always
    return coarse


def _usable(okb, key, s, causal):
    """Usability ``(G, C, P)`` of key indices ``key`` for the queries s… of a chunk."""
    flat = okb.flatten(1).expand(key.shape[0], -1)
    usable = torch.gather(flat, 1, key.flatten(1)).view_as(key)
    if causal:
        usable = usable & (key <= torch.arange(s, s + key.shape[1], device=key.device)[:, None])
    return usable


def _grouped_topk(qc, kb, okb, blocks, s, causal, k_eff):
    """Exact candidate scores grouped by key block: each block's selecting queries form one matmul.

    Pairs (query, candidate block) are sorted by block; block b's queries fill rows of a padded
    ``(G·N_b, cap, D + 1)`` tensor multiplied by b's keys extended with a bias coordinate (0 for usable keys,
    −∞ for padded or masked ones), so no key is copied per query. The top min(K, B_s) keys of every row are
    returned per query as ``(G, C, M·k)`` values and key indices.
    """
    g, c, d = qc.shape
    nb, bs, m = kb.shape[1], kb.shape[2], blocks.shape[-1]
    group = (blocks + nb * torch.arange(g, device=qc.device)[:, None, None]).flatten()
    order = torch.argsort(group, stable=True)
    sorted_group = group[order]
    counts = torch.bincount(sorted_group, minlength=g * nb)
    slot = torch.arange(group.numel(), device=qc.device) - (counts.cumsum(0) - counts)[sorted_group]
    rows = qc.new_zeros(g * nb, int(counts.max()), d + 1)
    rows[sorted_group, slot] = torch.cat([qc.reshape(g * c, d), qc.new_ones(g * c, 1)], 1)[order // m]
    bias = torch.zeros(okb.shape, dtype=qc.dtype, device=qc.device).masked_fill(~okb, float("-inf"))
    keys = torch.cat([kb, bias.expand(g, -1, -1)[..., None]], -1).reshape(g * nb, bs, d + 1)
    scores = torch.bmm(rows, keys.transpose(1, 2))  # (G·N_b, cap, B_s); unfilled rows are never read
    if causal:
        pos = torch.full(rows.shape[:2], -1, dtype=torch.long, device=qc.device)
        pos[sorted_group, slot] = s + (order // m) % c
        key_pos = (torch.arange(g * nb, device=qc.device) % nb)[:, None] * bs + torch.arange(bs, device=qc.device)
        scores = scores.masked_fill(key_pos[:, None, :] > pos[..., None], float("-inf"))
    values, within = scores.topk(min(k_eff, bs), dim=-1)
    out_v, out_k = values.new_empty(group.numel(), values.shape[-1]), within.new_empty(group.numel(), within.shape[-1])
    out_v[order] = values[sorted_group, slot]
    out_k[order] = (sorted_group % nb)[:, None] * bs + within[sorted_group, slot]
    return out_v.view(g, c, -1), out_k.view(g, c, -1)


@torch.no_grad()
def select_topk(q: torch.Tensor, k: torch.Tensor, topk: int, *, block_multiple: float = 4.0,
                key_valid: torch.Tensor | None = None, causal: bool = False,
                candidates: str = "repaired") -> tuple[torch.Tensor, torch.Tensor]:
    """Approximate Top-K keys per query by block-centroid pruning (Algorithm 2, repaired; see module doc).

    Args:
        q: queries ``(G, T_q, D)`` (G = batch·heads).
        k: keys ``(G, T_k, D)``.
        topk: K ≥ 1; K_eff = min(K, T_k) keys are returned per query.
        block_multiple: candidate blocks M = min(N_b, ⌈block_multiple·K⌉) (``candidates="repaired"``).
        candidates: ``"repaired"`` or ``"paper"`` (Algorithm 2's M = ⌈K / B_s⌉); see :data:`CANDIDATE_MODES`.
        key_valid: ``(G, T_k)`` bool, True = usable key (False = padding / masked).
        causal: forbid keys j > i.

    Returns:
        indices ``(G, T_q, K_eff)`` (long) and valid ``(G, T_q, K_eff)`` (bool; False where fewer than K_eff
        usable keys exist).
    """
    g, t_q, d = q.shape
    t_k = k.shape[1]
    k_eff = min(topk, t_k)
    key_ok = key_valid if key_valid is not None else torch.ones(1, t_k, dtype=torch.bool, device=q.device)
    bs, nb, kb, okb, centroid = _blocks(k, key_ok)
    m = candidate_blocks(t_k, topk, candidates=candidates, block_multiple=block_multiple)[2]
    # Candidates covering at least half the keys: one matmul against all keys costs at most twice the
    # candidate multiply-adds and needs no grouping; the result is identical.
    dense = 2 * m * bs >= t_k
    chunk = max(1, _CHUNK_ELEMENTS // (g * nb * bs))  # worst case: every query of a chunk in one block
    out_idx, out_val = [], []
    for s in range(0, t_q, chunk):  # bounded buffers: ⌈T_q / chunk⌉ iterations, one when T_q·T_k is small
        qc = q[:, s: s + chunk]
        if m == nb:  # every block is a candidate: the chunk's scores are the candidate scores, no indices
            fine, key = qc @ k.transpose(-1, -2), None
            if key_valid is not None or causal:
                fine = fine.masked_fill(~usable_keys(key_valid, s, qc.shape[1], t_k, causal, q.device), float("-inf"))
        else:
            blocks = _coarse_scores(qc, centroid, s, bs, t_k, causal).topk(m, dim=-1).indices  # (G, C, M)
            if dense:
                key = (blocks[..., None] * bs + torch.arange(bs, device=q.device)).flatten(2)
                fine = torch.gather(qc @ kb.flatten(1, 2).transpose(-1, -2), 2, key)
                fine = fine.masked_fill(~_usable(okb, key, s, causal), float("-inf"))
            else:
                fine, key = _grouped_topk(qc, kb, okb, blocks, s, causal, k_eff)
        values, pos = fine.topk(k_eff, dim=-1)
        out_idx.append(pos if key is None else torch.gather(key, 2, pos))
        out_val.append(values > float("-inf"))
    return torch.cat(out_idx, 1), torch.cat(out_val, 1)
