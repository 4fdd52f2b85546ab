"""SequenceModel: encoder -> core -> readout -> head over every cell, with step sizes or timestamps."""

import pytest
import torch
from ncps.wirings import AutoNCP

import circuitop
from circuitop import LTC, PDNA, CfC, SequenceModel, steps_from_timestamps

IN, OUT = 5, 3


def _cores():
    cores = {
        "ltc": lambda: LTC(8, AutoNCP(12, 4, seed=1)),
        "cfc": lambda: CfC(8, 6, backbone_units=8),
        "pdna": lambda: PDNA(8, 6, variant="E", backbone_units=8),
    }
    if hasattr(circuitop, "CascadedKirchhoffBlock"):
        cores["ckb"] = lambda: circuitop.CascadedKirchhoffBlock(8, order=2, d_state=4)
    if hasattr(circuitop, "NeuronalAttentionCircuit"):
        cores["nac"] = lambda: circuitop.NeuronalAttentionCircuit(8, 2, topk=4)
    return cores


@pytest.mark.parametrize("name", sorted(_cores()))
@pytest.mark.parametrize("readout", ["last", "mean"])
def test_shapes_time_inputs_and_gradients(name, readout):
    torch.manual_seed(0)
    model = SequenceModel(_cores()[name](), IN, OUT, readout=readout)
    x = torch.randn(2, 6, IN)
    dt = torch.rand(2, 6) + 0.1
    y = model(x, dt)
    assert y.shape == (2, OUT)
    torch.testing.assert_close(model(x, timestamps=dt.cumsum(1) + 3.0), model(x, steps_from_timestamps(dt.cumsum(1))),
                               atol=1e-5, rtol=1e-5)
    y.square().sum().backward()
    assert model.encoder.weight.grad.abs().sum() > 0


def test_step_sizes_change_the_prediction_of_continuous_time_cores():
    torch.manual_seed(1)
    model = SequenceModel(CfC(8, 6, backbone_units=8), IN, OUT)
    x = torch.randn(2, 6, IN)
    assert not torch.allclose(model(x), model(x, 5 * torch.ones(2, 6)))
    torch.testing.assert_close(model(x), model(x, torch.ones(2, 6)))


def test_steps_from_timestamps():
    t = torch.tensor([[0.0, 0.5, 2.0], [1.0, 2.0, 4.0]])
    torch.testing.assert_close(steps_from_timestamps(t), torch.tensor([[0.5, 0.5, 1.5], [1.0, 1.0, 2.0]]))


def test_bad_input_raises_clear_errors():
    model = SequenceModel(CfC(8, 6, backbone_units=8), IN, OUT)
    with pytest.raises(ValueError, match=r"x: expected shape \(batch, time, 5\)"):
        model(torch.randn(2, 6, IN + 1))
    with pytest.raises(ValueError, match="dt"):
        model(torch.randn(2, 6, IN), torch.zeros(2, 6))
    with pytest.raises(ValueError, match="dt"):  # timestamps not increasing
        model(torch.randn(2, 6, IN), timestamps=torch.zeros(2, 6))
    with pytest.raises(ValueError, match="readout"):
        SequenceModel(CfC(8, 6), IN, OUT, readout="max")
    with pytest.raises(ValueError, match="core"):
        SequenceModel(torch.nn.GRU(8, 6), IN, OUT)
