"""Cascaded Kirchhoff Block: shapes, causality, order 0 = identity, cascade structure, field wrappers."""

import pytest
import torch
from torch.nn import functional as F

from circuitop import CascadedKirchhoffBlock, CascadedKirchhoffBlock1d, CascadedKirchhoffBlock2d
from circuitop.ckb import causal_depthwise_conv, gated_sum


def _block(d_model=6, seed=0, **kw):
    torch.manual_seed(seed)
    return CascadedKirchhoffBlock(d_model, d_state=4, **kw).double()


def _randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


@pytest.mark.parametrize("order", [1, 2, 3])
def test_shape_and_parameter_count_grow_with_order(order):
    block = _block(order=order)
    assert block(_randn(2, 37, 6)).shape == (2, 37, 6)
    assert len(block.cells) == order


def test_order_zero_is_exact_identity():
    """Order 0 is the 0-order baseline of the Poisson ablation: no cell, Y = X exactly, no parameters."""
    block = _block(order=0)
    x = _randn(2, 20, 6)
    assert block(x) is x
    assert sum(p.numel() for p in block.parameters()) == 0


@pytest.mark.parametrize("conv_kernel", [1, 4])
def test_block_is_causal(conv_kernel):
    """Output at t depends only on inputs at times <= t: d y_t / d x_{>t} is exactly zero."""
    block = _block(order=2, conv_kernel=conv_kernel)
    x = _randn(1, 24, 6).requires_grad_()
    t = 11
    (grad,) = torch.autograd.grad(block(x)[0, t].sum(), x)
    assert torch.count_nonzero(grad[0, t + 1 :]) == 0
    assert grad[0, : t + 1].abs().sum() > 0  # the past does influence y_t


def _record_cells(block):
    """A list that receives ``(input, output)`` of every cell call: the block calls each cell's
    unchecked ``forward_unchecked`` (it checked its input once), so that is what is wrapped."""
    seen = []

    def recording(run):
        def wrapped(u, dt):
            out = run(u, dt)
            seen.append((u, out))
            return out
        return wrapped

    for cell in block.cells:
        cell.forward_unchecked = recording(cell.forward_unchecked)
    return seen


def test_cascade_sums_serial_stage_outputs():
    """Eqs. 35–36: stage r receives stage r-1's output and ȳ sums every stage's output."""
    block = _block(order=3)
    x = _randn(2, 15, 6)
    seen = _record_cells(block)
    branch = block._cascade(x, None)
    assert len(seen) == 3
    for (_, previous_out), (next_in, _) in zip(seen, seen[1:]):
        assert next_in is previous_out
    u, g = block.in_proj(block.norm(x)).chunk(2, dim=-1)
    total = sum(out for _, out in seen)
    torch.testing.assert_close(branch, total * torch.nn.functional.silu(g), rtol=1e-13, atol=1e-13)


def _path(native: bool, request, monkeypatch) -> None:
    """Selects the native kernels (skipped by conftest's ``kirchhoff_native`` when they are disabled or
    cannot be built) or the torch path (the GPU's)."""
    if native:
        request.getfixturevalue("kirchhoff_native")
    else:
        monkeypatch.setenv("CIRCUITOP_NATIVE", "0")


@pytest.mark.parametrize("native", [True, False])
@pytest.mark.parametrize("kernel, length", [(1, 11), (2, 11), (4, 11), (4, 2), (5, 1)])
def test_causal_depthwise_conv_equals_left_padded_conv1d(kernel, length, native, request, monkeypatch):
    """The (batch, length, channels) depthwise convolution equals nn.Conv1d(groups=channels) on the
    transposed input with kernel - 1 zeros of left padding, in values and gradients, on the native
    and the torch path, also for sequences shorter than the kernel."""
    _path(native, request, monkeypatch)
    conv = torch.nn.Conv1d(5, 5, kernel, groups=5).double()
    u = _randn(3, length, 5).requires_grad_()
    fast = causal_depthwise_conv(u, conv.weight, conv.bias)
    assert type(fast.grad_fn).__name__ == ("_Native" if native else "_") + "CausalDepthwiseFnBackward"
    ref = conv(F.pad(u.transpose(1, 2), (kernel - 1, 0))).transpose(1, 2)
    torch.testing.assert_close(fast, ref, rtol=1e-13, atol=1e-13)
    weight = _randn(3, length, 5, seed=4)
    grads = [torch.autograd.grad((y * weight).sum(), (u, conv.weight, conv.bias)) for y in (fast, ref)]
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("order", [1, 2, 3])
def test_native_gated_sum_equals_torch(order, dtype, request, monkeypatch):
    """Eqs. 36–37's ȳ ⊙ SiLU(g) in the native pass equals torch's sum · silu in values and in the
    gradients of g and of every stage output, for gate values up to ±60 (sigmoid saturates, no overflow)."""
    _path(True, request, monkeypatch)
    g = (_randn(2, 9, 5, seed=1) * 20).clamp(-60, 60).to(dtype).requires_grad_()
    ys = [_randn(2, 9, 5, seed=2 + r).to(dtype).requires_grad_() for r in range(order)]
    weight = _randn(2, 9, 5, seed=9).to(dtype)
    results = []
    for native in (True, False):
        if not native:
            monkeypatch.setenv("CIRCUITOP_NATIVE", "0")
        out = gated_sum(ys, g)
        assert ("_NativeGatedSumFn" in type(out.grad_fn).__name__) == native
        results.append([out, *torch.autograd.grad((out * weight).sum(), [g, *ys])])
    tol = dict(rtol=1e-12, atol=1e-12) if dtype == torch.float64 else dict(rtol=1e-5, atol=1e-6)
    for fast, ref in zip(*results):
        torch.testing.assert_close(fast, ref, **tol)


def test_native_backward_uses_the_forwards_kernels(kirchhoff_native, monkeypatch):
    """A graph built on the native kernels (ZOH scan, convolution, gate) differentiates with them even
    when CIRCUITOP_NATIVE=0 is set between the forward and the backward: same gradients as an
    undisturbed run."""
    torch.manual_seed(0)
    block = CascadedKirchhoffBlock(6, order=2, d_state=4).double()
    x = _randn(2, 9, 6).requires_grad_()
    weight = _randn(2, 9, 6, seed=3)
    grads = []
    for switch in (False, True):
        monkeypatch.delenv("CIRCUITOP_NATIVE", raising=False)
        loss = (block(x) * weight).sum()
        if switch:
            monkeypatch.setenv("CIRCUITOP_NATIVE", "0")
        grads.append(torch.autograd.grad(loss, [x, *block.parameters()]))
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_native_block_kernels_reject_bad_shapes(kirchhoff_native):
    ops = kirchhoff_native
    u = torch.randn(2, 7, 3)
    with pytest.raises(RuntimeError, match=r"taps: expected \(channels, kernel\)"):
        ops.conv_forward(u, torch.randn(4, 2), torch.randn(3))
    with pytest.raises(RuntimeError, match="bias: expected"):
        ops.conv_forward(u, torch.randn(3, 2), torch.randn(4))
    with pytest.raises(RuntimeError, match="dy: expected a contiguous CPU tensor of shape"):
        ops.conv_backward(u, torch.randn(3, 2), torch.randn(2, 6, 3))
    with pytest.raises(RuntimeError, match="ys: expected at least one"):
        ops.gate_forward(u, [])
    with pytest.raises(RuntimeError, match=r"ys\[r\]: expected"):
        ops.gate_forward(u, [u, u.double()])


def test_first_cell_input_is_the_conv_stage():
    """Eq. 31: the first KNC receives u = SiLU(DSConv(W_u Norm(X))) (causal depthwise, then pointwise)."""
    block = _block(order=1)
    x = _randn(2, 15, 6)
    seen = _record_cells(block)
    block(x)
    w_u = block.in_proj(block.norm(x)).chunk(2, dim=-1)[0]
    padded = F.pad(w_u.transpose(1, 2), (block.conv_depthwise.kernel_size[0] - 1, 0))
    expected = F.silu(block.conv_pointwise(block.conv_depthwise(padded))).transpose(1, 2)
    torch.testing.assert_close(seen[0][0], expected, rtol=1e-13, atol=1e-13)


def test_gradients_reach_every_parameter():
    block = _block(order=2)
    block(_randn(2, 16, 6)).square().sum().backward()
    missing = [name for name, p in block.named_parameters() if p.grad is None or p.grad.abs().sum() == 0]
    assert not missing


def test_irregular_dt_passes_to_cells():
    block = _block(order=2)
    x = _randn(2, 16, 6)
    torch.testing.assert_close(block(x, torch.ones(2, 16, dtype=torch.float64)), block(x), rtol=0, atol=0)
    dt = torch.linspace(0.5, 20.0, 16, dtype=torch.float64).expand(2, 16)
    assert (block(x, dt) - block(x)).abs().max() > 1e-6


def test_field_block_2d_is_the_block_on_the_row_major_sequence():
    torch.manual_seed(0)
    field_block = CascadedKirchhoffBlock2d(5, order=2, d_state=4).double()
    x = _randn(2, 5, 6, 7)
    sequence = x.permute(0, 2, 3, 1).reshape(2, 42, 5)
    expected = field_block.block(sequence).reshape(2, 6, 7, 5).permute(0, 3, 1, 2)
    torch.testing.assert_close(field_block(x), expected, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("transpose, bidirectional", [(True, False), (False, True), (True, True)])
def test_field_block_2d_options_average_scan_orders(transpose, bidirectional):
    torch.manual_seed(0)
    kw = dict(order=1, d_state=4, transpose=transpose, bidirectional=bidirectional)
    field_block = CascadedKirchhoffBlock2d(3, **kw).double()
    x = _randn(1, 3, 5, 4)
    orders = [(2, 3)] + ([(3, 2)] if transpose else [])
    outputs = []
    for i, j in orders:
        seq = x.permute(0, i, j, 1).reshape(1, 20, 3)
        for flip in [False, True] if bidirectional else [False]:
            y = field_block.block(seq.flip(1)).flip(1) if flip else field_block.block(seq)
            outputs.append(y.reshape(1, x.shape[i], x.shape[j], 3).permute(0, 3, *((1, 2) if i == 2 else (2, 1))))
    torch.testing.assert_close(field_block(x), sum(outputs) / len(outputs), rtol=1e-13, atol=1e-13)
    assert field_block(x).shape == x.shape


def test_field_block_1d():
    torch.manual_seed(0)
    block = CascadedKirchhoffBlock1d(4, order=2, d_state=4).double()
    x = _randn(3, 4, 32)
    expected = block.block(x.transpose(1, 2)).transpose(1, 2)
    torch.testing.assert_close(block(x), expected, rtol=1e-13, atol=1e-13)
    assert CascadedKirchhoffBlock1d(4, order=1, bidirectional=True)(x.float()).shape == x.shape


def test_field_block_order_zero_is_identity():
    x = _randn(2, 3, 8, 8).float()
    torch.testing.assert_close(CascadedKirchhoffBlock2d(3, order=0, transpose=True)(x), x, rtol=0, atol=0)


@pytest.mark.parametrize(
    "module, shape, match",
    [
        (CascadedKirchhoffBlock(6, order=1), (2, 10, 5), r"x: expected shape \(batch, time, 6\)"),
        (CascadedKirchhoffBlock(6, order=1), (2, 6), r"x: expected shape"),
        (CascadedKirchhoffBlock2d(6, order=1), (2, 5, 8, 8), r"x: expected shape \(batch, 6, s0, s1\)"),
        (CascadedKirchhoffBlock2d(6, order=1), (2, 6, 8), r"x: expected shape"),
        (CascadedKirchhoffBlock1d(6, order=1), (2, 6, 8, 8), r"x: expected shape \(batch, 6, s0\)"),
    ],
)
def test_bad_shapes_raise(module, shape, match):
    with pytest.raises(ValueError, match=match):
        module(torch.zeros(shape))


def test_nan_and_bad_dt_and_bad_constructor_raise():
    block = CascadedKirchhoffBlock(4, order=1)
    x = torch.zeros(1, 5, 4)
    with pytest.raises(ValueError, match="dt: expected positive"):
        block(x, -torch.ones(1, 5))
    x[0, 1, 2] = float("nan")
    with pytest.raises(ValueError, match="x: expected finite"):
        block(x)
    with pytest.raises(ValueError, match="order"):
        CascadedKirchhoffBlock(4, order=-1)
