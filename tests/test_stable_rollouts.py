"""Training for stable rollouts: an exponential moving average of the weights (``optim.ema``, ``--ema``) that
validation, best.pt, ``evaluate`` and ``predict`` use, and gaussian input noise (``optim.noise``, ``--noise``); a run
resumed halfway equals the straight one bit for bit, the average and the noise's draws included."""

from __future__ import annotations

import pytest
import torch

import pde_data
from cli_run import run_cli
from operators.training import (DataSpec, LoadingSpec, ModelSpec, OptimSpec, RunSpec, TaskSpec, load_checkpoint,
                                 load_run, stored_spec, train_run)
from test_rollout import travelling_waves

TINY = {"n_modes": 3, "width": 6, "n_layers": 2}


@pytest.fixture(scope="module")
def waves(tmp_path_factory):
    return pde_data.save(travelling_waves(n_samples=10), tmp_path_factory.mktemp("waves") / "w.nc")


def _spec(data, epochs: int, **optim) -> RunSpec:
    return RunSpec(data=DataSpec(str(data), split=(8, 2, 0)), task=TaskSpec(window=2), model=ModelSpec("fno", TINY),
                   optim=OptimSpec(epochs=epochs, batch_size=4, **optim), loading=LoadingSpec(workers=0))


def _equal(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_a_resumed_run_with_an_average_and_noise_equals_the_straight_one(waves, tmp_path):
    train_run(_spec(waves, 4, ema=0.9, noise=0.05), tmp_path / "straight", progress=False)
    train_run(_spec(waves, 2, ema=0.9, noise=0.05), tmp_path / "resumed", progress=False)
    train_run(stored_spec(tmp_path / "resumed").override({"optim.epochs": 4}), tmp_path / "resumed", progress=False,
              resume=True)
    a, b = (load_checkpoint(tmp_path / name / "last.pt") for name in ("straight", "resumed"))
    assert _equal(a["ema"], b["ema"]) and _equal(a["model"], b["model"]) and int(a["ema"]["n_averaged"]) == 4 * 80 // 4  # steps: 80 windows in batches of 4, 4 epochs
    timed = ("samples_per_s", "epoch_s")
    assert [{k: v for k, v in r.items() if k not in timed} for r in a["history"]] == \
        [{k: v for k, v in r.items() if k not in timed} for r in b["history"]]


def test_the_average_is_what_evaluation_uses_and_the_noise_changes_training(waves, tmp_path):
    train_run(_spec(waves, 2, ema=0.5), tmp_path / "ema", progress=False)
    state = load_checkpoint(tmp_path / "ema" / "last.pt")
    loaded = {k: v for k, v in load_run(tmp_path / "ema", checkpoint="last").model.state_dict().items()
              if torch.is_tensor(v)}
    assert _equal(loaded, {k[len("module."):]: v for k, v in state["ema"].items() if k != "n_averaged"})
    assert not _equal(loaded, state["model"])  # the average is not the last weights
    train_run(_spec(waves, 2), tmp_path / "plain", progress=False)
    train_run(_spec(waves, 2, noise=0.1), tmp_path / "noisy", progress=False)
    plain, noisy = (load_checkpoint(tmp_path / name / "last.pt")["model"] for name in ("plain", "noisy"))
    assert not _equal(plain, noisy) and "ema" not in load_checkpoint(tmp_path / "plain" / "last.pt")


def test_the_options_on_the_command_line(waves, tmp_path):
    done = run_cli("train", "--data", waves, "--model", "fno", "--window", "2", "--split", "8,2,0", "--epochs", "1",
                   "--config", "n_modes=3", "width=6", "n_layers=2", "--ema", "0.99", "--noise", "0.01",
                   "--out", tmp_path / "run", "--no-progress", "--threads", "1")
    assert done.returncode == 0, done.stderr
    assert stored_spec(tmp_path / "run").optim.ema == 0.99 and stored_spec(tmp_path / "run").optim.noise == 0.01
    bad = run_cli("train", "--data", waves, "--model", "fno", "--window", "2", "--ema", "1.5", "--out", tmp_path / "x")
    assert bad.returncode == 1 and "error: --ema: expected a decay in (0, 1), found 1.5" in bad.stderr, bad.stderr
