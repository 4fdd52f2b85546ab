"""The registry's sequence models: build and rebuild, shapes per readout, padding invariance, a padded batch
equals each sample alone, finite gradients, and Adam fits a toy regression."""

import pytest
import torch

import operators
from operators.models import MODELS
from operators.training import ModelSpec, RunSpec

IN, OUT, T = 3, 2, 7
LENGTHS = (T, 5, 2, 1)
READOUTS = ("last", "mean", "steps")

#: case id -> (registry name, tiny config); every registered sequence model appears at least once
CASES = {
    "ltc": ("ltc", dict(units=5, ode_unfolds=2)),
    "cfc": ("cfc", dict(units=6, backbone_units=8)),
    **{f"pdna-{v}": ("pdna", dict(units=6, backbone_units=8, variant=v)) for v in "ABCDE"},
    "pdna-feedback": ("pdna", dict(units=6, backbone_units=8, feedback=True)),
    "nac": ("nac", dict(d_model=8, num_heads=2)),
    "nac-topk-euler": ("nac", dict(d_model=8, num_heads=2, topk=2, mode="euler")),
    "ckb_seq": ("ckb_seq", dict(d_model=8, d_state=4, order=2, n_layers=2)),
    "gru": ("gru", dict(units=6, n_layers=2)),
    "attention": ("attention", dict(d_model=8, num_heads=2)),
}


def _build(case: str, **extra) -> torch.nn.Module:
    name, config = CASES[case]
    torch.manual_seed(0)
    return operators.build(name, IN, OUT, **config, **extra).eval()


def _batch(seed: int = 0):
    """x ``(4, T, IN)``, dt ``(4, T)`` (padded steps 1), mask ``(4, T)`` of :data:`LENGTHS`."""
    g = torch.Generator().manual_seed(seed)
    mask = torch.arange(T) < torch.tensor(LENGTHS)[:, None]
    x = torch.randn(len(LENGTHS), T, IN, generator=g).masked_fill(~mask[..., None], 0.0)
    dt = (torch.rand(len(LENGTHS), T, generator=g) + 0.1).masked_fill(~mask, 1.0)
    return x, dt, mask


def test_cases_cover_every_sequence_model():
    sequence = {name for name, entry in MODELS.items() if entry.domain == "sequences"}
    assert sequence == {"ltc", "cfc", "pdna", "nac", "ckb_seq", "gru", "attention"}
    assert {name for name, _ in CASES.values()} == sequence
    assert all(MODELS[name].config().readout == "last" for name in sequence)


@pytest.mark.parametrize("case", sorted(CASES))
def test_rebuild_from_spec_gives_the_same_model(case):
    name, config = CASES[case]
    model = _build(case)
    torch.manual_seed(0)
    stored = RunSpec(model=ModelSpec(name, config, in_channels=IN, out_channels=OUT)).to_dict()  # as a run stores it
    again = RunSpec.from_dict(stored).model.build().eval()
    x, dt, mask = _batch()
    with torch.no_grad():
        torch.testing.assert_close(again(x, dt, mask), model(x, dt, mask))


@pytest.mark.parametrize("readout", READOUTS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_shapes_and_padding_invariance(case, readout):
    """Outputs do not depend on x or dt at padded steps (padded step outputs are 0 for ``"steps"``)."""
    model = _build(case, readout=readout)
    x, dt, mask = _batch()
    g = torch.Generator().manual_seed(1)
    x2 = torch.where(mask[..., None], x, 10 * torch.randn(x.shape, generator=g))
    dt2 = torch.where(mask, dt, 5 * torch.rand(dt.shape, generator=g) + 1e-3)
    with torch.no_grad():
        y, y2 = model(x, dt, mask), model(x2, dt2, mask)
    assert y.shape == ((len(LENGTHS), T, OUT) if readout == "steps" else (len(LENGTHS), OUT))
    assert torch.isfinite(y).all()
    torch.testing.assert_close(y2, y, atol=1e-5, rtol=1e-5)
    if readout == "steps":
        assert (y[~mask] == 0).all()


@pytest.mark.parametrize("readout", READOUTS)
@pytest.mark.parametrize("case", sorted(set(CASES) - {"pdna-B"}))  # B draws noise per batch element
def test_padded_batch_equals_each_sample_alone(case, readout):
    model = _build(case, readout=readout)
    x, dt, mask = _batch()
    with torch.no_grad():
        y = model(x, dt, mask)
        for i, n in enumerate(LENGTHS):
            alone = model(x[i:i + 1, :n], dt[i:i + 1, :n])[0]
            torch.testing.assert_close(y[i, :n] if readout == "steps" else y[i], alone, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("case", sorted(CASES))
def test_gradients_reach_every_parameter_and_are_finite(case):
    model = _build(case, readout="mean").train()
    x, dt, mask = _batch()
    model(x, dt, mask).square().mean().backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
    assert model.encoder.weight.grad.abs().sum() > 0


@pytest.mark.parametrize("case", sorted(CASES))
def test_adam_reduces_a_toy_regression_loss(case):
    """Target: the mean of each sample's valid inputs (one value per input channel, OUT = IN here)."""
    name, config = CASES[case]
    torch.manual_seed(0)
    model = operators.build(name, IN, IN, **config, readout="mean")
    x, dt, mask = _batch()
    target = (x * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(15):
        loss = (model(x, dt, mask) - target).square().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.7 * losses[0]


@pytest.mark.parametrize("case", ["gru", "attention"])
def test_baselines_see_the_step_sizes_as_a_feature(case):
    model = _build(case)
    x, dt, _ = _batch()
    with torch.no_grad():
        assert not torch.allclose(model(x, dt), model(x, 3 * dt))
        torch.testing.assert_close(model(x), model(x, torch.ones_like(dt)))


def test_bad_masks_and_configs_raise_clear_errors():
    model = _build("cfc")
    x, dt, mask = _batch()
    with pytest.raises(ValueError, match="mask: expected a bool tensor"):
        model(x, dt, mask.float())
    with pytest.raises(ValueError, match=r"mask: expected valid steps as a non-empty prefix.*\[1\]"):
        model(x, dt, mask.clone().index_put_((torch.tensor([1]), torch.tensor([0])), torch.tensor(False)))
    with pytest.raises(ValueError, match="readout"):
        operators.build("cfc", IN, OUT, readout="max")
    with pytest.raises(ValueError, match="model.config.units: expected int, found 2.5"):
        operators.build("gru", IN, OUT, units=2.5)
    with pytest.raises(ValueError, match="model.config.width: expected a field of NACSequenceConfig"):
        operators.build("nac", IN, OUT, width=8)


@pytest.mark.parametrize("case", sorted(CASES))
def test_bfloat16_autocast_runs_and_stays_close(case):
    """``--amp``: every core runs under autocast (LTC's fused scan and the Kirchhoff scan in float32)."""
    model = _build(case)
    x, dt, mask = _batch()
    with torch.no_grad():
        full = model(x, dt, mask)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        mixed = model(x, dt, mask)
    mixed.float().square().mean().backward()
    torch.testing.assert_close(mixed.float(), full, atol=0.1, rtol=0.1)
