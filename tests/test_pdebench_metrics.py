"""PDEBench suite and the band/boundary errors: a loop reference twin, analytic cases, batching."""

import math

import numpy as np
import pytest
import torch
import xarray as xr

import pde_data
from evaluation import PDEBENCH_KEYS, PDEBenchAccumulator, boundary_rmse, frequency_band_errors, pdebench_metrics


def _pdebench_ref(pred, true, window=0, bands=(4, 12)):
    """The spec (docs/specs/metrics.md) written literally with loops: (sample, time, channel, *spatial), 1D or 2D."""
    rows = []
    for c in range(pred.shape[2]):
        for t in range(window, pred.shape[1]):
            e, y = pred[:, t, c] - true[:, t, c], true[:, t, c]
            n = e[0].size
            rmse = [math.sqrt(np.mean(eb**2)) for eb in e]
            nrmse = [math.sqrt(np.mean(eb**2)) / math.sqrt(np.mean(yb**2)) for eb, yb in zip(e, y)]
            csv = math.sqrt(np.mean([np.sum(eb) ** 2 for eb in e])) / n
            if e.ndim == 2:
                edge = [np.array([eb[0], eb[-1]]) for eb in e]
                power = np.abs(np.fft.rfft(e, axis=1)) ** 2
                spec = np.sqrt(power.mean(axis=0)) / e.shape[1]
            else:
                edge = [np.concatenate([eb[0, :], eb[-1, :], eb[:, 0], eb[:, -1]]) for eb in e]
                nx, ny = e.shape[1:]
                power = np.abs(np.fft.fft2(e)) ** 2
                acc = np.zeros((e.shape[0], min(nx // 2, ny // 2)))
                for i in range(nx // 2):
                    for j in range(ny // 2):
                        r = math.floor(math.sqrt(i * i + j * j))
                        if r < min(nx, ny) / 2:
                            acc[:, r] += power[:, i, j]
                spec = np.sqrt(acc.mean(axis=0)) / (nx * ny)
            brmse = [math.sqrt(np.mean(b**2)) for b in edge]
            f = [spec[: bands[0]].mean(), spec[bands[0]: bands[1]].mean(), spec[bands[1]:].mean()]
            rows.append([np.mean(rmse), np.mean(nrmse), csv, np.abs(e).max(), np.mean(brmse), *f])
    return dict(zip(PDEBENCH_KEYS, np.mean(rows, axis=0)))


def _data(shape, seed=0):
    rng = np.random.default_rng(seed)
    true = rng.normal(size=shape) + 1.0
    return true + 0.3 * rng.normal(size=shape), true


@pytest.mark.parametrize("shape,window", [((5, 4, 2, 30), 1), ((4, 3, 2, 26, 28), 2), ((3, 2, 1, 64), 0)])
def test_matches_loop_reference(shape, window):
    pred, true = _data(shape)
    got = pdebench_metrics(pred, true, window=window)
    ref = _pdebench_ref(pred, true, window)
    assert list(got) == list(PDEBENCH_KEYS)
    for key in PDEBENCH_KEYS:
        assert got[key] == pytest.approx(ref[key], rel=1e-10), key


def test_single_fourier_mode_error():
    """e = a·cos(2π·5x): RMSE a/√2, Max a, CSV 0; all spectral error in radius 5 (mid band): a/2 / 8."""
    a, n = 0.4, 32
    x = np.arange(n) / n
    err = a * np.cos(2 * np.pi * 5 * x)[:, None] * np.ones((1, n))
    true = np.ones((2, 1, 1, n, n))
    pred = true + err[None, None, None]
    got = pdebench_metrics(pred, true)
    assert got["RMSE"] == pytest.approx(a / math.sqrt(2))
    assert got["Max"] == pytest.approx(a)
    assert got["CSV"] == pytest.approx(0.0, abs=1e-15)
    assert got["fRMSE_mid"] == pytest.approx(a / 2 / 8)
    assert got["fRMSE_low"] == pytest.approx(0.0, abs=1e-15)
    assert got["fRMSE_high"] == pytest.approx(0.0, abs=1e-15)


def test_known_boundary_values():
    nx, ny = 6, 9
    err = np.zeros((1, 1, 1, nx, ny))
    err[0, 0, 0, 0, :] = 1.0  # the x = 0 edge; its two corners also lie on the y edges
    got = pdebench_metrics(err + 2.0, np.full_like(err, 2.0))
    assert got["bRMSE"] == pytest.approx(math.sqrt((ny + 2) / (2 * nx + 2 * ny)))
    assert boundary_rmse(err[:, 0, 0], np.zeros((1, nx, ny))) == pytest.approx(got["bRMSE"])
    end_points = np.zeros((1, 7))
    end_points[0, 0], end_points[0, -1] = 3.0, 4.0
    assert boundary_rmse(end_points, np.zeros((1, 7))) == pytest.approx(math.sqrt((9 + 16) / 2))


def test_input_frames_are_excluded():
    pred, true = _data((3, 5, 1, 32))
    pred[:, 2:] = true[:, 2:]
    assert all(v == 0 for v in pdebench_metrics(pred, true, window=2).values())
    assert pdebench_metrics(pred, true, window=0)["RMSE"] > 0


def test_independent_of_batching():
    """Whole set == concatenated batches; per-sample means combine as size-weighted batch means."""
    pred, true = _data((10, 2, 1, 32))
    whole = pdebench_metrics(pred, true, window=1)
    order = np.random.default_rng(1).permutation(10)
    assert pdebench_metrics(pred[order], true[order], window=1) == pytest.approx(whole, rel=1e-12)
    cuts = [(0, 3), (3, 10)]  # unequal batches: a mean of batch means would differ
    parts = [pdebench_metrics(pred[a:b], true[a:b], window=1) for a, b in cuts]
    sizes = np.array([b - a for a, b in cuts])
    for key in ("RMSE", "nRMSE", "bRMSE"):  # means over samples: size-weighted means of batches
        assert whole[key] == pytest.approx(np.dot(sizes, [p[key] for p in parts]) / 10, rel=1e-12)
        assert whole[key] != pytest.approx(np.mean([p[key] for p in parts]), rel=1e-6)
    assert whole["Max"] == pytest.approx(max(p["Max"] for p in parts))  # one (c, t): a max of maxima
    csv_sq = np.dot(sizes, [p["CSV"] ** 2 for p in parts]) / 10        # one (c, t): RMS over samples
    assert whole["CSV"] == pytest.approx(math.sqrt(csv_sq), rel=1e-12)
    acc = PDEBenchAccumulator(window=1)
    for a, b in cuts:  # streamed: the sums over samples carried from batch to batch
        acc.update(pred[a:b], true[a:b])
    assert acc.n_samples == 10 and acc.result() == pytest.approx(whole, rel=1e-12)


def test_numpy_torch_xarray_agree():
    pred, true = _data((3, 4, 2, 12, 10))
    expected = pdebench_metrics(pred, true, window=1)
    got = pdebench_metrics(torch.tensor(pred), torch.tensor(true), window=1)
    assert math.isnan(expected["fRMSE_high"])  # a 12 x 10 grid has radii 0..4 only
    assert got == pytest.approx(expected, rel=1e-12, nan_ok=True)
    dims = ("sample", "time", "x", "y")
    ds = [xr.Dataset({"h": (dims, a[:, :, 0]), "u": (dims, a[:, :, 1])}) for a in (pred, true)]
    assert pdebench_metrics(*ds, window=1) == pytest.approx(expected, rel=1e-12, nan_ok=True)
    channel_first = [pde_data.to_tensor(d, dtype=torch.float64) for d in ds]  # the data model's layout
    assert pdebench_metrics(*channel_first, window=1) == pytest.approx(expected, rel=1e-12, nan_ok=True)
    steady = [d.isel(time=3) for d in ds]  # Darcy-like: no time dim, one frame scored
    assert pdebench_metrics(*steady) == pytest.approx(
        pdebench_metrics(pred[:, 3:], true[:, 3:]), rel=1e-12, nan_ok=True)


def test_domain_lengths_scale_the_spectral_terms():
    pred, true = _data((2, 1, 1, 28, 26))
    base = pdebench_metrics(pred, true)
    scaled = pdebench_metrics(pred, true, lengths=(2.0, 3.0))
    for band in ("fRMSE_low", "fRMSE_mid", "fRMSE_high"):
        assert scaled[band] == pytest.approx(6 * base[band])
    assert scaled["RMSE"] == base["RMSE"]


def test_frequency_band_errors_per_sample_match_suite():
    pred, true = _data((3, 26, 28))
    per_sample = frequency_band_errors(pred, true, reduce="none")
    for b in range(3):
        one = pdebench_metrics(pred[b:b + 1, None, None], true[b:b + 1, None, None])
        for name in ("low", "mid", "high"):
            assert per_sample[name][b] == pytest.approx(one[f"fRMSE_{name}"], rel=1e-12)
    assert frequency_band_errors(pred, true)["mid"] == pytest.approx(per_sample["mid"].mean())
    coarse = frequency_band_errors(pred[:, :8, :8], true[:, :8, :8])  # radii 0..3 only
    assert math.isnan(coarse["mid"]) and math.isnan(coarse["high"]) and coarse["low"] > 0
    t = frequency_band_errors(torch.tensor(pred), torch.tensor(true))
    assert float(t["high"]) == pytest.approx(frequency_band_errors(pred, true)["high"], rel=1e-12)


def test_bad_input():
    pred, true = _data((2, 3, 1, 8))
    with pytest.raises(ValueError, match=r"window: expected an integer in \[0, 3\).*found 3"):
        pdebench_metrics(pred, true, window=3)
    with pytest.raises(ValueError, match=r"pred: expected \(sample, time, channel, \*spatial\).*\(2, 8\)"):
        pdebench_metrics(np.ones((2, 8)), np.ones((2, 8)))
    with pytest.raises(ValueError, match=r"lengths: expected 1 domain lengths.*\(1.0, 2.0\)"):
        pdebench_metrics(pred, true, lengths=(1.0, 2.0))
    with pytest.raises(ValueError, match="bands: expected two integer edges"):
        frequency_band_errors(pred[:, 0, 0], true[:, 0, 0], bands=(12, 4))
    with pytest.raises(ValueError, match=r"pred shape \(2, 3, 1, 8\) and true shape \(2, 3, 1, 9\)"):
        pdebench_metrics(pred, np.ones((2, 3, 1, 9)))
    a = xr.Dataset({"u": (("sample", "time", "x"), pred[:, :, 0])})
    b = xr.Dataset({"v": (("sample", "time", "x"), true[:, :, 0])})
    with pytest.raises(ValueError, match=r"same data variables, found \['u'\] and \['v'\]"):
        pdebench_metrics(a, b)


def test_band_and_boundary_errors_average_time_and_channels_of_xarray_fields():
    pred, true = _data((2, 3, 2, 26, 28))
    dims = ("sample", "time", "x", "y")
    ds = [xr.Dataset({"h": (dims, a[:, :, 0]), "u": (dims, a[:, :, 1])}) for a in (pred, true)]
    frames = [(t, c) for t in range(3) for c in range(2)]
    brmse = np.mean([boundary_rmse(pred[:, t, c], true[:, t, c], reduce="none") for t, c in frames], axis=0)
    np.testing.assert_allclose(boundary_rmse(*ds, reduce="none"), brmse, rtol=1e-12)
    high = np.mean([frequency_band_errors(pred[:, t, c], true[:, t, c], reduce="none")["high"]
                    for t, c in frames], axis=0)
    np.testing.assert_allclose(frequency_band_errors(*ds, reduce="none")["high"], high, rtol=1e-12)
