"""Streaming evaluation: a MetricAccumulator fed uneven batches equals summarize on the whole set."""

import gc
import weakref

import numpy as np
import pytest
import torch
import xarray as xr

from evaluation import MetricAccumulator, rollout_errors, summarize

CUTS = ((0, 1), (1, 4), (4, 6))  # uneven batches of 1, 3 and 2 samples


def _pair(shape, dims, seed=0):
    """Random float64 Datasets ``pred``, ``true`` with two variables (channels)."""
    rng = np.random.default_rng(seed)
    true = {v: rng.normal(size=shape) + 1.0 for v in ("h", "u")}
    pred = {v: a + 0.3 * rng.normal(size=shape) for v, a in true.items()}
    return tuple(xr.Dataset({v: (dims, a) for v, a in d.items()}) for d in (pred, true))


def _streamed(pred, true, *, window=0, cuts=CUTS):
    acc = MetricAccumulator(window=window)
    for a, b in cuts:
        acc.update(pred.isel(sample=slice(a, b)), true.isel(sample=slice(a, b)))
    return acc


def _assert_same_table(got, expected):
    assert list(got) == list(expected)  # same keys, same order
    for key in expected:
        assert got[key] == pytest.approx(expected[key], rel=1e-12, abs=1e-300, nan_ok=True), key


@pytest.mark.parametrize("window", [0, 2])
def test_time_dependent_fields_match_summarize(window):
    pred, true = _pair((6, 5, 20, 26), ("sample", "time", "x", "y"))
    acc = _streamed(pred, true, window=window)
    assert acc.n_samples == 6
    expected = summarize(pred, true, window=window)
    assert "fRMSE_mid" in expected and "rel_l1_median" in expected
    _assert_same_table(acc.result(), expected)


@pytest.mark.parametrize("dims,shape", [
    (("sample", "x", "y"), (6, 24, 28)),        # steady (Darcy-like)
    (("sample", "time", "x"), (6, 4, 40)),      # 1D with time
    (("sample", "time"), (6, 30)),              # sequences: pointwise metrics only
])
def test_other_kinds_match_summarize(dims, shape):
    pred, true = _pair(shape, dims, seed=1)
    expected = summarize(pred, true)
    _assert_same_table(_streamed(pred, true).result(), expected)
    if "x" not in dims:
        assert "RMSE" not in expected and "rel_l2_spectral" not in expected


def test_one_batch_per_sample_and_one_batch_in_all():
    pred, true = _pair((6, 3, 16, 16), ("sample", "time", "x", "y"), seed=2)
    expected = summarize(pred, true, window=1)
    singles = [(i, i + 1) for i in range(6)]
    _assert_same_table(_streamed(pred, true, window=1, cuts=singles).result(), expected)
    _assert_same_table(_streamed(pred, true, window=1, cuts=[(0, 6)]).result(), expected)


@pytest.mark.parametrize("dims,shape", [(("sample", "time", "x", "y"), (6, 5, 12, 14)), (("sample", "time"), (6, 9))])
def test_per_step_matches_rollout_errors(dims, shape):
    pred, true = _pair(shape, dims, seed=3)
    per_step, mean = _streamed(pred, true, window=2).per_step()
    expected, expected_mean = rollout_errors(pred.isel(time=slice(2, None)), true.isel(time=slice(2, None)))
    assert per_step.shape == (shape[1] - 2,)
    np.testing.assert_allclose(per_step, expected, rtol=1e-12)
    assert mean == pytest.approx(expected_mean, rel=1e-12)


def test_update_keeps_no_batch():
    """The batches' buffers are freed after update; the state is O(samples · time) plus a spectrum: per-sample
    values, per-(t, c) sums, and per (sample, step) the long-rollout values (VRMSE, Pearson r, and five of each
    variable's moments: :func:`evaluation.long_rollout.step_scores`)."""
    n_samples, n_time, n = 6, 4, 64
    rng = np.random.default_rng(4)
    acc = MetricAccumulator(window=1)
    refs = []
    for a, b in CUTS:
        arrays = [rng.normal(size=(b - a, n_time, n, n)) + 1.0 for _ in range(2)]
        refs += [weakref.ref(x) for x in arrays]
        pred, true = (xr.Dataset({"u": (("sample", "time", "x", "y"), x)}) for x in arrays)
        acc.update(pred, true)
        del arrays, pred, true
    gc.collect()
    assert all(r() is None for r in refs)
    state = _nbytes(acc)
    bound = 8 * (n_samples * (10 + n_time) + n_time * (10 + n // 2) + n_samples * n_time * (2 + 5 * 1))
    assert 0 < state <= bound < 8 * n_samples * n_time * n * n / 100


def _nbytes(obj, seen=None) -> int:
    """Bytes of every numpy array and torch tensor reachable from ``obj``'s attributes."""
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return 0
    seen.add(id(obj))
    if isinstance(obj, (np.ndarray, torch.Tensor)):
        return obj.nbytes
    if isinstance(obj, dict):
        return sum(_nbytes(v, seen) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(_nbytes(v, seen) for v in obj)
    return sum(_nbytes(v, seen) for v in getattr(obj, "__dict__", {}).values())


def test_bad_input():
    pred, true = _pair((4, 3, 8, 8), ("sample", "time", "x", "y"))
    acc = MetricAccumulator()
    with pytest.raises(ValueError, match="at least one update"):
        acc.result()
    acc.update(pred.isel(sample=slice(0, 2)), true.isel(sample=slice(0, 2)))
    with pytest.raises(ValueError, match=r"expected batches .* like the first, found .*'x': 4"):
        acc.update(pred.isel(sample=slice(2, 4), x=slice(0, 4)), true.isel(sample=slice(2, 4), x=slice(0, 4)))
    assert acc.n_samples == 2 and acc.result() == pytest.approx(
        summarize(pred.isel(sample=slice(0, 2)), true.isel(sample=slice(0, 2))), nan_ok=True)
    with pytest.raises(ValueError, match=r"window: expected an integer in \[0, 3\)"):
        MetricAccumulator(window=3).update(pred, true)
    steady = MetricAccumulator()
    steady.update(pred.isel(time=0), true.isel(time=0))
    with pytest.raises(ValueError, match="per_step: expected data with a 'time' dim"):
        steady.per_step()
