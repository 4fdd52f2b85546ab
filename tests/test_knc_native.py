"""The Kirchhoff cell's native fused ZOH scan (``csrc/kirchhoff.cpp``: step sizes Δ = softplus(z)·dt and
the skip term computed inside, the projections [z | b | c] in one tensor) against softplus + the torch
formulation ``_ZohScanFn`` + skip (itself tested against the step loop in test_knc.py): values and all
five gradients, across chunk boundaries of the backward's recomputation, extreme step sizes, long
sequences, threads."""

import warnings

import pytest
import torch
from torch.nn import functional as F

from circuitop import KirchhoffCell, NativeKernelWarning, _native
from circuitop.knc import _NativeZohScanFn, zoh_scan_ref

TOL = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.float64: dict(rtol=1e-12, atol=1e-12)}


@pytest.fixture
def native(kirchhoff_native):
    """The compiled kernels (``kirchhoff_native`` in conftest.py skips the test when they are not built)."""
    return kirchhoff_native


def _native_zoh(*inputs):
    """The native autograd function on ``(u, proj, dt, lam, skip)``, with the compiled kernels."""
    return _NativeZohScanFn.apply(_native.kirchhoff_ops(), *inputs)


def _inputs(batch, length, d_inner, d_state, dtype, seed=0, z_shift=-2.0, irregular=True):
    """u, proj = [z | b | c] (Δ = softplus(z)·dt), dt (or None), λ (spread around 1..d_state), the
    skip readout — requiring grad."""
    gen = torch.Generator().manual_seed(seed)
    u = torch.randn(batch, length, d_inner, generator=gen, dtype=dtype)
    z = torch.randn(batch, length, d_inner, generator=gen, dtype=dtype) + z_shift
    dt = 0.5 + torch.rand(batch, length, generator=gen, dtype=dtype) if irregular else None
    lam = torch.arange(1, d_state + 1, dtype=dtype).repeat(d_inner, 1)
    lam = lam * torch.exp(0.3 * torch.randn(d_inner, d_state, generator=gen, dtype=dtype))
    b = torch.randn(batch, length, d_state, generator=gen, dtype=dtype)
    c = torch.randn(batch, length, d_state, generator=gen, dtype=dtype)
    skip = torch.randn(d_inner, generator=gen, dtype=dtype)
    proj = torch.cat([z, b, c], -1)
    return [None if t is None else t.requires_grad_() for t in (u, proj, dt, lam, skip)]


def _values_and_grads(fn, inputs, seed=1):
    y = fn(*inputs)
    weight = torch.randn(y.shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64).to(y.dtype)
    wrt = [t for t in inputs if t is not None]
    return [y] + list(torch.autograd.grad(y, wrt, weight))


def _assert_same(native_results, torch_results, tol):
    assert len(native_results) == len(torch_results)
    for i, (fast, ref) in enumerate(zip(native_results, torch_results)):
        torch.testing.assert_close(fast, ref, **tol, msg=lambda m, i=i: f"output {i} (y, then grads): {m}")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("length", [1, 7, 8, 9, 17, 50])
def test_native_matches_torch_across_chunk_boundaries(native, dtype, length):
    """64 x 64 states per step make the backward recompute chunks of 8 steps (its minimum, in float32
    and float64), so these lengths end before, on and after chunk boundaries."""
    for irregular in (True, False):
        inputs = _inputs(2, length, 64, 64, dtype, irregular=irregular)
        _assert_same(_values_and_grads(_native_zoh, inputs), _values_and_grads(zoh_scan_ref, inputs), TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("d_inner", [15, 16, 17, 40])
def test_native_matches_torch_for_partial_channel_blocks(native, dtype, d_inner):
    """The backward runs blocks of 16 channels: widths below, on and above one block, and two full
    blocks plus a partial one, across a chunk boundary."""
    inputs = _inputs(2, 37, d_inner, 8, dtype)
    _assert_same(_values_and_grads(_native_zoh, inputs), _values_and_grads(zoh_scan_ref, inputs), TOL[dtype])


@pytest.mark.parametrize("z_shift", [-30.0, 8.0, 25.0])
def test_native_matches_torch_for_tiny_and_huge_steps(native, z_shift):
    """Δλ ~ 1e-13 (ᾱ -> 1, the injection -> Δ: expm1 without cancellation), Δλ up to ~200 (ᾱ
    underflows towards 0), and z beyond torch's softplus threshold 20: the one-polynomial exp/expm1
    and the in-kernel softplus stay at double precision."""
    inputs = _inputs(2, 30, 8, 16, torch.float64, z_shift=z_shift)
    _assert_same(_values_and_grads(_native_zoh, inputs), _values_and_grads(zoh_scan_ref, inputs),
                 dict(rtol=1e-11, atol=1e-11))


def test_native_long_sequence_float32_against_float64(native):
    """65,536 steps in float32: values and gradients (dλ sums over every step) stay within 1e-4 of
    the float64 result."""
    inputs64 = _inputs(1, 65536, 4, 4, torch.float64, z_shift=-4.0)
    inputs32 = [t.detach().float().requires_grad_() for t in inputs64]
    ref = _values_and_grads(zoh_scan_ref, inputs64)
    fast = _values_and_grads(_native_zoh, inputs32)
    _assert_same([t.double() for t in fast], ref, dict(rtol=1e-4, atol=1e-4))


def test_native_is_independent_of_thread_count(native):
    """Work is split over the batch: two threads give bitwise the same values and gradients."""
    inputs = _inputs(5, 40, 16, 8, torch.float32)
    one = _values_and_grads(_native_zoh, inputs)
    torch.set_num_threads(2)
    two = _values_and_grads(_native_zoh, inputs)
    for a, b in zip(one, two):
        assert torch.equal(a, b)


def test_cell_uses_native_kernel_and_falls_back_when_disabled(native, monkeypatch):
    """The cell's forward takes the native kernel on CPU and the torch formulation with
    CIRCUITOP_NATIVE=0; both give the same outputs."""
    torch.manual_seed(0)
    cell = KirchhoffCell(6, d_state=4).double()
    u = torch.randn(2, 33, 6, dtype=torch.float64)
    y = cell(u)
    assert type(y.grad_fn).__name__ == "_NativeZohScanFnBackward"  # the skip term d u is inside
    monkeypatch.setenv("CIRCUITOP_NATIVE", "0")
    y_torch = cell(u)
    assert "_ZohScanFnBackward" in str(y_torch.grad_fn.next_functions)
    assert "_NativeZohScanFnBackward" not in str(y_torch.grad_fn.next_functions)
    torch.testing.assert_close(y, y_torch, **TOL[torch.float64])


def test_native_rejects_bad_shapes(native):
    ops = native
    u, proj, dt, lam, skip = (t.detach() for t in _inputs(1, 5, 3, 2, torch.float32))
    with pytest.raises(RuntimeError, match="lam: expected"):
        ops.zoh_forward(u, proj, dt, lam.t().contiguous(), skip)
    with pytest.raises(RuntimeError, match=r"proj: expected \(batch, time, d_inner \+ 2 d_state\)"):
        ops.zoh_forward(u, proj[..., :6].contiguous(), dt, lam, skip)
    with pytest.raises(RuntimeError, match="skip: expected"):
        ops.zoh_forward(u, proj, dt, lam, skip[:2].contiguous())
    with pytest.raises(RuntimeError, match="contiguous CPU tensors of one dtype"):
        ops.zoh_forward(u, proj.double(), dt, lam, skip)
    with pytest.raises(RuntimeError, match="dt: expected a contiguous"):
        ops.zoh_forward(u, proj, dt[:, :4].contiguous(), lam, skip)


def test_zoh_build_failure_warns_once_and_falls_back(monkeypatch):
    """A failing build of the ZOH kernel: one NativeKernelWarning, no retry, and the torch formulation's
    results."""
    import torch.utils.cpp_extension as cpp_extension

    calls = []

    def broken_load(*args, **kwargs):
        calls.append(1)
        raise RuntimeError("no compiler")

    monkeypatch.setenv("CIRCUITOP_NATIVE", "1")
    monkeypatch.setattr(_native.KERNELS["kirchhoff"], "_module", None)
    monkeypatch.setattr(_native.KERNELS["kirchhoff"], "error", None)
    monkeypatch.setattr(cpp_extension, "load", broken_load)
    torch.manual_seed(0)
    cell = KirchhoffCell(3, d_state=2).double()
    u = torch.randn(1, 9, 3, dtype=torch.float64)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first, second = cell(u), cell(u)
    assert len(calls) == 1
    assert [w.category for w in caught if "kirchhoff.cpp unavailable" in str(w.message)] == [NativeKernelWarning]
    assert "no compiler" in _native.KERNELS["kirchhoff"].error
    torch.testing.assert_close(first, cell.forward_ref(u), **TOL[torch.float64])
    torch.testing.assert_close(second, first)


def test_scan_runs_in_float32_under_autocast():
    """Mixed precision (bfloat16 autocast, as ``--amp`` uses on GPU; CPU autocast here): the
    projections run in bfloat16 but the fused scan in float32, so its output is float32 and close to
    the full-precision result; gradients reach the parameters."""
    torch.manual_seed(0)
    cell = KirchhoffCell(8, d_state=4)
    u = torch.randn(2, 64, 8)
    full = cell(u)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        mixed = cell(u)
    assert mixed.dtype == torch.float32
    torch.testing.assert_close(mixed, full, rtol=0.05, atol=0.05)
    mixed.square().sum().backward()
    assert cell.log_lam.grad is not None and torch.isfinite(cell.log_lam.grad).all()
