"""The Triton kernels of the Kirchhoff cell's fused ZOH scan (its CUDA path) against the torch formulation:
values and gradients of every input, float32 and float64, odd lengths across chunk boundaries, several channel
blocks, with and without irregular step sizes. On a machine with a GPU they run there; elsewhere on CPU tensors
under Triton's interpreter (``TRITON_INTERPRET=1``). Skipped when triton is not installed (``pip install
circuitop[gpu]``; the test extra installs it, so CI runs them)."""

from __future__ import annotations

import os
import sys

import pytest
import torch

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
if DEVICE == "cpu" and "circuitop.knc_triton" not in sys.modules:
    # the interpreter: read when kernels are defined and when they run, so set for the whole
    # process (its subprocesses inherit it: harmless without a GPU; with one, the kernels run on the GPU)
    os.environ["TRITON_INTERPRET"] = "1"
pytest.importorskip("triton")

from circuitop import KirchhoffCell  # noqa: E402
from circuitop import knc_triton  # noqa: E402
from circuitop.knc import zoh_scan_ref  # noqa: E402

TOL = {torch.float32: dict(rtol=1e-4, atol=1e-5), torch.float64: dict(rtol=1e-10, atol=1e-12)}


def _inputs(batch, length, d_inner, d_state, dtype, irregular, seed=0):
    gen = torch.Generator().manual_seed(seed)
    u = torch.randn(batch, length, d_inner, generator=gen, dtype=dtype)
    proj = torch.randn(batch, length, d_inner + 2 * d_state, generator=gen, dtype=dtype)
    dt = (torch.rand(batch, length, generator=gen, dtype=dtype) * 2 + 0.05) if irregular else None
    lam = torch.rand(d_inner, d_state, generator=gen, dtype=dtype) * 3 + 0.2
    skip = torch.randn(d_inner, generator=gen, dtype=dtype)
    weight = torch.randn(batch, length, d_inner, generator=gen, dtype=dtype).to(DEVICE)
    args = tuple(None if t is None else t.to(DEVICE).requires_grad_() for t in (u, proj, dt, lam, skip))
    return args, [t for t in args if t is not None], weight


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("length", [1, 5, 13])
@pytest.mark.parametrize("irregular", [False, True])
@pytest.mark.parametrize("tile", [None, 8], ids=["one channel block", "three channel blocks"])
def test_triton_scan_matches_the_torch_formulation(monkeypatch, dtype, length, irregular, tile):
    monkeypatch.setattr(knc_triton, "CHUNK", 4)  # several chunks, the last one partial
    if tile:
        monkeypatch.setattr(knc_triton, "TILE", tile)  # 4 steps x 2 states x 1 channel per program
    args, leaves, weight = _inputs(2, length, 3, 2, dtype, irregular, seed=length)
    assert knc_triton._sizes(args[0], args[3])["BD"] == (1 if tile else 4)
    y = knc_triton.TritonZohScanFn.apply(*args)
    grads = torch.autograd.grad((y * weight).sum(), leaves)
    y_ref = zoh_scan_ref(*args)
    grads_ref = torch.autograd.grad((y_ref * weight).sum(), leaves)
    torch.testing.assert_close(y, y_ref, **TOL[dtype])
    for name, got, expected in zip(("u", "proj", "dt", "lam", "skip") if irregular else ("u", "proj", "lam", "skip"),
                                   grads, grads_ref):
        torch.testing.assert_close(got, expected, **TOL[dtype], msg=lambda m, name=name: f"d{name}: {m}")


def test_triton_scan_of_a_cell_with_padded_widths(monkeypatch):
    """Widths that are not powers of two (the kernels pad them) and the cell's own parameters: the
    kernel's output equals the cell's forward on its torch path."""
    monkeypatch.setattr(knc_triton, "CHUNK", 8)
    torch.manual_seed(0)
    cell = KirchhoffCell(5, d_state=3).double().to(DEVICE)
    u = torch.randn(2, 11, 5, dtype=torch.float64, device=DEVICE)
    y = knc_triton.TritonZohScanFn.apply(u, cell._projections(u), None, cell.lam, cell.d)
    torch.testing.assert_close(y, cell.forward_ref(u), **TOL[torch.float64])


def test_few_sequences_get_smaller_channel_blocks_to_fill_the_gpu(monkeypatch):
    """8 sequences of 64 channels (a CKB's fields) on 132 multiprocessors: 16-channel blocks (32 programs)
    halved to the floor of 4 (128 programs); many sequences, or no GPU, keep the tile's block."""
    monkeypatch.setattr(knc_triton, "_multiprocessors", lambda device: 132)
    lam = torch.ones(64, 16)
    assert knc_triton._sizes(torch.zeros(8, 4096, 64), lam)["BD"] == knc_triton.MIN_BD == 4
    assert knc_triton._sizes(torch.zeros(2, 4096, 64), lam)["BD"] == 4  # the floor, even with 32 programs
    assert knc_triton._sizes(torch.zeros(20, 4096, 64), lam)["BD"] == 8  # 20 x 4 = 80 < 132 <= 20 x 8
    assert knc_triton._sizes(torch.zeros(40, 4096, 64), lam)["BD"] == 16  # 40 x 4 = 160 programs
    monkeypatch.setattr(knc_triton, "_multiprocessors", lambda device: 0)
    assert knc_triton._sizes(torch.zeros(8, 4096, 64), lam)["BD"] == 16
