"""Block-centroid Top-K selection (Algorithm 2, repaired): recall, ragged blocks, masks, causality."""

import math

import pytest
import torch

from circuitop.nac_topk import gather_keys, select_topk, select_topk_ref


def _recall(idx, ref_idx):
    hits = (idx[..., :, None] == ref_idx[..., None, :]).any(-1).float()
    return hits.mean().item()


def _rand(g, t, d, seed):
    return torch.randn(g, t, d, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("topk", [8, 4], ids=["dense-scored", "grouped"])  # 2·M·B_s ≥ T_k picks the path
def test_recall_when_candidates_are_dropped_random_data(topk):
    """T = 4096: B_s = 64, N_b = 64 blocks, M = 4K = 32 or 16 candidates, so half or three quarters of the
    keys are never scored. Within the candidates the selection is exact, so recall is the share of the exact
    top K whose block ranks among the M best centroids, recounted here by hand (float64: no ties at the M-th
    block). Choosing the M blocks blindly would find M / N_b of them; the centroids must do clearly better
    (measured: 0.65 and 0.40 against 0.5 and 0.25), though on random keys they cannot find all."""
    g, t, d = 4, 4096, 16
    q, k = _rand(g, 512, d, 0).double(), _rand(g, t, d, 1).double()
    bs, n_blocks, m = math.isqrt(t), t // math.isqrt(t), 4 * topk
    assert (bs, n_blocks) == (64, 64) and m < n_blocks
    idx, valid = select_topk(q, k, topk)
    ref_idx, _ = select_topk_ref(q, k, topk)
    recall = _recall(idx, ref_idx)
    centroid_scores = q @ k.reshape(g, n_blocks, bs, d).mean(2).transpose(1, 2)  # (G, T_q, N_b)
    candidate = torch.zeros_like(centroid_scores, dtype=torch.bool).scatter_(2, centroid_scores.topk(m).indices, True)
    reachable = torch.gather(candidate, 2, ref_idx // bs).double().mean().item()
    assert valid.all()
    assert recall == pytest.approx(reachable, abs=1e-12)
    assert m / n_blocks + 0.1 < recall < 0.9


def test_partial_candidates_recall_on_locally_correlated_keys():
    # K = 2 at T = 1024: M = 8 of 32 blocks are candidates (a quarter of the keys scored exactly). On keys
    # that vary smoothly along the sequence, block centroids are informative and recall stays high.
    t = torch.linspace(0, 1, 1024)
    freqs = torch.arange(1, 17, dtype=torch.float32)
    k = torch.cos(2 * math.pi * t[:, None] * freqs[None, :] * 0.5 + freqs)[None].repeat(2, 1, 1)
    k = k + 0.05 * _rand(2, 1024, 16, 3)
    q = _rand(2, 256, 16, 4)
    idx, _ = select_topk(q, k, 2)
    ref_idx, _ = select_topk_ref(q, k, 2)
    assert _recall(idx, ref_idx) >= 0.9


def test_candidate_path_scores_are_exact_inside_chosen_blocks():
    q, k = _rand(3, 40, 8, 5), _rand(3, 400, 8, 6)  # block size 20, 20 blocks; K=2 -> 8 candidate blocks
    idx, valid = select_topk(q, k, 2)
    assert valid.all() and idx.shape == (3, 40, 2)
    scores = torch.einsum("gtd,gtkd->gtk", q, gather_keys(k[:, None], idx[:, None])[:, 0])
    assert (scores[..., 0] >= scores[..., 1]).all()  # returned in score order
    assert (idx[..., 0] != idx[..., 1]).all()


def test_ragged_last_block_keys_are_selectable():
    base = _rand(1, 1, 8, 7)
    q, k = base + 0.1 * _rand(1, 5, 8, 17), _rand(1, 1000, 8, 8) * 0.1  # block 31: last block holds 8 keys
    k[0, 997] = base[0, 0] * 5
    idx, _ = select_topk(q, k, 2, block_multiple=1)
    assert (idx[..., 0] == 997).all()


def test_masked_keys_never_selected_and_short_rows_flagged():
    q, k = _rand(2, 64, 8, 9), _rand(2, 400, 8, 10)  # multiple 1: grouped candidates; 4: dense-scored
    key_valid = torch.ones(2, 400, dtype=torch.bool)
    key_valid[0, ::2] = False
    key_valid[1, 3:] = False  # only 3 usable keys
    for multiple in (1, 4):
        idx, valid = select_topk(q, k, 8, block_multiple=multiple, key_valid=key_valid)
        usable = torch.gather(key_valid[:, None].expand(-1, 64, -1), 2, idx)
        assert (usable | ~valid).all()
        assert valid[1].sum(-1).eq(3).all() and valid[0].all()


@pytest.mark.parametrize("multiple", [1, 4])
def test_causal_selection_uses_only_the_past(multiple):
    q, k = _rand(2, 300, 8, 11), _rand(2, 300, 8, 12)
    idx, valid = select_topk(q, k, 4, block_multiple=multiple, causal=True)
    query = torch.arange(300)[None, :, None]
    assert (idx[valid] <= query.expand_as(idx)[valid]).all()
    assert valid[:, 3:].all() and valid[:, 0].sum(-1).eq(1).all()
    k2 = k.clone()
    k2[:, 150:] = torch.randn(2, 150, 8) * 10  # the future must not change earlier selections
    idx2, _ = select_topk(q, k2, 4, block_multiple=multiple, causal=True)
    assert torch.equal(idx2[:, :150], idx[:, :150])


def test_all_blocks_equals_exact_topk_and_k_larger_than_keys():
    q, k = _rand(2, 30, 8, 13), _rand(2, 50, 8, 14)
    idx, _ = select_topk(q, k, 5, block_multiple=100)
    ref, _ = select_topk_ref(q, k, 5)
    assert torch.equal(idx.sort(-1).values, ref.sort(-1).values)
    idx, valid = select_topk(q, k, 80)
    assert idx.shape == (2, 30, 50) and valid.all()
    assert torch.equal(idx.sort(-1).values, torch.arange(50).expand(2, 30, 50))


def test_selection_is_chunked_beyond_the_buffer(monkeypatch):
    import circuitop.nac_topk as topk_module
    q, k = _rand(2, 90, 8, 15), _rand(2, 200, 8, 16)
    full = select_topk(q, k, 3, block_multiple=1)
    monkeypatch.setattr(topk_module, "_CHUNK_ELEMENTS", 2000)  # forces many query chunks
    chunked = select_topk(q, k, 3, block_multiple=1)
    assert torch.equal(full[0], chunked[0]) and torch.equal(full[1], chunked[1])


@pytest.mark.parametrize("t_k, multiple", [(400, 1), (400, 4)])  # grouped (8/20 blocks), dense-scored (12/20)
def test_result_is_exact_topk_within_the_candidate_blocks(t_k, multiple):
    from circuitop.nac_topk import _blocks, _coarse_scores
    q, k = _rand(2, 50, 8, 18), _rand(2, t_k, 8, 19)
    idx, _ = select_topk(q, k, 3, block_multiple=multiple)
    bs, nb, _, _, centroid = _blocks(k, torch.ones(2, t_k, dtype=torch.bool))
    coarse = _coarse_scores(q, centroid, 0, bs, t_k, False)
    m = min(nb, 3 * multiple)
    assert m < nb
    in_cand = torch.zeros(2, 50, nb, dtype=torch.bool).scatter_(2, coarse.topk(m, -1).indices, True)
    in_cand = in_cand.repeat_interleave(bs, dim=2)[..., :t_k]
    scores = (q @ k.transpose(1, 2)).masked_fill(~in_cand, float("-inf"))
    expected = scores.topk(3, -1).indices
    assert torch.equal(idx.sort(-1).values, expected.sort(-1).values)


@pytest.mark.parametrize("t_k, topk", [(1024, 8), (1024, 40), (4096, 8), (400, 3)])
def test_paper_mode_takes_algorithm_2s_candidate_count(t_k, topk):
    """Algorithm 2 as printed: B_s = ⌊√T_k⌋, M = ⌈K / B_s⌉ candidate blocks; every selected key lies in one
    of the M blocks with the best coarse scores, and within them the selection is the exact top K."""
    from circuitop.nac_topk import _blocks, _coarse_scores, candidate_blocks
    bs, nb, m = candidate_blocks(t_k, topk, candidates="paper")
    assert (bs, m) == (math.isqrt(t_k), math.ceil(topk / math.isqrt(t_k)))
    assert candidate_blocks(t_k, topk)[2] == min(nb, 4 * topk)  # the repaired default
    q, k = _rand(2, 30, 8, 20), _rand(2, t_k, 8, 21)
    idx, valid = select_topk(q, k, topk, candidates="paper")
    assert valid.all() and idx.shape == (2, 30, topk)
    coarse = _coarse_scores(q, _blocks(k, torch.ones(2, t_k, dtype=torch.bool))[4], 0, bs, t_k, False)
    chosen = torch.zeros(2, 30, nb, dtype=torch.bool).scatter_(2, coarse.topk(m, -1).indices, True)
    in_cand = chosen.repeat_interleave(bs, dim=2)[..., :t_k]
    assert torch.gather(in_cand, 2, idx).all()
    expected = (q @ k.transpose(1, 2)).masked_fill(~in_cand, float("-inf")).topk(topk, -1).indices
    assert torch.equal(idx.sort(-1).values, expected.sort(-1).values)
    with pytest.raises(ValueError, match="candidates: expected one of"):
        select_topk(q, k, topk, candidates="dense")
