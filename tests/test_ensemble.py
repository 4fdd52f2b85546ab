"""Ensembles: ``evaluate --run A --run B --run C`` scores the runs together (the mean's metrics, CRPS, spread,
skill and their ratio) beside each member; the CRPS and the ratio against hand computations; members that scored
other samples are refused in one line."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
import xarray as xr

import evaluation
import pde_data
from cli_run import run_cli
from evaluation.ensemble import ensemble_scores, spread_skill_ratio
from operators.training import DataSpec, LoadingSpec, ModelSpec, OptimSpec, RunSpec, train_run
from test_evaluations import TINY, fields


def test_the_crps_spread_and_skill_of_small_ensembles_by_hand():
    crps, spread, skill = ensemble_scores(torch.tensor([[0.0], [2.0]]), torch.tensor([1.0]))
    assert (float(crps), float(spread), float(skill)) == (0.5, 2.0, 0.0)  # 1 - (|0-2| + |2-0|) / (2 * 4)
    crps, _, skill = ensemble_scores(torch.tensor([[1.0], [2.0], [4.0]]), torch.tensor([0.0]))
    assert float(crps) == pytest.approx(7 / 3 - 12 / 18) and float(skill) == pytest.approx((7 / 3) ** 2)
    one = ensemble_scores(torch.tensor([[[3.0, -1.0]]]), torch.tensor([[1.0, 1.0]]))[0]
    assert float(one) == 2.0  # one member: the absolute error
    x, y = torch.randn(5, 4, 3, 3, generator=torch.Generator().manual_seed(0)), torch.randn(4, 3, 3)
    by_pairs = (x - y).abs().mean(0) - (x[:, None] - x[None]).abs().sum((0, 1)) / (2 * 25)
    assert torch.allclose(ensemble_scores(x, y)[0], by_pairs.flatten(1).mean(1).double())
    assert spread_skill_ratio(torch.tensor([2.0]), torch.tensor([2.0]), n_members=3) == pytest.approx(math.sqrt(4 / 3))
    with pytest.raises(ValueError, match=r"members: expected \(M, \*truth.shape\)"):
        ensemble_scores(torch.zeros(3, 2), torch.zeros(4))


def _train(tmp_path, data, seed: int, split=(16, 4, 4)):
    spec = RunSpec(data=DataSpec(str(data), inputs=("a",), targets=("u", "v"), split=split),
                   model=ModelSpec("fno", TINY), optim=OptimSpec(epochs=1, batch_size=8, seed=seed),
                   loading=LoadingSpec(workers=0))
    train_run(spec, tmp_path / f"run{seed}", progress=False)
    return tmp_path / f"run{seed}"


def test_three_runs_scored_as_an_ensemble_beside_each_member(tmp_path):
    data = pde_data.save(fields(), tmp_path / "fields.nc")
    runs = [_train(tmp_path, data, seed) for seed in (1, 2, 3)]
    done = run_cli("evaluate", *[a for r in runs for a in ("--run", r)], "--out", tmp_path / "ens", "--bootstrap", "200")
    assert done.returncode == 0, done.stderr
    result = json.loads((tmp_path / "ens" / "metrics.json").read_text())
    assert result["n_members"] == 3 and [m["run"] for m in result["members"]] == [str(r) for r in runs]
    preds = [xr.open_dataset(tmp_path / "ens" / "members" / f"{k}-{r.name}" / "pred.nc")[["u", "v"]]
             for k, r in enumerate(runs)]
    truth = xr.open_dataset(data)[["u", "v"]].sel(sample=preds[0]["sample"].values)
    mean = sum(preds) / 3
    assert result["ensemble_mean"]["rel_l2"] == pytest.approx(float(evaluation.rel_l2(mean, truth)), rel=1e-5)
    stacked = torch.stack([pde_data.to_tensor(p, ["u", "v"]) for p in preds])
    crps, spread, skill = ensemble_scores(stacked, pde_data.to_tensor(truth, ["u", "v"]))
    assert result["crps"] == pytest.approx(float(crps.mean()), rel=1e-6)
    assert result["spread_skill"] == pytest.approx(spread_skill_ratio(spread, skill, n_members=3), rel=1e-6)
    low, high = result["crps_interval"]
    assert low <= result["crps"] <= high
    assert "CRPS" in done.stdout and "ensemble mean" in done.stdout


def test_members_that_scored_other_samples_are_refused(tmp_path):
    data = pde_data.save(fields(), tmp_path / "fields.nc")
    runs = [_train(tmp_path, data, 1), _train(tmp_path, data, 2, split=(14, 4, 6))]
    done = run_cli("evaluate", "--run", runs[0], "--run", runs[1], "--out", tmp_path / "ens")
    assert done.returncode == 1 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "members that scored the same samples and variables" in done.stderr and not (tmp_path / "ens").exists()
