"""The CHONN vision backbone (chonn_vision), its routings and its convolutional twin."""

import math

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


def _cell_inputs(routing: KirchhoffRouting2d, x: torch.Tensor) -> list[torch.Tensor]:
    """What each cell of ``routing`` receives on ``x``: its input sequences ``(4·batch, h·w, d_model)``."""
    seen = []
    for cell in routing.cells:
        run = cell.forward_unchecked
        cell.forward_unchecked = lambda u, dt, run=run: seen.append(u.detach().clone()) or run(u, dt)
    try:
        routing(x)
    finally:
        for cell in routing.cells:
            del cell.forward_unchecked
    return seen


def _second_cell_input(routing: KirchhoffRouting2d, x: torch.Tensor) -> torch.Tensor:
    return _cell_inputs(routing, x)[1]


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
    first, second = _cell_inputs(routing, x)
    if kind == "serial_constrained":  # a = -1e6: γ = σ(a) saturates at 0, (1 − γ) u + γ y⁽¹⁾ is exactly u
        assert torch.equal(second, first) and torch.isfinite(routing(x)).all()
    else:  # the free decays went negative: the first cell's response blows up and reaches the second cell
        assert not torch.isfinite(second).all()


@pytest.mark.parametrize("kind", ROUTINGS)
def test_the_baseline_routing_has_the_standard_state_space_decay(kind):
    """``first_order`` is "the standard visual state-space routing block" (CHONN Methods, routing ablation), whose
    decay is positive by construction: VMamba's A = −exp(A_log) with A_log = log n (n = 1..d_state). Its cell
    stores log λ so initialised and reads λ = exp(log λ) > 0 for any parameter value (floored at LAMBDA_MIN:
    an underflow to 0 never reaches the ZOH injection's division); so does the constrained routing's; the
    ``parallel`` and ``serial`` cells keep λ itself, free."""
    from circuitop.knc import LAMBDA_MIN

    d_model, d_state = 4, 12
    routing = KirchhoffRouting2d(d_model, routing=kind, d_state=d_state)
    n = torch.arange(1.0, d_state + 1).repeat(d_model, 1)
    positive = kind in ("first_order", "serial_constrained")
    for cell in routing.cells:
        assert cell.positive_decay == positive
        if not positive:
            assert torch.equal(cell.raw_lam, n) and not hasattr(cell, "log_lam")
            continue
        assert torch.equal(cell.log_lam, torch.log(n))  # VMamba's and Mamba's A_log initialisation
        extremes = torch.tensor([-1e30, -1e4, -104.0, -50.0, -10.0, -9.0, -1.0, 0.0, 2.0, 20.0, 80.0, 1e4])
        with torch.no_grad():
            cell.log_lam.copy_(extremes.repeat(d_model, 1))
        assert bool((cell.lam > 0).all()) and bool((cell.lam >= LAMBDA_MIN * (1 - 1e-6)).all())  # float32 exp(log)
        above = cell.log_lam >= math.log(LAMBDA_MIN)
        assert above.any() and torch.equal(cell.lam[above], torch.exp(cell.log_lam[above]))  # −A = exp(A_log)


def test_the_head_normalises_every_token_then_pools_then_classifies():
    """The head is "normalization, global average pooling and a linear classifier" (CHONN Methods; VMamba's
    classifier: norm, avgpool, head): each token of the last feature map is normalised over its channels
    before the tokens are averaged. Written out here on a 2×2 last map (64² input), where the two orders differ."""
    torch.manual_seed(6)
    model = operators.build("chonn_vision", 1, 10, size="cpu", routing="first_order").eval()
    with torch.no_grad():
        model.head_norm.weight.normal_()
        model.head_norm.bias.normal_()
        x = torch.randn(3, 1, 64, 64)
        f = model.features(x)
        assert f.shape[2:] == (2, 2)
        norm = model.head_norm

        def layer_norm(z, dim):  # over the channels, at every position of the other axes
            z = (z - z.mean(dim, keepdim=True)) / torch.sqrt(z.var(dim, unbiased=False, keepdim=True) + norm.eps)
            shape = [1] * z.dim()
            shape[dim] = -1
            return z * norm.weight.view(shape) + norm.bias.view(shape)

        norm_then_pool = model.head(layer_norm(f, 1).mean((2, 3)))
        pool_then_norm = model.head(layer_norm(f.mean((2, 3)), 1))
        logits = model(x)
    assert torch.allclose(logits, norm_then_pool, rtol=1e-4, atol=1e-5)
    assert not torch.allclose(logits, pool_then_norm, rtol=1e-2, atol=1e-2)


def test_unknown_size_or_routing_is_one_line():
    with pytest.raises(ValueError, match="size: expected one of"):
        operators.build("chonn_vision", 3, 10, size="huge")
    with pytest.raises(ValueError, match="routing: expected one of"):
        operators.build("chonn_vision", 3, 10, routing="loop")


@pytest.mark.parametrize("routing", ["first_order", "serial"])
def test_flops_count_convolutions_and_the_scans(routing, monkeypatch):
    """The scan count is 9 operations (VMamba's count for one selective-scan update) per state update,
    and the state updates are counted here by running the cells' step-by-step reference in their place:
    every ``KirchhoffCell.step`` updates ``v_prev.numel()`` = sequences · channels · d_state potentials."""
    from circuitop.knc import KirchhoffCell

    updates, step = [], KirchhoffCell.step

    def counted_step(cell, u_k, v_prev, dt_k=None):
        updates.append(v_prev.numel())
        return step(cell, u_k, v_prev, dt_k)

    monkeypatch.setattr(KirchhoffCell, "step", counted_step)
    monkeypatch.setattr(KirchhoffCell, "forward_unchecked", lambda cell, u, dt: cell.forward_ref(u, dt))
    model = operators.build("chonn_vision", 1, 10, size="cpu", routing=routing)
    counts = []
    for batch in (1, 2):
        updates.clear()
        counts.append((count_flops(model, (batch, 1, 32, 64)), sum(updates)))  # h ≠ w
    (one, n_one), (two, n_two) = counts
    assert n_one > 0 and one.scan == 9 * n_one and two.scan == 9 * n_two
    assert n_two == 2 * n_one and one.counted > 0 and two.counted == 2 * one.counted
    assert count_flops(operators.build("conv_vision", 1, 10, size="cpu"), (1, 1, 32, 32)).scan == 0
    assert model.training  # count_flops restores the mode


#: the pixels (i, j) of an h × w field in the order each of the four scans visits them
_SCANS = {
    "rows": lambda h, w: [(i, j) for i in range(h) for j in range(w)],
    "rows reversed": lambda h, w: [(i, j) for i in range(h) for j in range(w)][::-1],
    "columns": lambda h, w: [(i, j) for j in range(w) for i in range(h)],
    "columns reversed": lambda h, w: [(i, j) for j in range(w) for i in range(h)][::-1],
}
#: ȳ_k of the routing table (CHONN Fig. 5i, circuitop.routing's docstring) from u_k, y⁽¹⁾_k, one step of K₂, γ
_ROUTING_TABLE = {
    "first_order": lambda u, y1, k2, gain: y1,
    "parallel": lambda u, y1, k2, gain: y1 + k2(u),
    "serial": lambda u, y1, k2, gain: y1 + k2(u + y1),
    "serial_constrained": lambda u, y1, k2, gain: 0.5 * (y1 + k2((1 - gain) * u + gain * y1)),
}


def _routing_ref(routing: KirchhoffRouting2d, x: torch.Tensor) -> torch.Tensor:
    """CHONN Eqs. 31, 35, 37-38 and the routing table pixel by pixel: explicit 1×1 and depthwise sums, each
    of the four scans stepping its cells (``KirchhoffCell.step``) through the pixels in its own order, ȳ the
    mean of the four scans at every pixel, then the channel LayerNorm, the SiLU gate and W_out."""
    b, c, h, w = x.shape
    silu = lambda z: z * torch.sigmoid(z)  # noqa: E731
    proj = torch.einsum("oc,bchw->bohw", routing.in_proj.weight[:, :, 0, 0], x) + routing.in_proj.bias[:, None, None]
    u_in, g = proj[:, :c], proj[:, c:]
    kernel, r = routing.conv.weight[:, 0], routing.conv.weight.shape[-1] // 2
    padded = torch.nn.functional.pad(u_in, (r, r, r, r))
    conv = sum(kernel[:, a, e, None, None] * padded[:, :, a: a + h, e: e + w]
               for a in range(2 * r + 1) for e in range(2 * r + 1))
    u = silu(conv + routing.conv.bias[:, None, None])
    merge = _ROUTING_TABLE[routing.routing]
    gain = torch.sigmoid(routing.coupling) if routing.routing == "serial_constrained" else None
    merged = {pixel: [] for pixel in _SCANS["rows"](h, w)}
    for visit in _SCANS.values():
        states = [x.new_zeros(b, c, cell.d_state) for cell in routing.cells]

        def k2(v):  # one step of the second cell, its state carried along the scan
            y2, states[1] = routing.cells[1].step(v, states[1])
            return y2

        for i, j in visit(h, w):
            y1, states[0] = routing.cells[0].step(u[:, :, i, j], states[0])
            merged[i, j].append(merge(u[:, :, i, j], y1, k2, gain))
    y_bar = torch.stack([torch.stack([sum(merged[i, j]) / 4 for j in range(w)], -1) for i in range(h)], -2)
    mean, var = y_bar.mean(1, keepdim=True), y_bar.var(1, unbiased=False, keepdim=True)
    norm = routing.out_norm
    y = (y_bar - mean) / torch.sqrt(var + norm.eps) * norm.weight[:, None, None] + norm.bias[:, None, None]
    return torch.einsum("oc,bchw->bohw", routing.out_proj.weight[:, :, 0, 0], y * silu(g)) \
        + routing.out_proj.bias[:, None, None]


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
    from circuitop.knc import KirchhoffCell, zoh_scan_ref

    torch.manual_seed(5)
    cell = KirchhoffCell(4, d_state=2, positive_decay=False)
    with torch.no_grad():
        cell.raw_lam[0, 0] = -1e7
    u = torch.randn(1, 8, 4)
    expect = zoh_scan_ref(u, cell._projections(u), None, cell.lam, cell.d)
    assert not torch.isfinite(expect).all()
    assert torch.allclose(cell.forward_unchecked(u, None), expect, equal_nan=True)
