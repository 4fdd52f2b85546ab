"""The CHONN vision backbone (chonn_vision), its routings and its convolutional twin."""

import pytest
import torch

import operators
from circuitop import KirchhoffRouting2d, ROUTINGS
from circuitop.ckb import from_scan_sequences, to_scan_sequences
from operators.models import count_flops
from operators.models.vision import SIZES


def test_the_paper_sizes_have_its_stage_widths_and_depths():
    tiny = operators.build("chonn_vision", 3, 1000, size="tiny")
    assert tiny.dims == (96, 192, 384, 768) and tiny.depths == (2, 2, 6, 2)
    assert [len(stage) for stage in tiny.stages] == [2, 2, 6, 2]
    assert [stage[0].mixer.d_model for stage in tiny.stages] == [96, 192, 384, 768]
    assert SIZES["small"][:2] == (128, (2, 2, 4, 2)) and SIZES["base"][:2] == (128, (2, 2, 9, 2))
    rates = [block.drop_path for stage in tiny.stages for block in stage]
    assert rates[0] == 0.0 and rates[-1] == pytest.approx(0.2) and rates == sorted(rates)
    assert isinstance(tiny.stages[0][0].mixer, KirchhoffRouting2d) and tiny.stages[0][0].mixer.routing == "serial_constrained"


@pytest.mark.slow
def test_tiny_classifies_a_224_image():
    model = operators.build("chonn_vision", 3, 1000, size="tiny").eval()
    with torch.no_grad():
        assert model(torch.randn(1, 3, 224, 224)).shape == (1, 1000)


@pytest.mark.parametrize("name,config", [("chonn_vision", {"routing": r}) for r in ROUTINGS] + [("conv_vision", {})])
def test_small_images_and_gradients_reach_every_parameter(name, config):
    torch.manual_seed(0)
    model = operators.build(name, 1, 10, size="cpu", **config)
    logits = model(torch.randn(3, 1, 20, 28))  # not a multiple of 32
    assert logits.shape == (3, 10)
    logits.square().sum().backward()
    silent = [n for n, p in model.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
    assert not silent


def test_the_four_scan_orders_and_their_inverse():
    x = torch.arange(6.0).reshape(1, 1, 2, 3)
    seqs = to_scan_sequences(x, transpose=True, bidirectional=True)[..., 0]
    assert seqs.tolist() == [[0, 1, 2, 3, 4, 5], [5, 4, 3, 2, 1, 0], [0, 3, 1, 4, 2, 5], [5, 2, 4, 1, 3, 0]]
    y = torch.randn(2, 3, 4, 5)
    back = from_scan_sequences(to_scan_sequences(y, transpose=True, bidirectional=True), y.shape,
                               transpose=True, bidirectional=True)
    assert back.shape == (4, 2, 3, 4, 5) and all(torch.equal(b, y) for b in back)


def _second_cell_input(routing: KirchhoffRouting2d, x: torch.Tensor) -> torch.Tensor:
    seen = []
    run = routing.cells[1].forward_unchecked
    routing.cells[1].forward_unchecked = lambda u, dt: seen.append(u.detach().clone()) or run(u, dt)
    routing(x)
    del routing.cells[1].forward_unchecked
    return seen[0]


@pytest.mark.parametrize("kind", ["serial", "serial_constrained", "parallel"])
def test_the_serial_second_cell_receives_the_first_cells_output(kind):
    torch.manual_seed(1)
    routing = KirchhoffRouting2d(8, routing=kind, d_state=4)
    x = torch.randn(2, 8, 5, 6)
    before = _second_cell_input(routing, x)
    with torch.no_grad():
        routing.cells[0].c_proj.weight.add_(1.0)  # changes only the first cell's response
    after = _second_cell_input(routing, x)
    changed = not torch.allclose(before, after)
    assert changed == (kind != "parallel")  # the parallel branch sees the block input alone


@pytest.mark.parametrize("kind", ["serial_constrained", "serial"])
def test_the_constrained_routing_keeps_its_decay_positive_under_a_huge_step(kind):
    torch.manual_seed(2)
    routing = KirchhoffRouting2d(8, routing=kind, d_state=4)
    optimizer = torch.optim.SGD(routing.parameters(), lr=1e6)
    x = torch.randn(2, 8, 4, 4)
    routing(x).sum().backward()
    for parameter in routing.parameters():
        parameter.grad = None  # only the decays and the coupling move
    for cell in routing.cells:  # a gradient that pushes every decay down: the step drives raw λ below zero
        (cell.log_lam if kind == "serial_constrained" else cell.raw_lam).grad = torch.ones_like(cell.lam)
    if kind == "serial_constrained":
        routing.coupling.grad = torch.ones_like(routing.coupling)
    optimizer.step()
    positive = all(bool((cell.lam > 0).all()) for cell in routing.cells)
    assert positive == (kind == "serial_constrained")
    if kind == "serial_constrained":  # the gains stay in [0, 1] (sigmoid saturates), the response finite
        gain = torch.sigmoid(routing.coupling)
        assert bool(((gain >= 0) & (gain <= 1)).all())
        assert torch.isfinite(routing(x)).all()


def test_unknown_size_or_routing_is_one_line():
    with pytest.raises(ValueError, match="size: expected one of"):
        operators.build("chonn_vision", 3, 10, size="huge")
    with pytest.raises(ValueError, match="routing: expected one of"):
        operators.build("chonn_vision", 3, 10, routing="loop")


def test_flops_count_convolutions_and_the_scans():
    model = operators.build("chonn_vision", 1, 10, size="cpu", routing="serial")
    one, two = count_flops(model, (1, 1, 32, 32)), count_flops(model, (2, 1, 32, 32))
    assert one.counted > 0 and two.counted == 2 * one.counted and two.scan == 2 * one.scan
    # 9 per step, channel and state; four scan orders and two cells in every routing module
    tokens = [(32 // 4 // 2 ** s) ** 2 for s in range(4)]
    widths, depths, d_state = [32 * 2 ** s for s in range(4)], SIZES["cpu"][1], SIZES["cpu"][2]
    assert one.scan == sum(9 * 4 * 2 * t * w * d_state * d for t, w, d in zip(tokens, widths, depths))
    assert count_flops(operators.build("conv_vision", 1, 10, size="cpu"), (1, 1, 32, 32)).scan == 0
    assert model.training  # count_flops restores the mode


def _routing_ref(routing: KirchhoffRouting2d, x: torch.Tensor) -> torch.Tensor:
    """The routing written out: each scan order on its own, the cells' step-by-step reference twins."""
    u, g = routing.in_proj(x).chunk(2, dim=1)
    u = torch.nn.functional.silu(routing.conv(u))
    b, c, h, w = u.shape
    rows = lambda f: f.permute(0, 2, 3, 1).reshape(b, h * w, c)  # noqa: E731
    cols = lambda f: f.permute(0, 3, 2, 1).reshape(b, w * h, c)  # noqa: E731
    unrows = lambda s: s.reshape(b, h, w, c).permute(0, 3, 1, 2)  # noqa: E731
    uncols = lambda s: s.reshape(b, w, h, c).permute(0, 3, 2, 1)  # noqa: E731
    orders = [(rows, unrows, False), (rows, unrows, True), (cols, uncols, False), (cols, uncols, True)]
    k1, k2 = routing.cells[0].forward_ref, (routing.cells[1].forward_ref if len(routing.cells) > 1 else None)
    fields = []
    for to_seq, to_field, backwards in orders:
        seq = to_seq(u).flip(1) if backwards else to_seq(u)
        y1 = k1(seq)
        if routing.routing == "first_order":
            merged = y1
        elif routing.routing == "parallel":
            merged = y1 + k2(seq)
        elif routing.routing == "serial":
            merged = y1 + k2(seq + y1)
        else:
            gain = torch.sigmoid(routing.coupling)
            merged = 0.5 * (y1 + k2((1 - gain) * seq + gain * y1))
        fields.append(to_field(merged.flip(1) if backwards else merged))
    y = torch.stack(fields).mean(0)
    y = torch.nn.functional.layer_norm(y.movedim(1, -1), (c,), routing.out_norm.weight, routing.out_norm.bias)
    return routing.out_proj(y.movedim(-1, 1) * torch.nn.functional.silu(g))


@pytest.mark.parametrize("kind", ROUTINGS)
def test_the_routing_matches_its_written_out_reference_in_values_and_gradients(kind):
    torch.manual_seed(4)
    routing = KirchhoffRouting2d(6, routing=kind, d_state=3).double()
    if kind == "serial_constrained":
        with torch.no_grad():
            routing.coupling.normal_()
    x = torch.randn(2, 6, 3, 5, dtype=torch.float64, requires_grad=True)
    fast, ref = routing(x), _routing_ref(routing, x)
    assert torch.allclose(fast, ref, rtol=1e-10, atol=1e-12)
    params = [x, *routing.parameters()]
    grads_fast = torch.autograd.grad(fast.square().sum(), params)
    grads_ref = torch.autograd.grad(ref.square().sum(), params)
    assert all(torch.allclose(a, b, rtol=1e-9, atol=1e-11) for a, b in zip(grads_fast, grads_ref))


def test_an_unconstrained_cell_with_a_negative_decay_takes_the_torch_path():
    """The fused kernels assume λ > 0 (their exponential is written for -Δλ <= 0, and wraps far beyond it);
    a free λ driven below zero runs the torch formulation instead, whose overflow is a visible inf/NaN
    (which stops training) rather than finite garbage."""
    from circuitop.knc import KirchhoffCell, _torch_zoh_scan

    torch.manual_seed(5)
    cell = KirchhoffCell(4, d_state=2, positive_decay=False)
    with torch.no_grad():
        cell.raw_lam[0, 0] = -1e7
    u = torch.randn(1, 8, 4)
    expect = _torch_zoh_scan(u, cell._projections(u), None, cell.lam, cell.d)
    assert not torch.isfinite(expect).all()
    assert torch.allclose(cell.forward_unchecked(u, None), expect, equal_nan=True)
