"""Sequence runs through the command line: every sequence model trains on a generated irregular-time file
with unequal lengths and beats the training-mean predictor; ``evaluate --run`` writes ``pred.nc`` and the
metrics; ``--resume`` after ``kill -9`` is bit-identical; 2-process ``torchrun`` equals 1 process; per-step
and label targets."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import xarray as xr

import pde_data

from cli_run import run_cli, torchrun_beside_one_process, evaluation_dir
from operators.cli import main
from operators.training import load_checkpoint

ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
COMMON = ["--target", "rul", "--split", "96,32,32", "--batch-size", "16", "--lr", "1e-2", "--scheduler", "none",
          "--threads", "1", "--no-progress", "--workers", "0"]
#: name -> (model config, epochs); small widths, CPU-sized
MODELS = {"ltc": (["units=16", "ode_unfolds=2"], 8), "cfc": (["units=16", "backbone_units=16"], 12),
          "pdna": (["units=16", "backbone_units=16"], 12), "nac": (["d_model=16", "num_heads=2"], 12),
          "ckb_seq": (["d_model=16", "d_state=8"], 12), "gru": (["units=16"], 12),
          "attention": (["d_model=16", "num_heads=2"], 12)}


@pytest.fixture(scope="module")
def degradation(tmp_path_factory):
    """160 degradation trajectories of 6..12 irregular observations, made by ``circuitop generate``."""
    path = tmp_path_factory.mktemp("seq") / "seq.nc"
    done = run_cli("generate", "degradation", "--out", path, "--n", "160", "--min-length", "6", "--max-length", "12")
    assert done.returncode == 0, done.stderr
    return path


def _mean_predictor_rmse(path, run_dir) -> float:
    """RMSE of the training-split mean of RUL on the validation split (what the model must beat)."""
    spec = json.loads((Path(run_dir) / "run.json").read_text())["data"]["splits"]
    rul = xr.open_dataset(path)["rul"].values
    mean = rul[spec["train"]].mean()
    return float(np.sqrt(np.mean((rul[spec["val"]] - mean) ** 2)))


@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_sequence_model_trains_and_beats_the_mean_predictor(degradation, tmp_path, name):
    config, epochs = MODELS[name]
    out = tmp_path / name
    assert main(["train", "--data", str(degradation), "--model", name, "--out", str(out), "--epochs", str(epochs),
                 "--config", *config, *COMMON]) == 0
    history = json.loads((out / "history.json").read_text())
    # the inputs chosen by default: the health indicator and the gaps, never rul_step (a target: it would leak)
    assert json.loads((out / "run.json").read_text())["data"]["inputs"] == ["health", "gap"]
    best, trivial = min(r["val_rmse"] for r in history), _mean_predictor_rmse(degradation, out)
    assert best < 0.8 * trivial, (best, trivial)
    assert "val_phm" in history[-1] and history[-1]["train_loss"] < history[0]["train_loss"]


def test_every_pdna_variant_trains(degradation, tmp_path):
    for variant in "ABCDE":
        assert main(["train", "--data", str(degradation), "--model", "pdna", "--out", str(tmp_path / variant),
                     "--epochs", "2", "--config", "units=8", "backbone_units=8", f"variant={variant!r}", *COMMON]) == 0
        assert json.loads((tmp_path / variant / "run.json").read_text())["model"]["config"]["variant"] == variant


def test_evaluate_writes_predictions_and_metrics(degradation, tmp_path):
    out = tmp_path / "cfc"
    assert main(["train", "--data", str(degradation), "--model", "cfc", "--out", str(out), "--epochs", "2",
                 "--config", "units=8", "backbone_units=8", *COMMON]) == 0
    done = run_cli("evaluate", "--run", out, "--data", degradation)
    assert done.returncode == 0, done.stderr
    metrics = json.loads((evaluation_dir(out, degradation) / "metrics.json").read_text())
    assert metrics["samples"] == "test" and metrics["n_samples"] == 32
    assert {"rmse", "phm", "phm_sum"} <= set(metrics["metrics"]) and "phm_sum" in done.stdout
    pred = xr.open_dataset(evaluation_dir(out, degradation) / "pred.nc")
    true = xr.open_dataset(degradation)["rul"].values[pred["sample"].values]
    error = pred["rul"].values - true
    assert metrics["metrics"]["rmse"] == pytest.approx(float(np.sqrt(np.mean(error ** 2))), rel=1e-5)
    terms = np.where(error < 0, np.expm1(-error / 13), np.expm1(error / 10))  # NAC Eq. 58
    assert metrics["metrics"]["phm_sum"] == pytest.approx(float(terms.sum()), rel=1e-4)


def test_per_step_and_label_targets(degradation, tmp_path):
    assert main(["train", "--data", str(degradation), "--model", "gru", "--out", str(tmp_path / "steps"),
                 "--epochs", "2", "--config", "units=8", *COMMON[:0], "--target", "rul_step", "--split", "96,32,32",
                 "--threads", "1", "--no-progress", "--workers", "0"]) == 0
    run = json.loads((tmp_path / "steps" / "run.json").read_text())
    assert run["model"]["derived"]["readout"] == "steps" and run["data"]["inputs"] == ["health", "gap"]
    assert main(["evaluate", "--run", str(tmp_path / "steps"), "--data", str(degradation)]) == 0
    pred = xr.open_dataset(evaluation_dir(tmp_path / "steps", degradation) / "pred.nc")
    assert pred["rul_step"].dims == ("sample", "time") and "time" in pred.coords
    lengths = xr.open_dataset(degradation)["length"].values[pred["sample"].values]
    valid = np.arange(pred.sizes["time"]) < lengths[:, None]
    assert np.isfinite(pred["rul_step"].values[valid]).all() and np.isnan(pred["rul_step"].values[~valid]).all()
    true = xr.open_dataset(degradation)["rul_step"].values[pred["sample"].values]
    rmse = np.sqrt(np.mean((pred["rul_step"].values - true)[valid] ** 2))  # over every valid step of the set
    metrics = json.loads((evaluation_dir(tmp_path / "steps", degradation) / "metrics.json").read_text())["metrics"]
    assert metrics["rmse"] == pytest.approx(rmse, rel=1e-4)
    # predict from the inputs alone (no rul, no rul_step): the same per-step predictions as evaluate's
    inputs = xr.open_dataset(degradation).drop_vars(["rul", "rul_step"])
    pde_data.save(inputs.load(), tmp_path / "inputs.nc")
    assert main(["predict", "--run", str(tmp_path / "steps"), "--data", str(tmp_path / "inputs.nc"),
                 "--out", str(tmp_path / "p.nc")]) == 0
    alone = xr.open_dataset(tmp_path / "p.nc")
    assert alone.sizes["sample"] == 160 and alone["rul_step"].dims == ("sample", "time")
    np.testing.assert_allclose(alone["rul_step"].values[pred["sample"].values], pred["rul_step"].values, rtol=1e-5)
    bad = main(["train", "--data", str(degradation), "--model", "gru", "--out", str(tmp_path / "bad"), "--target",
                "rul", "--config", "readout='steps'", "--no-progress"])
    assert bad == 1 and not (tmp_path / "bad").exists()
    digits = tmp_path / "digits.nc"
    assert run_cli("generate", "digits", "--out", digits, "--gap", "0.3").returncode == 0
    assert main(["train", "--data", str(digits), "--model", "cfc", "--out", str(tmp_path / "digits"), "--epochs", "1",
                 "--config", "units=8", "backbone_units=8", "--threads", "1", "--no-progress", "--workers", "0"]) == 0
    run = json.loads((tmp_path / "digits" / "run.json").read_text())
    assert run["task"]["kind"] == "sequence" and run["task"]["classes"] == 10 and run["model"]["out_channels"] == 10
    assert "val_top1" in json.loads((tmp_path / "digits" / "history.json").read_text())[-1]
    assert main(["evaluate", "--run", str(tmp_path / "digits"), "--data", str(digits)]) == 0
    folder = evaluation_dir(tmp_path / "digits", digits)
    metrics, label = json.loads((folder / "metrics.json").read_text()), run["data"]["targets"][0]
    with xr.open_dataset(digits) as ds, xr.open_dataset(folder / "pred.nc") as pred:
        true = ds[label].values[pred["sample"].values]
    assert metrics["baseline"]["majority_class"]["top1"] == pytest.approx(np.bincount(true).max() / len(true))


def _cmd(data, out, *extra):
    return [sys.executable, "-m", "operators.cli", "train", "--data", str(data), "--model", "cfc", "--out", str(out),
            "--config", "units=8", "backbone_units=8", "dropout=0.1", "--epochs", "6", *COMMON[:-2], "--cache",
            "stream", "--workers", "1", *extra]


@pytest.mark.slow
def test_kill_9_then_resume_equals_uninterrupted(degradation, tmp_path):
    cut = tmp_path / "cut"
    proc = subprocess.Popen(_cmd(degradation, cut), env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    assert main(_cmd(degradation, tmp_path / "full")[3:]) == 0
    while not (cut / "last.pt").exists() and proc.poll() is None:
        pass
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the run finished before it could be killed"
    resumed = subprocess.run(_cmd(degradation, cut, "--resume"), env=ENV, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    a, b = (load_checkpoint(d / "last.pt") for d in (tmp_path / "full", cut))
    assert a["epoch"] == b["epoch"] == 6 and all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])


@pytest.mark.slow
def test_two_process_torchrun_matches_one_process(degradation, tmp_path):
    def args(out, *extra):
        return ["train", "--data", str(degradation), "--model", "gru", "--out", str(out), "--config", "units=8",
                "--epochs", "2", *COMMON[:-2], *extra]

    a, b = torchrun_beside_one_process(args, tmp_path, atol=1e-6)
    assert a["epoch"] == b["epoch"] == 2 and "val_rmse" in b["history"][-1]


def test_several_targets_are_also_scored_one_by_one(degradation, tmp_path):
    """Two per-sequence targets in different units: evaluate scores each alone (the PHM score for ``rul`` only)
    beside the pooled MSE; each MSE is that of pred.nc against the file."""
    with xr.open_dataset(degradation) as ds:
        two = ds.load().assign(rul_hours=lambda d: (d["rul"] * 24.0 + 3.0).assign_attrs(d["rul"].attrs))
    data = pde_data.save(two, tmp_path / "two.nc")
    out = tmp_path / "run"
    assert main(["train", "--data", str(data), "--model", "gru", "--out", str(out), "--epochs", "1", "--config",
                 "units=8", "--target", "rul", "rul_hours", "--split", "96,32,32", "--threads", "1", "--no-progress",
                 "--workers", "0"]) == 0
    assert main(["evaluate", "--run", str(out), "--data", str(data)]) == 0
    folder = evaluation_dir(out, data)
    result = json.loads((folder / "metrics.json").read_text())
    with xr.open_dataset(folder / "pred.nc") as pred:
        mse = {v: float(np.mean((pred[v].values - two[v].values[pred["sample"].values]) ** 2)) for v in pred.data_vars}
    per = result["per_variable"]
    assert set(per) == {"rul", "rul_hours"} and "phm" in per["rul"] and "phm" not in per["rul_hours"]
    for name, value in mse.items():
        assert per[name]["mse"] == pytest.approx(value, rel=1e-4)
    assert result["metrics"]["mse"] == pytest.approx((mse["rul"] + mse["rul_hours"]) / 2, rel=1e-4)
    assert result["metrics"]["phm"] == pytest.approx(per["rul"]["phm"])
