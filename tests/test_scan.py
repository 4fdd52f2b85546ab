"""selective_scan (chunked torch scan, reverse-scan backward) against its plain-loop twin
selective_scan_ref."""


import pytest
import torch

from circuitop import scan as scan_module, selective_scan, selective_scan_ref

TOL = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.float64: dict(rtol=1e-12, atol=1e-12)}


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
def test_matches_reference_values_and_grads(dtype, length, h0):
    a, b, init, weight = _inputs((3, length, 4, 2), dtype, seed=length, h0=h0)
    assert selective_scan(a, b, init).grad_fn.name().endswith("_ScanFnBackward")
    fast = _values_and_grads(selective_scan, a, b, init, weight)
    ref = _values_and_grads(selective_scan_ref, a, b, init, weight)
    _assert_match(fast, ref, dtype)


@pytest.mark.parametrize("chunk_size", [1, 3, 16, 64, 333])
def test_any_chunk_size_matches_reference(chunk_size):
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
def test_long_sequence_65536_matches_reference(long_reference, dtype):
    """float64: fast = reference to 1e-12; float32: fast = the (exact-er) float64 reference to 1e-5."""
    (a, b, weight), ref = long_reference
    a, b = a.to(dtype).requires_grad_(), b.to(dtype).requires_grad_()
    fast = _values_and_grads(selective_scan, a, b, None, weight.to(dtype))
    assert all(torch.isfinite(x).all() for x in fast)
    _assert_match([x.double() for x in fast], ref, dtype)


def test_strong_decay_does_not_overflow():
    """exp(-Δλ) tiny over thousands of steps: a cumprod/cumsum-of-logs closed form gives inf/NaN here."""
    log_a = torch.full((1, 5000, 3), -50.0, dtype=torch.float32)
    a, b = torch.exp(log_a).requires_grad_(), torch.ones(1, 5000, 3, requires_grad=True)
    h = selective_scan(a, b)
    h.sum().backward()
    assert torch.isfinite(h).all() and torch.isfinite(a.grad).all() and torch.isfinite(b.grad).all()
    torch.testing.assert_close(h, torch.ones_like(h), rtol=1e-6, atol=1e-6)


def test_zero_and_negative_coefficients():
    """a = 0 resets the state (no log of 0 anywhere); negative a is handled like any real number."""
    a = torch.tensor([[0.5, 0.0, -0.5, 1.0, 0.0]], dtype=torch.float64).unsqueeze(-1)
    b = torch.tensor([[1.0, 2.0, 3.0, 4.0, 5.0]], dtype=torch.float64).unsqueeze(-1)
    h0 = torch.tensor([[10.0]], dtype=torch.float64)
    expected = torch.tensor([6.0, 2.0, 2.0, 6.0, 5.0], dtype=torch.float64)
    torch.testing.assert_close(selective_scan(a, b, h0, chunk_size=2)[0, :, 0], expected)
    torch.testing.assert_close(selective_scan_ref(a, b, h0)[0, :, 0], expected)


def test_gradcheck_float64():
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
def test_extreme_decay_matches_reference(dtype, tiny):
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
def test_zeros_and_negatives_match_reference(dtype):
    """Random coefficients in [-1, 1] with about a tenth set to exactly 0 (state resets), default chunks."""
    gen = torch.Generator().manual_seed(6)
    a = torch.rand(3, 777, 5, generator=gen, dtype=dtype).mul(2).sub(1)
    a = a.masked_fill(torch.rand(a.shape, generator=gen) < 0.1, 0.0).requires_grad_()
    b = torch.randn(3, 777, 5, generator=gen, dtype=dtype).requires_grad_()
    init = torch.randn(3, 5, generator=gen, dtype=dtype).requires_grad_()
    weight = torch.randn(3, 777, 5, generator=gen, dtype=dtype)
    fast = _values_and_grads(selective_scan, a, b, init, weight)
    _assert_match(fast, _values_and_grads(selective_scan_ref, a, b, init, weight), dtype)
