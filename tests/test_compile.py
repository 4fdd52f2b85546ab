"""``train --compile``: the model under torch.compile trains to the eager run's results, the flag is part of
the run's spec, and checkpoints hold the plain module's weights (one tiny FNO: compiling is slow on a CPU)."""

import json
import os

import pytest
import torch
import yaml

from cli_run import ENV, ROOT, run_cli
from operators.training import load_checkpoint, load_run
from test_trainer import write_poisson


@pytest.mark.slow
def test_compiled_training_matches_eager_and_is_recorded(tmp_path, monkeypatch):
    data = write_poisson(tmp_path / "p.nc", n_samples=12)
    args = ["train", "--data", data, "--model", "fno", "--input", "f", "--target", "u", "--split", "8,2,2",
            "--epochs", "2", "--batch-size", "4", "--cache", "memory", "--no-progress",
            "--config", "n_modes=4", "width=8", "n_layers=2"]
    eager = run_cli(*args, "--out", tmp_path / "eager")
    assert eager.returncode == 0, eager.stderr[-2000:]
    # the recompile log (validation switches the model to eval mode) shows that the compiled module ran
    monkeypatch.setitem(ENV, "TORCH_LOGS", "recompiles")
    monkeypatch.setitem(ENV, "TORCHINDUCTOR_CACHE_DIR", os.environ.get("TORCHINDUCTOR_CACHE_DIR",
                                                                        str(ROOT / ".torchinductor")))
    compiled = run_cli(*args, "--out", tmp_path / "compiled", "--compile", timeout=600)
    assert compiled.returncode == 0, compiled.stderr[-2000:]
    assert "Recompiling function forward" in compiled.stderr and "Recompiling" not in eager.stderr

    a, b = load_checkpoint(tmp_path / "eager" / "last.pt"), load_checkpoint(tmp_path / "compiled" / "last.pt")
    assert list(b["model"]) == list(a["model"])  # no "_orig_mod." prefix: loads into the plain module
    for key, value in a["model"].items():
        torch.testing.assert_close(b["model"][key], value, rtol=1e-4, atol=1e-6)
    losses = [[r["train_loss"] for r in state["history"]] for state in (a, b)]
    assert losses[1] == pytest.approx(losses[0], rel=1e-4)

    assert b["spec"]["optim"]["compile"] is True and a["spec"]["optim"]["compile"] is False
    assert json.loads((tmp_path / "compiled" / "run.json").read_text())["optim"]["compile"] is True
    assert yaml.safe_load((tmp_path / "compiled" / "config.yaml").read_text())["optim"]["compile"] is True
    run = load_run(tmp_path / "compiled", checkpoint="last")  # the plain module, with the weights as trained
    weights = run.model.state_dict()
    for key, value in b["model"].items():
        torch.testing.assert_close(weights[key], value)
