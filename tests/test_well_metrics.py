"""The Well's metrics (evaluation.well) against explicit formulas on random data, against values
computed by hand on a 2×2 example, and in the three input types."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import xarray as xr

import evaluation
from evaluation.well import EPS, spectral_bin_edges

RNG = np.random.default_rng(0)
X = RNG.normal(size=(3, 2, 8, 6))  # sample, channel, x, y
Y = RNG.normal(size=(3, 2, 8, 6)) + 0.5


def _explicit(x, y):
    """Per (sample, channel), written out with numpy over the last two axes."""
    out = {k: np.zeros(x.shape[:2]) for k in ("nmse", "nrmse", "vmse", "vrmse", "linf", "pearson")}
    for i in range(x.shape[0]):
        for c in range(x.shape[1]):
            a, b = x[i, c].ravel(), y[i, c].ravel()
            mse = np.mean((a - b) ** 2)
            out["nmse"][i, c] = mse / (np.mean(b**2) + EPS)
            out["nrmse"][i, c] = math.sqrt(out["nmse"][i, c])
            out["vmse"][i, c] = mse / (np.var(b, ddof=1) + EPS)
            out["vrmse"][i, c] = math.sqrt(out["vmse"][i, c])
            out["linf"][i, c] = np.max(np.abs(a - b))
            cov = np.mean((a - a.mean()) * (b - b.mean()))
            out["pearson"][i, c] = cov / (np.std(a, ddof=1) * np.std(b, ddof=1) + EPS)
    return out


@pytest.mark.parametrize("name,key", [("nmse_well", "nmse"), ("nrmse_well", "nrmse"), ("vmse", "vmse"),
                                      ("vrmse", "vrmse"), ("linf", "linf"), ("pearson", "pearson")])
def test_spatial_metrics_match_explicit_formulas(name, key):
    fn = getattr(evaluation, name)
    expected = _explicit(X, Y)[key]
    np.testing.assert_allclose(fn(X, Y, reduce="none"), expected, rtol=1e-12)
    assert fn(X, Y) == pytest.approx(expected.mean(), rel=1e-12)
    assert fn(X, Y, reduce="median") == pytest.approx(np.median(expected), rel=1e-12)
    got = fn(torch.from_numpy(X), torch.from_numpy(Y), reduce="none")
    assert isinstance(got, torch.Tensor) and got.shape == (3, 2)


def test_hand_computed_two_by_two():
    """x = [[1, 2], [3, 4]], y = [[1, 0], [3, 2]]: error (0, 2, 0, 2)."""
    x = np.array([[[[1.0, 2.0], [3.0, 4.0]]]])
    y = np.array([[[[1.0, 0.0], [3.0, 2.0]]]])
    mse = 2.0  # (0 + 4 + 0 + 4) / 4
    assert evaluation.nmse_well(x, y) == pytest.approx(mse / (14 / 4 + EPS))  # mean y² = (1 + 0 + 9 + 4) / 4
    assert evaluation.vmse(x, y) == pytest.approx(mse / (5 / 3 + EPS))  # y mean 1.5, Σ(y − ȳ)² = 5, unbiased
    assert evaluation.vrmse(x, y) == pytest.approx(math.sqrt(mse / (5 / 3 + EPS)))
    assert evaluation.linf(x, y) == 2.0
    # x − x̄ = (−1.5, −0.5, 0.5, 1.5), y − ȳ = (−0.5, −1.5, 1.5, 0.5): biased covariance 3 / 4; stds √(5/3)
    assert evaluation.pearson(x, y) == pytest.approx(0.75 / (5 / 3 + EPS))
    # the error's spectrum: F(0, 0) = 4, F(0, 1) = −4, F(1, ·) = 0. |k| is 0, π, π, π√2 for modes (0, 0),
    # (0, 1), (1, 0), (1, 1); the edges are log-spaced from 2π/2 to π√2 + 1e-6, so bin 0 = [0, ≈ π 2^(1/6))
    # holds the first three modes and bin 2 the last
    edges = spectral_bin_edges((2, 2)).numpy()
    top = math.pi * math.sqrt(2) + 1e-6
    np.testing.assert_allclose(edges, [0, math.pi * (top / math.pi) ** (1 / 3), math.pi * (top / math.pi) ** (2 / 3), top],
                               rtol=1e-12)
    per_bin = evaluation.binned_spectral_mse(x, y, reduce="none")[0, 0]
    np.testing.assert_allclose(per_bin, [(16 + 16) / 16 * 3 / (3 + EPS), 0.0, 0.0], rtol=1e-12)


def test_binned_spectral_mse_bins_add_up_to_the_mse_of_their_modes():
    """Parseval: with every mode inside the three kept bins (1D grid: |k| <= π < π + 1e-6), the bins sum
    to the spatial MSE; the normalized form divides each bin by the truth's energy there."""
    x, y = RNG.normal(size=(4, 3, 32)), RNG.normal(size=(4, 3, 32))
    per_bin = evaluation.binned_spectral_mse(x, y, reduce="none")
    assert per_bin.shape == (4, 3, 3)
    np.testing.assert_allclose(per_bin.sum(-1), np.mean((x - y) ** 2, axis=-1), rtol=1e-6)
    energy = evaluation.binned_spectral_mse(np.zeros_like(y), y, reduce="none")
    normalized = evaluation.binned_spectral_mse(x, y, normalized=True, reduce="none")
    np.testing.assert_allclose(normalized, per_bin / (energy + EPS), rtol=1e-12)
    assert evaluation.binned_spectral_mse(x, y).shape == (3,)


def test_bin_edges_are_the_wells():
    """The Well: logspace(log10(2π / max N), log10(π√d + 1e-6), 4), the first edge set to 0."""
    edges = spectral_bin_edges((128, 64)).numpy()
    expected = np.logspace(np.log10(2 * np.pi / 128), np.log10(np.pi * np.sqrt(2) + 1e-6), 4)
    expected[0] = 0.0
    np.testing.assert_allclose(edges, expected, rtol=1e-12)


def test_xarray_fields_keep_time_and_variables():
    """A data-model Dataset (sample, time, x, y) with two variables: one value per sample, time and variable."""
    dims = ("sample", "time", "x", "y")
    coords = {"sample": np.arange(2), "time": np.arange(3.0), "x": np.linspace(0, 1, 8), "y": np.linspace(0, 1, 6)}
    a = RNG.normal(size=(2, 3, 8, 6, 2))
    b = RNG.normal(size=(2, 3, 8, 6, 2))
    pred = xr.Dataset({"u": (dims, a[..., 0]), "v": (dims, a[..., 1])}, coords=coords)
    true = xr.Dataset({"u": (dims, b[..., 0]), "v": (dims, b[..., 1])}, coords=coords)
    got = evaluation.vrmse(pred, true, reduce="none")
    assert got.shape == (2, 3, 2)
    flat_a = np.moveaxis(a, -1, 2).reshape(6, 2, 8, 6)
    flat_b = np.moveaxis(b, -1, 2).reshape(6, 2, 8, 6)
    np.testing.assert_allclose(got.reshape(6, 2), _explicit(flat_a, flat_b)["vrmse"], rtol=1e-12)


def test_the_evaluation_table_reports_the_wells_metrics():
    """``summarize`` (what ``circuitop evaluate`` prints and writes) has The Well's metrics as The Well's
    "full" values (means over samples, time and variables), and the streamed accumulator agrees."""
    dims = ("sample", "time", "x", "y")
    coords = {"sample": np.arange(4), "time": np.arange(3.0), "x": np.linspace(0, 1, 16), "y": np.linspace(0, 1, 16)}
    true = xr.Dataset({"u": (dims, RNG.normal(size=(4, 3, 16, 16)))}, coords=coords)
    pred = true + 0.1 * xr.Dataset({"u": (dims, RNG.normal(size=(4, 3, 16, 16)))}, coords=coords)
    table = evaluation.summarize(pred, true)
    assert table["VRMSE"] == pytest.approx(evaluation.vrmse(pred, true))
    assert table["PearsonR"] == pytest.approx(evaluation.pearson(pred, true))
    bins = evaluation.binned_spectral_mse(pred, true, normalized=True)
    assert [table[f"spectral_nmse_{b}"] for b in ("low", "mid", "high")] == pytest.approx(list(bins))
    streamed = evaluation.MetricAccumulator()
    for part in (slice(0, 1), slice(1, 4)):
        streamed.update(pred.isel(sample=part), true.isel(sample=part))
    result = streamed.result()
    for key in ("VRMSE", "VMSE", "NRMSE_well", "NMSE_well", "Linf", "PearsonR", "spectral_nmse_mid"):
        assert result[key] == pytest.approx(table[key], rel=1e-12), key
