"""peak_memory_mb measures what a call adds at its peak, without double counting nested operators."""

import pytest
import torch

from evaluation.resources import peak_memory_mb


def test_peak_of_two_live_tensors_is_counted_once():
    n = 2**22  # 16 MiB of float32 each

    def two_live():
        a = torch.ones(n)
        b = torch.ones(n) * 2  # a temporary of the same size is freed again inside the expression
        return float((a + b).sum())

    peak = peak_memory_mb(two_live)
    assert 47.5 <= peak <= 64.5, peak  # a, b and a + b live together (48 MiB); nothing counted twice


def test_nothing_allocated_is_zero():
    assert peak_memory_mb(lambda: None) == pytest.approx(0.0, abs=1e-6)
