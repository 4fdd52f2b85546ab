"""Long-rollout scores and bootstrap intervals on cases with known answers: a perfect prediction never decorrelates
and does not drift; a constant one decorrelates at the first step; doubling a field quadruples its energy; each
trajectory's own crossing (not the batch mean's); The Well's windows over the steps a rollout reaches; a percentile
bootstrap equal to its hand computation."""

from __future__ import annotations

import math

import numpy as np
import pytest
import xarray as xr

from evaluation import MetricAccumulator
from evaluation.bootstrap import bootstrap_interval
from evaluation.long_rollout import correlation_times, crossing_steps, rollout_scores, window_means


def _truth(n: int = 5, steps: int = 9) -> xr.Dataset:
    u = np.random.default_rng(0).standard_normal((n, steps, 16, 16))
    return xr.Dataset({"u": (("sample", "time", "x", "y"), u)})


def _scores(pred: xr.Dataset, true: xr.Dataset) -> dict:
    acc = MetricAccumulator(window=1)
    acc.update(pred, true)
    return rollout_scores(acc.step_arrays(), resamples=100)


def test_a_perfect_prediction_never_decorrelates_and_does_not_drift():
    true = _truth()
    scores = _scores(true, true)
    for c in scores["correlation_time"].values():
        assert (c["median"], c["never"], c["steps"]) == (math.inf, 5, 8)
    assert scores["drift"]["u"] == {"mass": [0.0] * 8, "energy": [0.0] * 8}
    assert all(w["value"] == 0.0 for w in scores["windows"]["vrmse"].values())


def test_a_constant_prediction_decorrelates_at_the_first_step_and_a_doubled_one_quadruples_its_energy():
    true = _truth()
    constant = _scores(true * 0 + 0.5, true)
    assert all(c["median"] == c["q75"] == 1.0 and c["never"] == 0 for c in constant["correlation_time"].values())
    doubled = _scores(true * 2, true)
    assert doubled["drift"]["u"]["energy"] == pytest.approx([3.0] * 8)
    assert all(c["never"] == 5 for c in doubled["correlation_time"].values())  # correlation is scale-free


def test_each_trajectory_crosses_on_its_own():
    """Three trajectories cross 0.9 at steps 2, 4 and never; their mean crosses at step 2 (what a batch-mean
    curve would report)."""
    corr = np.array([[1.0, 0.5, 0.5, 0.5, 0.5],
                     [1.0, 1.0, 1.0, 0.2, 0.2],
                     [1.0, 1.0, 1.0, 1.0, 1.0]])
    assert crossing_steps(corr, 0.9).tolist() == [2.0, 4.0, math.inf]
    assert crossing_steps(corr.mean(0, keepdims=True), 0.9).tolist() == [2.0]
    summary = correlation_times(corr, (0.9,))[0.9]
    assert (summary["median"], summary["q25"], summary["never"], summary["steps"]) == (4.0, 2.0, 1, 5)
    assert crossing_steps(np.array([[1.0, np.nan, 1.0]]), 0.9).tolist() == [2.0]  # no correlation counts as below


def test_the_wells_windows_over_the_steps_the_rollout_reaches():
    per_step = np.arange(1.0, 21.0)[None]  # steps 1..20 of one sample
    means = {k: float(v[0]) for k, v in window_means(per_step).items()}
    assert means == {"1": 1.0, "2-5": 3.5, "6-12": 9.0, "13-20": 16.5}
    assert list(window_means(per_step[:, :4])) == ["1", "2-4"]


def test_the_bootstrap_interval_equals_its_hand_computation():
    values = np.random.default_rng(1).random(30)
    draws = np.random.default_rng(7).integers(0, 30, size=(300, 30))
    expected = np.quantile(values[draws].mean(1), [0.025, 0.975])
    assert bootstrap_interval(values, resamples=300, seed=7) == pytest.approx(tuple(expected), rel=1e-12)
    expected = np.quantile(np.median(values[draws], 1), [0.025, 0.975])
    assert bootstrap_interval(values, reduce="median", resamples=300, seed=7) == pytest.approx(tuple(expected))
    assert bootstrap_interval(np.full(8, 0.25)) == (0.25, 0.25)
    low, high = bootstrap_interval([0.0, 1.0], resamples=4000)  # draws' means 0, 0.5, 1 with p 1/4, 1/2, 1/4
    assert (low, high) == (0.0, 1.0)
    with pytest.raises(ValueError, match="reduce: expected 'mean' or 'median', found 'max'"):
        bootstrap_interval(values, reduce="max")
