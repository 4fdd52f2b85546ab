"""Gaussian random fields: FNO statistics, per-sample seeding, bad input."""

import math

import pytest
import torch

import pde_data
from pde_data.solvers.grf import grf_sqrt_eig


def test_spectrum_matches_the_fno_amplitude():
    """E|fft2(w)(k)|² = sqrt_eig(k)² with sqrt_eig = n²·√2·σ·(4π²|k|² + τ²)^(−α/2), σ = τ^(α−1)."""
    n, m = 16, 600
    w = pde_data.gaussian_random_field_2d(m, n, seed=0)
    power = torch.fft.fft2(w).abs().square().mean(dim=0)
    eig = grf_sqrt_eig(n)
    ratio = power[eig > 0] / eig[eig > 0] ** 2
    # each mode: mean of 600 chi-square draws; the average over 255 modes is tight
    assert abs(float(ratio.mean()) - 1.0) < 0.02
    assert float((ratio - 1).abs().max()) < 0.35
    assert float(power[0, 0]) < 1e-20  # zero mean mode
    k1 = n**2 * math.sqrt(2) * 7**1.5 * (4 * math.pi**2 + 49) ** -1.25
    assert float(eig[1, 0]) == pytest.approx(k1, rel=1e-14)


def test_pointwise_variance_and_zero_mean():
    n = 32
    w = pde_data.gaussian_random_field_2d(200, n, seed=1)
    expected = float(grf_sqrt_eig(n).square().sum()) / n**4
    assert float(w.var()) == pytest.approx(expected, rel=0.05)
    assert float(w.mean(dim=(-2, -1)).abs().max()) < 1e-12


def test_sample_i_is_the_same_in_any_batch():
    full = pde_data.gaussian_random_field_2d(6, 16, seed=3)
    part = pde_data.gaussian_random_field_2d(2, 16, seed=3, first_sample=4)
    assert torch.equal(full[4:], part)
    assert not torch.equal(full, pde_data.gaussian_random_field_2d(6, 16, seed=4))
    assert pde_data.gaussian_random_field_2d(1, 16, dtype=torch.float32).dtype == torch.float32


def test_bad_input():
    with pytest.raises(ValueError, match="n_samples"):
        pde_data.gaussian_random_field_2d(0, 16)
    with pytest.raises(ValueError, match="alpha"):
        pde_data.gaussian_random_field_2d(1, 16, alpha=0.5)
