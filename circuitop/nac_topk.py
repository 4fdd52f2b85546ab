"""Sub-quadratic Top-K key selection for NAC (paper 000, Algorithm 2, repaired) and its dense reference.

Selection score: the per-head dot product s_ij = q_i · k_j (Algorithm 2's fine score; no 1/√D scale, which
does not change the ranking). Keys are cut into blocks of B_s = ⌊√T_k⌋ (the last block ragged, so every key
is selectable); block centroids k̄_b (mean over the block's valid keys) give coarse scores q_i · k̄_b; the
top M = min(N_b, block_multiple · K) blocks per query are candidates (the top K keys may lie in K different
blocks, so M ≥ K blocks are needed to be able to find them); exact scores are computed only inside the
candidates, and the top K of those are returned. Padded, masked and (with ``causal``) future keys score −∞.

With ``causal``, a query i may use only blocks wholly in its past plus its own (diagonal) block, which is
always a candidate, so the selection never depends on future keys. Selection is discrete (no gradient) and
runs over query chunks whose buffers stay below a fixed element budget, so the T_q × T_k score matrix is
never held. When the candidates cover at least half the keys, their scores are read from one matmul of the
chunk against all keys (at most twice the candidate work, no gather; identical result).
"""

from __future__ import annotations

import math

import torch

__all__ = ["select_topk", "select_topk_ref", "gather_keys"]

_CHUNK_ELEMENTS = 2**23


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


def _key_ok(key_valid: torch.Tensor | None, t_q: int, t_k: int, causal: bool, device) -> torch.Tensor:
    """Boolean ``(G or 1, T_q or 1, T_k)`` of keys a query may use."""
    ok = torch.ones(1, 1, t_k, dtype=torch.bool, device=device)
    if key_valid is not None:
        ok = ok & key_valid[:, None, :]
    if causal:
        ok = ok & (torch.arange(t_k, device=device)[None, :] <= torch.arange(t_q, device=device)[:, None])
    return ok


def select_topk_ref(q: torch.Tensor, k: torch.Tensor, topk: int, *, key_valid: torch.Tensor | None = None,
                    causal: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact Top-K keys from the full score matrix (reference; O(T_q·T_k) memory).

    Args:
        q: ``(G, T_q, D)``; k: ``(G, T_k, D)``; key_valid: ``(G, T_k)`` bool, True = usable key.

    Returns:
        indices ``(G, T_q, K_eff)`` and valid ``(G, T_q, K_eff)`` with K_eff = min(topk, T_k).
    """
    scores = (q @ k.transpose(-1, -2)).masked_fill(~_key_ok(key_valid, q.shape[1], k.shape[1], causal, q.device),
                                                   float("-inf"))
    values, indices = scores.topk(min(topk, k.shape[1]), dim=-1)
    return indices, values > float("-inf")


def _coarse_scores(q, k, ok_keys, causal):
    """Block size, block count, and coarse scores ``(G, T_q, N_b)`` against valid-key centroids."""
    g, t_k, d = k.shape
    bs = max(math.isqrt(t_k), 1)
    nb = -(-t_k // bs)
    pad = nb * bs - t_k
    kb = torch.nn.functional.pad(k, (0, 0, 0, pad)).reshape(g, nb, bs, d)
    okb = torch.nn.functional.pad(ok_keys, (0, pad)).reshape(ok_keys.shape[0], nb, bs)
    count = okb.sum(-1)
    centroid = (kb * okb[..., None]).sum(2) / count.clamp(min=1)[..., None]
    coarse = (q @ centroid.transpose(-1, -2)).masked_fill((count == 0)[:, None, :], float("-inf"))
    if causal:
        pos = torch.arange(q.shape[1], device=q.device)[:, None]
        start = torch.arange(nb, device=q.device)[None, :] * bs
        end = (start + bs - 1).clamp(max=t_k - 1)
        coarse = coarse.masked_fill(start > pos, float("-inf"))
        coarse = coarse.masked_fill((start <= pos) & (pos <= end), float("inf"))
    return bs, nb, kb, coarse


@torch.no_grad()
def select_topk(q: torch.Tensor, k: torch.Tensor, topk: int, *, block_multiple: float = 4.0,
                key_valid: torch.Tensor | None = None, causal: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Approximate Top-K keys per query by block-centroid pruning (Algorithm 2, repaired; see module doc).

    Args:
        q: queries ``(G, T_q, D)`` (G = batch·heads).
        k: keys ``(G, T_k, D)``.
        topk: K ≥ 1; K_eff = min(K, T_k) keys are returned per query.
        block_multiple: candidate blocks M = min(N_b, ⌈block_multiple·K⌉).
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
    bs, nb, kb, coarse = _coarse_scores(q, k, key_ok.expand(g, -1), causal)
    m = min(nb, math.ceil(block_multiple * topk))
    # Candidates covering at least half the keys: one matmul against all keys costs at most twice the
    # candidate multiply-adds and avoids gathering M·B_s·D key entries per query; the result is identical.
    dense = 2 * m * bs >= t_k
    chunk = max(1, _CHUNK_ELEMENTS // max(1, g * (nb * bs if dense else m * bs * d)))
    ok_pad = torch.nn.functional.pad(key_ok, (0, nb * bs - t_k))
    out_idx, out_val = [], []
    for s in range(0, t_q, chunk):  # bounded buffers: ⌈T_q / chunk⌉ iterations, one when T_q·T_k is small
        qc = q[:, s: s + chunk]
        blocks = coarse[:, s: s + chunk].topk(m, dim=-1).indices  # (G, C, M)
        key = (blocks[..., None] * bs + torch.arange(bs, device=q.device)).flatten(2)  # (G, C, M·B_s)
        if dense:
            fine = torch.gather(qc @ kb.flatten(1, 2).transpose(-1, -2), 2, key)
        else:
            cand = kb[torch.arange(g, device=q.device)[:, None, None], blocks]  # (G, C, M, B_s, D)
            fine = torch.einsum("gcd,gcmjd->gcmj", qc, cand).flatten(2)
        usable = torch.gather(ok_pad.expand(g, -1), 1, key.flatten(1)).view_as(key)
        if causal:
            usable = usable & (key <= torch.arange(s, s + qc.shape[1], device=q.device)[:, None])
        values, pos = fine.masked_fill(~usable, float("-inf")).topk(k_eff, dim=-1)
        out_idx.append(torch.gather(key, 2, pos))
        out_val.append(values > float("-inf"))
    return torch.cat(out_idx, 1), torch.cat(out_val, 1)
