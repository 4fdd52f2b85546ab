"""LTC: ours equals ncps (values and gradients) with irregular steps; Theorem 2 bounds; bad input."""

import ncps.torch
import pytest
import torch
from ncps.wirings import AutoNCP, FullyConnected

from circuitop import LTC, LTCCell
from ncps_reference import assert_matches_ncps

IN, BATCH, TIME = 5, 3, 6


def _wiring(kind):
    return AutoNCP(12, 3, seed=1) if kind == "autoncp" else FullyConnected(6, 2)


def _data(seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(BATCH, TIME, IN, generator=gen)
    dt = torch.rand(BATCH, TIME, generator=gen) * 2 + 0.05  # irregular, per sample
    return x, dt


@pytest.mark.parametrize("wiring, implicit, fused", [
    ("autoncp", True, True), ("autoncp", False, True), ("fully", True, True), ("fully", False, True),
    ("autoncp", True, False), ("fully", False, False),
])
def test_ltc_matches_ncps_values_and_gradients(wiring, implicit, fused):
    torch.manual_seed(0)
    ref = ncps.torch.LTC(IN, _wiring(wiring), implicit_param_constraints=implicit)
    ours = LTC.from_ncps(ref)
    ours.fused = fused
    x, dt = _data()
    weights = torch.randn(BATCH, TIME, ours.out_channels)
    assert_matches_ncps(ours, ref, x, dt, weights, LTC.from_ncps)


def test_cell_step_matches_ncps_cell_for_a_batch():
    torch.manual_seed(1)
    ref = ncps.torch.LTCCell(AutoNCP(10, 2, seed=3), in_features=IN)
    ours = LTCCell.from_ncps(ref)
    x, h = torch.randn(4, IN), torch.randn(4, 10) * 0.1
    for dt in (1.0, 0.3):
        torch.testing.assert_close(ours(x, h, dt), ref(x, h, dt), atol=1e-6, rtol=1e-5)


def test_fused_scan_gradcheck_float64():
    torch.manual_seed(2)
    model = LTC(3, AutoNCP(8, 2, seed=5), ode_unfolds=2).double()
    x = torch.randn(2, 3, 3, dtype=torch.float64, requires_grad=True)
    dt = torch.rand(2, 3, dtype=torch.float64) + 0.5
    h0 = (torch.randn(2, 8, dtype=torch.float64) * 0.1).requires_grad_()
    assert torch.autograd.gradcheck(lambda x, h0: model(x, dt, h0)[0], (x, h0))
    grads = {}
    for fused in (True, False):  # parameters: fast path against its reference twin
        model.fused = fused
        model.zero_grad()
        model(x, dt, h0)[0].pow(2).sum().backward()
        grads[fused] = {n: p.grad.clone() for n, p in model.named_parameters()}
    for name in grads[True]:
        torch.testing.assert_close(grads[True][name], grads[False][name], atol=1e-10, rtol=1e-9, msg=name)


@pytest.mark.parametrize("scale, dt_scale", [(1e4, 100.0), (1e4, 1e-3), (-1e4, 10.0)])
def test_states_stay_within_theorem2_bounds(scale, dt_scale):
    """Theorem 2 (LTC, Eq. 5): states stay in [min(0, A_min), max(0, A_max)], A the
    reversal potentials (synaptic, sensory and leak)."""
    torch.manual_seed(3)
    model = LTC(IN, AutoNCP(16, 4, seed=2))
    with torch.no_grad():  # widen the reversal potentials so the bound is not trivially +-1
        model.cell.erev.mul_(3.0).add_(torch.randn_like(model.cell.erev))
        model.cell.sensory_erev.mul_(2.0)
    cell = model.cell
    potentials = torch.cat([cell.erev.flatten(), cell.sensory_erev.flatten(), cell.vleak, torch.zeros(1)])
    x = scale * torch.randn(4, 20, IN).sign()
    dt = dt_scale * (torch.rand(4, 20) + 0.1)
    states = _states(model, x, dt)  # all neurons, not only the motor outputs
    assert torch.isfinite(states).all()
    assert states.min() >= potentials.min() - 1e-5 and states.max() <= potentials.max() + 1e-5
    if dt_scale >= 1:
        assert states.abs().max() > 0.1  # the inputs do drive the states


def _states(model, x, dt):
    from circuitop import ltc_scan

    cell = model.cell
    return ltc_scan(cell, x.new_zeros(x.shape[0], cell.units), *cell.sensory(cell.map_inputs(x), dt))


def test_bad_input_raises_clear_errors():
    model = LTC(IN, AutoNCP(10, 2))
    x = torch.randn(2, 4, IN)
    with pytest.raises(ValueError, match="dt"):
        model(x, torch.zeros(2, 4))
    with pytest.raises(ValueError, match="dt"):
        model(x, -torch.ones(2, 4))
    with pytest.raises(ValueError, match="dt"):
        model(x, torch.ones(3, 4))
    with pytest.raises(ValueError, match=r"x: expected shape \(batch, time, 5\)"):
        model(torch.randn(2, 4, IN + 1))
    with pytest.raises(ValueError, match="wiring"):
        LTCCell(FullyConnected(4, 6), IN)
    with pytest.raises(ValueError, match="out_channels"):
        LTC(IN, 4, out_channels=6)
    with pytest.raises(ValueError, match="in_channels"):
        LTCCell(model.cell.wiring, IN + 2)
    with pytest.raises(ValueError, match="h0"):
        model(x, h0=torch.zeros(2, 3))
    with pytest.raises(ValueError, match="dt"):
        model.cell(x[:, 0], torch.zeros(2, 10), 0.0)
    with pytest.raises(ValueError, match="dt"):
        model.cell(x[:, 0], torch.zeros(2, 10), torch.ones(3))


def test_forward_without_autograd_matches():
    torch.manual_seed(4)
    model = LTC(IN, AutoNCP(10, 2, seed=4))
    x, dt = _data()
    with torch.no_grad():
        y_fast = model(x, dt)[0]
    torch.testing.assert_close(y_fast, model(x, dt)[0].detach(), atol=0, rtol=0)
