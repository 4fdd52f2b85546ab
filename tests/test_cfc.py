"""CfC: ours equals ncps in every mode (values and gradients) with per-sample irregular steps."""

import ncps.torch
import pytest
import torch

from circuitop import CfC, CfCCell
from ncps_reference import assert_matches_ncps

IN, HIDDEN, BATCH, TIME = 4, 6, 3, 5
BACKBONES = {
    "default": {"backbone_units": 16},
    "no_backbone": {"backbone_layers": 0},
    "deep_silu": {"backbone_layers": 2, "backbone_units": 8, "activation": "silu"},
    "projected": {"backbone_units": 8, "proj_size": 3},
}


@pytest.mark.parametrize("backbone", sorted(BACKBONES))
@pytest.mark.parametrize("mode", ["default", "no_gate", "pure"])
def test_cfc_matches_ncps_values_and_gradients(mode, backbone):
    torch.manual_seed(0)
    ref = ncps.torch.CfC(IN, HIDDEN, mode=mode, **BACKBONES[backbone])
    ours = CfC.from_ncps(ref)
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(BATCH, TIME, IN, generator=gen)
    dt = torch.rand(BATCH, TIME, generator=gen) * 3 + 0.05
    weights = torch.randn(BATCH, TIME, ours.out_channels, generator=gen)
    assert_matches_ncps(ours, ref, x, dt, weights, CfC.from_ncps)


@pytest.mark.parametrize("mode", ["default", "no_gate", "pure"])
def test_uniform_steps_match_ncps_for_a_batch(mode):
    torch.manual_seed(2)
    ref = ncps.torch.CfC(IN, HIDDEN, mode=mode, backbone_units=8)
    ours = CfC.from_ncps(ref)
    x, h0 = torch.randn(4, TIME, IN), torch.randn(4, HIDDEN)
    torch.testing.assert_close(ours(x, h0=h0)[0], ref(x, h0)[0], atol=1e-5, rtol=1e-5)
    cell = CfCCell.from_ncps(ref.rnn_cell)
    torch.testing.assert_close(cell(x[:, 0], h0, 0.7), ref.rnn_cell(x[:, 0], h0, 0.7)[1], atol=1e-6, rtol=1e-5)


def test_steps_are_per_sample():
    """A sample's output depends only on its own steps (ncps' squeeze would mix them for batch > 1)."""
    torch.manual_seed(3)
    model = CfC(IN, HIDDEN, backbone_units=8)
    x, dt = torch.randn(2, TIME, IN), torch.rand(2, TIME) + 0.1
    together = model(x, dt)[0]
    alone = torch.cat([model(x[b: b + 1], dt[b: b + 1])[0] for b in range(2)])
    torch.testing.assert_close(together, alone, atol=1e-6, rtol=1e-6)
    assert not torch.allclose(model(x, dt)[0], model(x, dt.flip(0))[0])


def test_bad_input_raises_clear_errors():
    model = CfC(IN, HIDDEN, backbone_units=8)
    x = torch.randn(2, TIME, IN)
    with pytest.raises(ValueError, match="dt"):
        model(x, torch.zeros(2, TIME))
    with pytest.raises(ValueError, match="dt"):
        model(x, -torch.rand(2, TIME))
    with pytest.raises(ValueError, match=r"x: expected shape \(batch, time, 4\)"):
        model(torch.randn(2, TIME, IN + 3))
    with pytest.raises(ValueError, match="mode"):
        CfC(IN, HIDDEN, mode="closed")
    with pytest.raises(ValueError, match="h0"):
        model(x, h0=torch.zeros(2, HIDDEN + 1))
    with pytest.raises(ValueError, match="dt"):
        model.cell(x[:, 0], torch.zeros(2, HIDDEN), -1.0)
    with pytest.raises(ValueError, match="mixed_memory"):
        CfC.from_ncps(ncps.torch.CfC(IN, HIDDEN, mixed_memory=True))
