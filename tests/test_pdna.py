"""PDNA: variant A is a plain CfC, the pulse and self-attend terms follow Eqs. 3-6, the noise control is
seeded and perturbs the state in training and (reproducibly) in evaluation."""

import math

import pytest
import torch

from circuitop import PDNA, CfC
from evaluation import apply_gap

IN, HIDDEN = 4, 8


def _pair(variant, seed=0, **kw):
    torch.manual_seed(0)
    model = PDNA(IN, HIDDEN, variant=variant, seed=seed, backbone_units=8, **kw)
    cfc = CfC(IN, HIDDEN, backbone_units=8)
    cfc.load_state_dict(model.cfc.state_dict())
    return model, cfc


def _data():
    gen = torch.Generator().manual_seed(1)
    return torch.randn(3, 7, IN, generator=gen), torch.rand(3, 7, generator=gen) + 0.2


@pytest.mark.parametrize("feedback", [False, True])
def test_variant_a_equals_plain_cfc(feedback):
    model, cfc = _pair("A", feedback=feedback)
    x, dt = _data()
    for mode in (model.train, model.eval):
        mode()
        torch.testing.assert_close(model(x, dt)[0], cfc(x, dt)[0], atol=0, rtol=0)


def test_pulse_and_self_attend_follow_the_equations():
    model, cfc = _pair("E")
    with torch.no_grad():
        model.alpha.fill_(0.7), model.beta.fill_(0.4)
    x, dt = _data()
    h = cfc(x, dt)[0]
    t = dt.cumsum(1).unsqueeze(-1)
    h1 = h + 0.7 * model.amplitude * torch.sin(model.omega * t + h @ model.phase.weight.T + model.phase.bias)
    h2 = h1 + 0.4 * torch.sigmoid(h1) @ model.w_self.weight.T
    torch.testing.assert_close(model(x, dt)[0], h2, atol=1e-5, rtol=1e-5)


def test_initialisation_follows_the_paper():
    model = PDNA(IN, HIDDEN, variant="E")
    assert model.alpha.item() == pytest.approx(0.01) and model.beta.item() == pytest.approx(0.01)
    log_omega = model.omega.detach().log10()
    assert log_omega[0].item() == pytest.approx(-1) and log_omega[-1].item() == pytest.approx(1)
    torch.testing.assert_close(log_omega.diff(), torch.full((HIDDEN - 1,), 2 / (HIDDEN - 1)))
    assert PDNA(IN, HIDDEN, variant="B").noise_scale.item() == pytest.approx(0.01)
    for variant, names in {"A": set(), "B": {"noise_scale"}, "C": {"alpha", "omega"},
                           "D": {"beta"}, "E": {"alpha", "beta"}}.items():
        own = {n for n, _ in PDNA(IN, HIDDEN, variant=variant).named_parameters() if not n.startswith("cfc")}
        assert names <= own and ("beta" in own) == (variant in "DE") and ("alpha" in own) == (variant in "CE")


def test_noise_variant_is_seeded_and_acts_in_training_and_evaluation():
    x, dt = _data()
    first, cfc = _pair("B", seed=5)
    second, _ = _pair("B", seed=5)
    other, _ = _pair("B", seed=6)
    y1, y2, y3 = first(x, dt)[0], second(x, dt)[0], other(x, dt)[0]
    torch.testing.assert_close(y1, y2, atol=0, rtol=0)
    assert not torch.allclose(y1, y3)
    assert not torch.allclose(y1, cfc(x, dt)[0])
    first.eval()  # the control perturbs at test time too, on a gapped input: it differs from A, reproducibly
    gapped = apply_gap(x, 0.3)
    evaluated = first(gapped, dt)[0]
    assert not torch.allclose(evaluated, cfc(gapped, dt)[0])
    torch.testing.assert_close(first(gapped, dt)[0], evaluated, atol=0, rtol=0)
    second.eval()
    torch.testing.assert_close(second(gapped, dt)[0], evaluated, atol=0, rtol=0)
    other.eval()
    assert not torch.allclose(other(gapped, dt)[0], evaluated)
    first.train()
    noise = first(x, dt)[0] - cfc(x, dt)[0]
    assert noise.std().item() == pytest.approx(0.01, rel=0.3)


@pytest.mark.parametrize("variant", ["B", "C", "D", "E"])
def test_strengths_receive_gradients_with_feedback(variant):
    model, _ = _pair(variant, feedback=True)
    x, dt = _data()
    model(x, dt)[0].square().sum().backward()
    strengths = [p for n, p in model.named_parameters() if n in ("alpha", "beta", "noise_scale")]
    assert strengths and all(p.grad is not None and p.grad.abs().item() > 0 for p in strengths)


def test_bad_input_raises_clear_errors():
    with pytest.raises(ValueError, match="variant"):
        PDNA(IN, HIDDEN, variant="F")
    model = PDNA(IN, HIDDEN, backbone_units=8)
    with pytest.raises(ValueError, match="dt"):
        model(torch.randn(2, 3, IN), torch.zeros(2, 3))
    with pytest.raises(ValueError, match="x: expected"):
        model(torch.randn(2, 3, IN + 1))
    assert math.isfinite(model(torch.randn(2, 3, IN))[0].sum().item())
