"""selective_scan (native C++ kernel on CPU, else chunked torch scan; reverse-scan backward) against
its plain-loop twin selective_scan_ref. Tests taking ``scan_path`` run once per path."""

import warnings

import pytest
import torch

from circuitop import _native, scan as scan_module, selective_scan, selective_scan_ref

TOL = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.float64: dict(rtol=1e-12, atol=1e-12)}


@pytest.fixture
def native(scan_native):
    """The native path, enabled (tests skip when the extension cannot be built on this machine)."""


@pytest.fixture
def torch_path(monkeypatch):
    """The chunked torch fallback, forced with CIRCUITOP_NATIVE_SCAN=0."""
    monkeypatch.setenv("CIRCUITOP_NATIVE_SCAN", "0")


@pytest.fixture(params=["native", "torch"])
def scan_path(request, monkeypatch):
    """Run the test on the native path and on the chunked torch fallback."""
    if request.param == "native":
        request.getfixturevalue("scan_native")
    else:
        monkeypatch.setenv("CIRCUITOP_NATIVE_SCAN", "0")
    return request.param


def _inputs(shape, dtype, seed=0, h0=True):
    gen = torch.Generator().manual_seed(seed)
    a = torch.rand(shape, generator=gen, dtype=dtype).requires_grad_()
    b = torch.randn(shape, generator=gen, dtype=dtype).requires_grad_()
    init = torch.randn(shape[:1] + shape[2:], generator=gen, dtype=dtype).requires_grad_() if h0 else None
    weight = torch.randn(shape, generator=gen, dtype=dtype)
    return a, b, init, weight


def _values_and_grads(scan, a, b, h0, weight, **kw):
    h = scan(a, b, h0, **kw)
    inputs = (a, b) if h0 is None else (a, b, h0)
    return (h,) + torch.autograd.grad((h * weight).sum(), inputs)


def _assert_match(fast, ref, dtype):
    for x, y in zip(fast, ref):
        scale = y.abs().max().clamp_min(1.0)  # relative to the magnitude of the compared tensor
        torch.testing.assert_close(x / scale, y / scale, **TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("length", [1, 7, 1000])
@pytest.mark.parametrize("h0", [False, True])
def test_matches_reference_values_and_grads(scan_path, dtype, length, h0):
    a, b, init, weight = _inputs((3, length, 4, 2), dtype, seed=length, h0=h0)
    expected = "NativeScanFn>" if scan_path == "native" else "_ScanFnBackward"
    assert selective_scan(a, b, init).grad_fn.name().endswith(expected)
    fast = _values_and_grads(selective_scan, a, b, init, weight)
    ref = _values_and_grads(selective_scan_ref, a, b, init, weight)
    _assert_match(fast, ref, dtype)


@pytest.mark.parametrize("chunk_size", [1, 3, 16, 64, 333])
def test_any_chunk_size_matches_reference(torch_path, chunk_size):
    a, b, init, weight = _inputs((2, 200, 3), torch.float64, seed=chunk_size)
    fast = _values_and_grads(selective_scan, a, b, init, weight, chunk_size=chunk_size)
    _assert_match(fast, _values_and_grads(selective_scan_ref, a, b, init, weight), torch.float64)


@pytest.fixture(scope="module")
def long_reference():
    """Length 65,536, batch 1 x 2 channels, retention close to 1 (long memory): the float64
    reference loop (values and gradients), computed once — the loop is slow in Python."""
    gen = torch.Generator().manual_seed(1)
    a = 1 - 1e-3 * torch.rand(1, 65536, 2, generator=gen, dtype=torch.float64)
    b = torch.randn(1, 65536, 2, generator=gen, dtype=torch.float64)
    weight = torch.randn(1, 65536, 2, generator=gen, dtype=torch.float64)
    a64, b64 = a.clone().requires_grad_(), b.clone().requires_grad_()
    return (a, b, weight), _values_and_grads(selective_scan_ref, a64, b64, None, weight)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_long_sequence_65536_matches_reference(scan_path, long_reference, dtype):
    """float64: fast = reference to 1e-12; float32: fast = the (exact-er) float64 reference to 1e-5."""
    (a, b, weight), ref = long_reference
    a, b = a.to(dtype).requires_grad_(), b.to(dtype).requires_grad_()
    fast = _values_and_grads(selective_scan, a, b, None, weight.to(dtype))
    assert all(torch.isfinite(x).all() for x in fast)
    _assert_match([x.double() for x in fast], ref, dtype)


def test_strong_decay_does_not_overflow(scan_path):
    """exp(-Δλ) tiny over thousands of steps: a cumprod/cumsum-of-logs closed form gives inf/NaN here."""
    log_a = torch.full((1, 5000, 3), -50.0, dtype=torch.float32)
    a, b = torch.exp(log_a).requires_grad_(), torch.ones(1, 5000, 3, requires_grad=True)
    h = selective_scan(a, b)
    h.sum().backward()
    assert torch.isfinite(h).all() and torch.isfinite(a.grad).all() and torch.isfinite(b.grad).all()
    torch.testing.assert_close(h, torch.ones_like(h), rtol=1e-6, atol=1e-6)


def test_zero_and_negative_coefficients(scan_path):
    """a = 0 resets the state (no log of 0 anywhere); negative a is handled like any real number."""
    a = torch.tensor([[0.5, 0.0, -0.5, 1.0, 0.0]], dtype=torch.float64).unsqueeze(-1)
    b = torch.tensor([[1.0, 2.0, 3.0, 4.0, 5.0]], dtype=torch.float64).unsqueeze(-1)
    h0 = torch.tensor([[10.0]], dtype=torch.float64)
    expected = torch.tensor([6.0, 2.0, 2.0, 6.0, 5.0], dtype=torch.float64)
    torch.testing.assert_close(selective_scan(a, b, h0, chunk_size=2)[0, :, 0], expected)
    torch.testing.assert_close(selective_scan_ref(a, b, h0)[0, :, 0], expected)


def test_gradcheck_float64(scan_path):
    a, b, init, _ = _inputs((2, 9, 3), torch.float64, seed=3)
    assert torch.autograd.gradcheck(lambda a, b, h: selective_scan(a, b, h, chunk_size=4), (a, b, init))
    assert torch.autograd.gradcheck(lambda a, b: selective_scan(a, b, chunk_size=2), (a, b))


def test_constant_coefficients_geometric_series():
    """h_t = sum_{s<=t} a^(t-s) b for constant a, b: the closed form (1 - a^(t+1)) / (1 - a) b."""
    t = torch.arange(300, dtype=torch.float64)
    a = torch.full((1, 300, 1), 0.9, dtype=torch.float64)
    h = selective_scan(a, torch.ones_like(a))[0, :, 0]
    torch.testing.assert_close(h, (1 - 0.9 ** (t + 1)) / (1 - 0.9), rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize(
    "a_shape, b_shape, h0_shape, match",
    [
        ((4,), (4,), None, "a: expected shape"),
        ((2, 5, 3), (2, 5, 4), None, "b: expected the shape"),
        ((2, 5, 3), (2, 5, 3), (2, 4), "h0: expected shape"),
        ((2, 0, 3), (2, 0, 3), None, "at least one time step"),
    ],
)
def test_bad_shapes_raise(a_shape, b_shape, h0_shape, match):
    h0 = None if h0_shape is None else torch.zeros(h0_shape)
    with pytest.raises(ValueError, match=match):
        selective_scan(torch.zeros(a_shape), torch.zeros(b_shape), h0)


def test_mixed_dtypes_raise():
    with pytest.raises(ValueError, match="expected one dtype"):
        selective_scan(torch.zeros(1, 3, 2), torch.zeros(1, 3, 2, dtype=torch.float64))


@pytest.mark.parametrize("dtype, tiny", [(torch.float32, 1e-30), (torch.float64, 1e-300)])
def test_extreme_decay_matches_reference(scan_path, dtype, tiny):
    """a = 1e-30 (float32) or 1e-300 (float64) everywhere: chunk products underflow to 0, nothing
    becomes inf or NaN, and values and gradients still match the loop (h_t = b_t + a_t b_{t-1} ...)."""
    gen = torch.Generator().manual_seed(5)
    a = torch.full((2, 2000, 3), tiny, dtype=dtype).requires_grad_()
    b = torch.randn(2, 2000, 3, generator=gen, dtype=dtype).requires_grad_()
    init = torch.randn(2, 3, generator=gen, dtype=dtype).requires_grad_()
    weight = torch.randn(2, 2000, 3, generator=gen, dtype=dtype)
    fast = _values_and_grads(selective_scan, a, b, init, weight)
    assert all(torch.isfinite(x).all() for x in fast)
    _assert_match(fast, _values_and_grads(selective_scan_ref, a, b, init, weight), dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_zeros_and_negatives_match_reference(scan_path, dtype):
    """Random coefficients in [-1, 1] with about a tenth set to exactly 0 (state resets), default chunks."""
    gen = torch.Generator().manual_seed(6)
    a = torch.rand(3, 777, 5, generator=gen, dtype=dtype).mul(2).sub(1)
    a = a.masked_fill(torch.rand(a.shape, generator=gen) < 0.1, 0.0).requires_grad_()
    b = torch.randn(3, 777, 5, generator=gen, dtype=dtype).requires_grad_()
    init = torch.randn(3, 5, generator=gen, dtype=dtype).requires_grad_()
    weight = torch.randn(3, 777, 5, generator=gen, dtype=dtype)
    fast = _values_and_grads(selective_scan, a, b, init, weight)
    _assert_match(fast, _values_and_grads(selective_scan_ref, a, b, init, weight), dtype)


# --- native path: its own checks, and agreement with the fallback -------------------------------


def _both_paths(monkeypatch, fn):
    """fn() on the native path, then with CIRCUITOP_NATIVE_SCAN=0 (the chunked torch scan)."""
    native_out = fn()
    with monkeypatch.context() as m:
        m.setenv("CIRCUITOP_NATIVE_SCAN", "0")
        torch_out = fn()
    return native_out, torch_out


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("h0", [False, True])
def test_native_equals_fallback(native, monkeypatch, dtype, h0):
    a, b, init, weight = _inputs((2, 300, 3, 5), dtype, seed=11, h0=h0)
    fast, slow = _both_paths(monkeypatch, lambda: _values_and_grads(selective_scan, a, b, init, weight))
    _assert_match(fast, slow, dtype)


def test_native_gradcheck_float64(native):
    a, b, init, _ = _inputs((2, 9, 3), torch.float64, seed=4)
    assert selective_scan(a, b, init).grad_fn.name().endswith("NativeScanFn>")
    assert torch.autograd.gradcheck(selective_scan, (a, b, init))
    assert torch.autograd.gradcheck(lambda a, b: selective_scan(a, b), (a, b))
    # only some inputs needing gradients (the reverse-only kernel for b alone)
    assert torch.autograd.gradcheck(lambda b: selective_scan(a.detach(), b, init.detach()), (b,))


def test_native_gradient_refuses_double_backward(native):
    """As with @once_differentiable: create_graph works, differentiating the gradient again raises."""
    a, b, init, weight = _inputs((2, 5, 3), torch.float64, seed=6, h0=True)
    grad_a, grad_b, grad_h0 = torch.autograd.grad(selective_scan(a, b, init), (a, b, init), weight, create_graph=True)
    first = _values_and_grads(selective_scan_ref, a, b, init, weight)[1:]
    _assert_match((grad_a.detach(), grad_b.detach(), grad_h0.detach()), first, torch.float64)
    with pytest.raises(RuntimeError, match="cannot be differentiated again"):
        (grad_a.sum() + grad_b.sum()).backward()
    # with a constant incoming gradient too (where @once_differentiable would return gradients that
    # silently drop their dependence on a and b)
    grad_a, = torch.autograd.grad(selective_scan(a, b, init), a, weight.detach(), create_graph=True)
    with pytest.raises(RuntimeError, match="cannot be differentiated again"):
        grad_a.sum().backward()
    with pytest.raises(RuntimeError):  # the engine's own error: the gradient has no edge to b
        torch.autograd.grad(grad_a.sum(), b)


def test_native_gradient_of_h0_alone(native):
    """Only h0 (or only a) needing a gradient: the fused backward runs for what is asked."""
    a, b, init, weight = _inputs((2, 6, 3), torch.float64, seed=11, h0=True)
    assert torch.autograd.gradcheck(lambda h0: selective_scan(a.detach(), b.detach(), h0), (init,))
    assert torch.autograd.gradcheck(lambda a: selective_scan(a, b.detach(), init.detach()), (a,))
    ref = _values_and_grads(selective_scan_ref, a, b, init, weight)
    h = selective_scan(a.detach(), b.detach(), init)
    torch.testing.assert_close(torch.autograd.grad(h, init, weight)[0], ref[3])


@pytest.mark.parametrize("shape", [(0, 4, 3), (2, 4, 0), (2, 3, 0, 5)])
def test_native_empty_batch_or_channels(native, shape):
    a = torch.rand(shape, requires_grad=True)
    b = torch.randn(shape, requires_grad=True)
    init = torch.randn(shape[:1] + shape[2:], requires_grad=True)
    h = selective_scan(a, b, init)
    assert h.shape == shape
    h.sum().backward()
    assert a.grad.shape == shape and b.grad.shape == shape and init.grad.shape == init.shape
    assert not a.grad.abs().sum() and not init.grad.abs().sum()


def test_native_non_contiguous_inputs(native):
    """Transposed / strided inputs give the values and gradients of their contiguous copies."""
    gen = torch.Generator().manual_seed(8)
    a, b, weight = (torch.rand(3, 6, 40, generator=gen, dtype=torch.float64) for _ in range(3))
    a.requires_grad_(), b.requires_grad_()
    init = torch.randn(3, 6, generator=gen, dtype=torch.float64, requires_grad=True)
    # (batch, channels, time) storage, transposed to (batch, time, channels), every second channel
    a_s, b_s, w_s = (x.transpose(1, 2)[..., ::2] for x in (a, b, weight))
    init_s = init[:, ::2]
    assert not a_s.is_contiguous() and not init_s.is_contiguous()
    fast = _values_and_grads(selective_scan, a_s, b_s, init_s, w_s)
    ref = _values_and_grads(selective_scan_ref, a_s, b_s, init_s, w_s)
    _assert_match(fast, ref, torch.float64)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_native_internal_scans_match_fallback(native, monkeypatch, dtype):
    """_forward_scan / _reverse_scan (used by the KNC's fused path) agree on both paths."""
    gen = torch.Generator().manual_seed(9)
    a = torch.rand(2, 100, 7, generator=gen, dtype=dtype)
    b, grad = torch.randn(2, 100, 7, generator=gen, dtype=dtype), torch.randn(2, 100, 7, generator=gen, dtype=dtype)
    q = scan_module._chunk_length(100)
    fast, slow = _both_paths(
        monkeypatch, lambda: (scan_module._forward_scan(a, b, None, q), scan_module._reverse_scan(a, grad, q))
    )
    _assert_match(fast, slow, dtype)


def test_env_var_disables_native(monkeypatch):
    monkeypatch.setenv("CIRCUITOP_NATIVE_SCAN", "0")
    assert _native.scan_for(torch.zeros(1, 2, 1)) is None
    a, b = torch.rand(1, 4, 2, requires_grad=True), torch.randn(1, 4, 2)
    assert type(selective_scan(a, b).grad_fn).__name__ == "_ScanFnBackward"


def test_other_dtypes_use_fallback(native):
    a, b = torch.rand(1, 6, 2, dtype=torch.bfloat16, requires_grad=True), torch.randn(1, 6, 2, dtype=torch.bfloat16)
    assert type(selective_scan(a, b).grad_fn).__name__ == "_ScanFnBackward"


def test_build_failure_warns_once_and_falls_back(monkeypatch):
    """A failing build: one warning, no retry, and the torch scan's results."""
    import torch.utils.cpp_extension as cpp_extension

    calls = []

    def broken_load(*args, **kwargs):
        calls.append(1)
        raise RuntimeError("no compiler")

    monkeypatch.setenv("CIRCUITOP_NATIVE_SCAN", "1")
    monkeypatch.setattr(_native, "_ops", {})
    monkeypatch.setattr(_native, "_failed", {})
    monkeypatch.setattr(cpp_extension, "load", broken_load)
    a, b = torch.rand(1, 5, 2, dtype=torch.float64), torch.randn(1, 5, 2, dtype=torch.float64)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first, second = selective_scan(a, b), selective_scan(a, b)
    assert len(calls) == 1
    assert [str(w.message) for w in caught if "native CPU kernel scan.cpp unavailable" in str(w.message)] != []
    assert len([w for w in caught if "native CPU kernel scan.cpp unavailable" in str(w.message)]) == 1
    assert "no compiler" in _native.scan_build_error()
    torch.testing.assert_close(first, selective_scan_ref(a, b))
    torch.testing.assert_close(second, first)


def test_native_reused_output_buffers_do_not_alias(native):
    """Outputs of >= 1 MB come from a buffer cache: a live output is never handed out again, and a
    reused buffer holds the new results."""
    gen = torch.Generator().manual_seed(12)
    a, b = torch.rand(2, 2048, 64, generator=gen), torch.randn(2, 2048, 64, generator=gen)
    first = selective_scan(a, b)
    kept = first.clone()
    for _ in range(3):
        second = selective_scan(a, 2 * b)
        assert second.data_ptr() != first.data_ptr()
        torch.testing.assert_close(second, 2 * kept)
        del second
    torch.testing.assert_close(first, kept)
