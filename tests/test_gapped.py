"""Gapped protocol: gap geometry, zeroing at test time, accuracies and degradation (the example runs in
tests/test_examples.py)."""

import pytest
import torch

from evaluation import GAP_LEVELS, apply_gap, gap_mask, gapped_evaluation


def _runs(mask: torch.Tensor) -> list[tuple[int, int]]:
    """(start, size) of each run of True."""
    runs, start = [], None
    for i, v in enumerate(mask.tolist() + [False]):
        if v and start is None:
            start = i
        elif not v and start is not None:
            runs.append((start, i - start))
            start = None
    return runs


@pytest.mark.parametrize("length", [20, 28, 100, 101, 784])
@pytest.mark.parametrize("level", [0.05, 0.15, 0.30])
def test_single_gap_is_contiguous_centred_and_sized(length, level):
    mask = gap_mask(length, level)
    (start, size), = _runs(mask)
    assert size == max(1, round(level * length))
    assert abs((start + size / 2) - length / 2) <= 0.5  # centred (to half a step)


@pytest.mark.parametrize("length", [20, 28, 100, 784])
def test_multi_gap_is_four_gaps_totalling_twenty_percent(length):
    mask = gap_mask(length, "multi")
    runs = _runs(mask)
    assert len(runs) == 4 and mask.sum().item() == round(0.2 * length)
    assert max(s for _, s in runs) - min(s for _, s in runs) <= 1
    for i, (start, size) in enumerate(runs):  # one gap inside each quarter
        assert i * length / 4 <= start and start + size <= (i + 1) * length / 4 + 1e-9


def test_no_gap_and_short_sequences():
    assert not gap_mask(50, 0).any()
    assert gap_mask(8, 0.05).sum() == 1 and gap_mask(8, 0.30).sum() == 2
    assert gap_mask(8, "multi").sum() == 2 and len(_runs(gap_mask(8, "multi"))) == 2
    with pytest.raises(ValueError, match="level"):
        gap_mask(10, 1.5)
    with pytest.raises(ValueError, match="level"):
        gap_mask(10, "many")
    with pytest.raises(ValueError, match="length"):
        gap_mask(0, 0.1)


def test_apply_gap_zeroes_only_the_gap():
    x = torch.rand(3, 20, 4) + 1
    gapped = apply_gap(x, 0.30)
    mask = gap_mask(20, 0.30)
    assert (gapped[:, mask] == 0).all() and torch.equal(gapped[:, ~mask], x[:, ~mask])
    assert torch.equal(x, torch.rand(3, 20, 4) * 0 + x)  # input left untouched


class _CentreReader(torch.nn.Module):
    """Predicts class 1 iff the middle step is non-zero: perfect without gaps, wrong inside a centred gap."""

    def forward(self, x):
        middle = x[:, x.shape[1] // 2].abs().sum(-1) > 0
        return torch.stack([~middle, middle], -1).float()


def test_gapped_evaluation_reports_accuracy_and_degradation():
    model = _CentreReader().train()
    x, y = torch.rand(10, 40, 3) + 0.1, torch.ones(10, dtype=torch.long)
    report = gapped_evaluation(model, x, y, batch_size=4)
    assert set(report) == set(GAP_LEVELS) | {"degradation"}
    assert report["gap_0"] == 1.0 and report["gap_5"] == report["gap_30"] == 0.0
    assert report["multi"] == 1.0  # the multi-gap leaves the centre alone
    assert report["degradation"] == 1.0
    assert model.training  # mode restored
