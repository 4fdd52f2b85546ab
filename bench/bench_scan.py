"""Selective scan and Cascaded Kirchhoff Block: time ratios measured side by side in one run.

1. Scan forward+backward, ``selective_scan`` (the chunked torch scan) vs the plain loop
   ``selective_scan_ref`` at batch 8 x 4096 steps x 64 channels, and the traffic floor: three
   elementwise torch passes that read and write the bytes a forward+backward scan must (the largest
   ratio a memory-bound machine allows, whatever the scan).
2. Scan forward+backward at 8 x 4096 x 64 x d_state 16 against one elementwise pass over a tensor of
   that size into a preallocated output (``torch.mul(x, y, out=z)``, timed the same way: the floor the
   target names, with no allocation or first-touch page faults in it). The memory-traffic floor of a
   forward+backward scan is about 6–8 such passes (target: within 10x); one row per chunk length Q in the
   full run, each with the ratio to an allocating ``torch.mul(x, y)`` in its detail.
3. Cascaded Kirchhoff Block of order 2 vs order 1 vs a plain MLP block of equal inner width
   (norm -> Linear(d, expand d) -> SiLU -> Linear(expand d, d) + residual), forward+backward, in tokens/s;
   the CKB of order 2 on the default path (the fused kernel) vs the torch formulation
   (``CIRCUITOP_NATIVE=0``), and the peak memory per token of both (the torch formulation is the
   CUDA path today).

    python -m bench.bench_scan [--quick] [--threads N]
"""

from __future__ import annotations

import argparse
import contextlib
import os

import torch
from torch import nn

from bench._util import Row, best_time, best_times_interleaved, peak_memory_mb, print_table
from circuitop import CascadedKirchhoffBlock, build_native_kernels, selective_scan, selective_scan_ref
from circuitop.scan import TRITON_CHUNK as CHUNK


@contextlib.contextmanager
def _torch_path():
    """Force the torch formulation of the Kirchhoff cell (CIRCUITOP_NATIVE=0) inside the block."""
    old = os.environ.get("CIRCUITOP_NATIVE")
    os.environ["CIRCUITOP_NATIVE"] = "0"
    try:
        yield
    finally:
        if old is None:
            del os.environ["CIRCUITOP_NATIVE"]
        else:
            os.environ["CIRCUITOP_NATIVE"] = old


def _block_path() -> str:
    """Which path the Kirchhoff cell takes on CPU float32 here (builds the kernel if needed)."""
    return "fused kernel" if build_native_kernels(("kirchhoff",))["kirchhoff"] is None else "torch (kernel unavailable)"


def _scan_fwd_bwd(scan, a, b, weight, **kw):
    def run():
        torch.autograd.grad(scan(a, b, **kw), (a, b), grad_outputs=weight)

    return run


def _inputs(shape):
    a = torch.rand(shape).mul_(0.1).add_(0.9).requires_grad_()  # retention in [0.9, 1): long memory
    b = torch.randn(shape).requires_grad_()
    return a, b, torch.randn(shape)


def _traffic_floor(a, b, weight):
    """Elementwise torch passes that move the bytes a forward+backward scan must move: forward
    ``h = a * b`` (read 2, write 1), backward ``g = grad_h + a * h`` and ``grad_a = g * h``
    (read 3 + 2, write 2) into preallocated outputs. No scan can beat this time by much on a
    memory-bound machine, so ``loop / floor`` is about the largest ``loop / scan`` ratio it allows."""
    a, b = a.detach(), b.detach()
    h, g, grad_a = torch.empty_like(a), torch.empty_like(a), torch.empty_like(a)

    def run():
        torch.mul(a, b, out=h)
        torch.addcmul(weight, a, h, out=g)
        torch.mul(g, h, out=grad_a)

    return run


def _scan_vs_loop(quick: bool) -> list[Row]:
    shape = (8, 1024 if quick else 4096, 64)
    a, b, weight = _inputs(shape)
    # the loop, the scan and the floor take turns, each warmed up in its round (its caches and
    # allocations, after the others ran); the millisecond cases take the best of 5 calls per round
    fns = {"loop": _scan_fwd_bwd(selective_scan_ref, a, b, weight),
           "fast": _scan_fwd_bwd(selective_scan, a, b, weight),
           "floor": _traffic_floor(a, b, weight)}
    best = best_times_interleaved(fns, rounds=2 if quick else 5, warmup=0, round_warmup=1,
                                  repeat={"loop": 1, "fast": 5, "floor": 5})
    t_ref, t_fast, t_floor = best["loop"], best["fast"], best["floor"]
    size = "x".join(map(str, shape))
    return [Row(f"scan fwd+bwd {size}", "loop / selective_scan (chunked torch)", t_ref / t_fast, "x",
                f"loop {1e3 * t_ref:.0f} ms, scan {1e3 * t_fast:.1f} ms"),
            Row(f"scan fwd+bwd {size}", "loop / traffic floor", t_ref / t_floor, "x",
                f"3 elementwise passes moving the scan's bytes: {1e3 * t_floor:.1f} ms; "
                f"scan / floor {t_fast / t_floor:.2f}x")]


def _scan_vs_elementwise(quick: bool) -> list[Row]:
    shape = (8, 1024 if quick else 4096, 64, 16)
    a, b, weight = _inputs(shape)
    x, y = torch.randn(shape), torch.randn(shape)
    repeat = 2 if quick else 5
    t_mul = best_time(lambda: torch.mul(x, y), repeat=repeat)
    out = torch.empty(shape)  # the same pass without allocating (page faults) its output
    t_mul_out = best_time(lambda: torch.mul(x, y, out=out), repeat=repeat)
    size = "x".join(map(str, shape))
    rows = [Row(f"scan {size}", "one torch.mul(out=) pass", 1e3 * t_mul_out, "ms",
                f"allocating torch.mul: {1e3 * t_mul:.0f} ms")]
    for q in (None,) if quick else (None, 16, 32, 64, 128):
        label = f"Q {'auto' if q is None else q}"
        t_fwd = best_time(lambda: selective_scan(a.detach(), b.detach(), chunk_size=q), repeat=repeat)
        t_fb = best_time(_scan_fwd_bwd(selective_scan, a, b, weight, chunk_size=q), repeat=repeat)
        rows.append(Row(f"scan {size}", f"fwd / mul(out=), {label}", t_fwd / t_mul_out, "x", f"{1e3 * t_fwd:.0f} ms"))
        rows.append(Row(f"scan {size}", f"fwd+bwd / mul(out=), {label}", t_fb / t_mul_out, "x",
                        f"{1e3 * t_fb:.0f} ms (floor ~6-8x, target <= 10x); "
                        f"/ allocating mul: {t_fb / t_mul:.1f}x"))
    return rows


class _MLPBlock(nn.Module):
    """The plain baseline: Y = X + W_2 SiLU(W_1 Norm(X)), inner width expand * d_model."""

    def __init__(self, d_model: int, *, expand: int = 2):
        super().__init__()
        self.norm = nn.LayerNorm(d_model)
        self.net = nn.Sequential(nn.Linear(d_model, expand * d_model), nn.SiLU(), nn.Linear(expand * d_model, d_model))

    def forward(self, x):
        return x + self.net(self.norm(x))


def _blocks(quick: bool) -> list[Row]:
    batch, length, d_model = (4, 256, 32) if quick else (8, 1024, 64)
    x = torch.randn(batch, length, d_model)
    models = {
        "MLP block": _MLPBlock(d_model),
        "CKB order 1": CascadedKirchhoffBlock(d_model, order=1),
        "CKB order 2": CascadedKirchhoffBlock(d_model, order=2),
    }
    rows, times = [], {}
    for name, model in models.items():
        times[name] = best_time(lambda: model(x).square().mean().backward(), repeat=1 if quick else 3)
        rows.append(Row(f"block fwd+bwd {batch}x{length}x{d_model}", name, batch * length / times[name], "tokens/s"))
    for name in ("CKB order 1", "CKB order 2"):
        rows.append(Row(f"block fwd+bwd {batch}x{length}x{d_model}", f"{name} / MLP block time",
                        times[name] / times["MLP block"], "x"))
    rows.append(Row(f"block fwd+bwd {batch}x{length}x{d_model}", "order 2 / order 1 time",
                    times["CKB order 2"] / times["CKB order 1"], "x"))
    model = models["CKB order 2"]
    with _torch_path():
        t_torch = best_time(lambda: model(x).square().mean().backward(), repeat=1 if quick else 3)
    rows.append(Row(f"block fwd+bwd {batch}x{length}x{d_model}", "CKB order 2: torch scan / default time",
                    t_torch / times["CKB order 2"], "x",
                    f"default ({_block_path()}) {1e3 * times['CKB order 2']:.0f} ms, torch scan {1e3 * t_torch:.0f} ms"))
    return rows + _memory_per_token(model, x)


def _memory_per_token(model: nn.Module, x: torch.Tensor) -> list[Row]:
    """Peak live memory of one forward+backward of the order-2 block per token, on the default CPU path
    (the fused kernel) and on the torch formulation, which is today's CUDA path: it materializes
    ``(batch, length, d_inner, d_state)`` tensors that the fused kernel never builds."""
    tokens = x.shape[0] * x.shape[1]
    step = lambda: model(x).square().mean().backward()  # noqa: E731
    fused = peak_memory_mb(step)
    with _torch_path():
        torch_path = peak_memory_mb(step)
    case = f"block fwd+bwd {x.shape[0]}x{x.shape[1]}x{x.shape[2]}"
    cell = model.cells[0]
    states = cell.d_inner * cell.d_state * x.element_size()  # bytes of one token's (d_inner, d_state) state
    return [Row(case, f"CKB order 2 memory per token, default ({_block_path()})", 1e6 * fused / tokens, "bytes"),
            Row(case, "CKB order 2 memory per token, torch formulation", 1e6 * torch_path / tokens,
                "bytes", f"{torch_path / max(fused, 1e-9):.1f}x the default's"),
            Row(case, "CUDA paths, one cell's scan memory per token: torch formulation", 3 * states, "bytes",
                "computed: ᾱ, the injections and the saved states, (d_inner, d_state) each"),
            Row(case, "CUDA paths, one cell's scan memory per token: Triton kernels", states / CHUNK, "bytes",
                f"computed: one saved state per {CHUNK} steps (circuitop.knc_triton), plus a fixed "
                f"(batch, {CHUNK}, d_inner, d_state) scratch in the backward")]


def run(quick: bool = False) -> list[Row]:
    """Rows of the three comparisons above (``quick``: shorter sequences, fewer repeats)."""
    torch.manual_seed(0)
    return _scan_vs_loop(quick) + _scan_vs_elementwise(quick) + _blocks(quick)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="length 1024 (256 for blocks), fewer repeats")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print_table(run(quick=args.quick), title=f"selective scan and CKB ({torch.get_num_threads()} thread(s))")
