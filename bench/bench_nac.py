"""NAC runtime and peak memory at the paper's configuration, next to scaled dot-product attention; the
Top-K selection's recall against the exact top K and its memory growth, for our default candidate count
and for Algorithm 2's as printed (``topk_candidates="paper"``).

Paper NAC, Appendix D.4 (figures in docs/specs/anchors.md): sequence 1024, d_model 64, 4 heads, batch 1,
one forward pass. Here: CPU, inference (``torch.no_grad``), best of ``repeat`` runs; all rows are timed in
the same run so their ratios compare. Peak memory is the peak rise of live tensor memory during the call
(``evaluation.resources.peak_memory_mb``: the allocator's peak on GPU, the profiler's per-operator self
allocations replayed in time order on CPU).

Run: ``python -m bench.bench_nac [--quick] [--threads N]``.
"""

from __future__ import annotations

import argparse

import torch

from bench._util import Row, best_time, print_table
from circuitop import NeuronalAttentionCircuit
from circuitop.nac_topk import select_topk, select_topk_ref
from evaluation.resources import peak_memory_mb

__all__ = ["run"]

D_MODEL, HEADS, T = 64, 4, 1024
#: model name -> NeuronalAttentionCircuit keywords (None: a baseline).
CASES = {
    "NAC-Exact/05s/8k": dict(mode="exact", topk=8),
    "NAC-Exact/05s/8k, paper Top-K": dict(mode="exact", topk=8, topk_candidates="paper"),
    "NAC-Euler/05s/8k": dict(mode="euler", topk=8),
    "NAC-Steady/05s/8k": dict(mode="steady", topk=8),
    "NAC-2k": dict(mode="exact", topk=2),
    "NAC-32k": dict(mode="exact", topk=32),
    "NAC-PW (all pairs)": dict(mode="exact", topk=None),
    "Attention (1 head, SDPA)": None,
    "MHA (4 heads, SDPA)": None,
}
#: the paper's T4 figures (runtime s, peak MB) for the rows it reports.
PAPER = {"NAC-Exact/05s/8k": (7.41, 151.5), "NAC-2k": (7.31, 44.8), "NAC-32k": (7.23, 549.9),
         "NAC-PW (all pairs)": (8.56, 5042), "Attention (1 head, SDPA)": (0.0016, 16.9),
         "MHA (4 heads, SDPA)": (0.0041, 69.1)}


def _forward(name: str, t: int):
    """A zero-argument callable running one forward pass of model ``name`` on a length-``t`` sequence."""
    torch.manual_seed(0)
    x = torch.randn(1, t, D_MODEL)
    if name.startswith("Attention"):
        q, k, v = (torch.randn(1, 1, t, D_MODEL) for _ in range(3))
        return lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v)
    if name.startswith("MHA"):
        mha = torch.nn.MultiheadAttention(D_MODEL, HEADS, batch_first=True)
        return lambda: mha(x, x, x, need_weights=False)
    layer = NeuronalAttentionCircuit(D_MODEL, HEADS, **CASES[name])
    return lambda: layer(x)


def peak_mb(name: str, t: int) -> float:
    """Peak rise of live tensor memory (MB) during one forward pass (``evaluation.resources``)."""
    with torch.no_grad():
        fn = _forward(name, t)
        return peak_memory_mb(fn)


def _time_ms(name: str, t: int, repeat: int) -> float:
    with torch.no_grad():
        return 1e3 * best_time(_forward(name, t), repeat=repeat, warmup=1)


def _recall(topk: int, t: int, candidates: str) -> float:
    q, k = torch.randn(HEADS, t, D_MODEL // HEADS), torch.randn(HEADS, t, D_MODEL // HEADS)
    idx, _ = select_topk(q, k, topk, candidates=candidates)
    ref, _ = select_topk_ref(q, k, topk)
    return (idx[..., :, None] == ref[..., None, :]).any(-1).float().mean().item()


def run(quick: bool = False) -> list[Row]:
    """Runtime/peak-memory table at T = 1024, memory growth to T = 16384 (4096 with ``quick``), Top-K recall."""
    repeat = 2 if quick else 5
    rows, table = [], []
    times = {name: _time_ms(name, T, repeat) for name in CASES}
    ref = times["MHA (4 heads, SDPA)"]
    for name in CASES:
        mem = peak_mb(name, T)
        paper = PAPER.get(name)
        detail = f"peak {mem:.1f} MB; {times[name] / ref:.1f}x MHA time"
        if paper:
            detail += f"; paper (T4): {paper[0]} s, {paper[1]} MB"
        rows.append(Row("nac", f"{name} T={T}", times[name], "ms", detail))
        table.append((name, times[name] / 1e3, mem))
    lengths = (1024, 4096) if quick else (1024, 4096, 16384)
    for name in ("NAC-Exact/05s/8k", "NAC-Exact/05s/8k, paper Top-K", "MHA (4 heads, SDPA)"):
        mems = [peak_mb(name, t) for t in lengths]
        growth = mems[-1] / max(mems[0], 1e-3)
        rows.append(Row("nac", f"{name} memory growth T={lengths[0]}->{lengths[-1]}", growth, "x",
                        "peak MB " + ", ".join(f"{t}: {m:.1f}" for t, m in zip(lengths, mems))
                        + f"; length ratio {lengths[-1] // lengths[0]}x"))
    if not quick:
        rows.append(Row("nac", "NAC-Exact/05s/8k T=16384", _time_ms("NAC-Exact/05s/8k", 16384, 1), "ms", "1 run"))
    for candidates, how in (("repaired", "min(N_b, 4K) candidate blocks (default)"),
                            ("paper", "Algorithm 2's ceil(K / B_s) candidate blocks")):
        for topk in (2, 8, 32):
            rows.append(Row("nac", f"Top-{topk} recall vs exact, {candidates}, random q/k, T={T}",
                            _recall(topk, T, candidates), "", how))
    print(f"\nmodel                      runtime (s)   peak memory (MB)   [CPU, T={T}, d={D_MODEL}, {HEADS} heads]")
    for name, seconds, mem in table:
        print(f"{name:<26} {seconds:>11.4f}   {mem:>16.1f}")
    return rows


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats, memory growth to T=4096 only")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch intra-op threads (1 avoids OpenMP barrier stalls on an oversubscribed CPU)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print_table(run(quick=args.quick), "NAC runtime and memory")
