"""``circuitop train`` / ``circuitop evaluate --run``: real runs in subprocesses, errors, NaN stop."""

import json

import numpy as np
import xarray as xr
import pytest
import torch

import pde_data
from operators.cli import main
from operators.cli.train import parse_config
from operators.training import load_checkpoint, load_run
from test_trainer import poisson_dataset, write_poisson
from cli_run import run_cli as _cli, evaluation_dir

TINY = ["--config", "n_modes=4", "width=8", "n_layers=2", "--threads", "1", "--no-progress"]


def test_train_then_evaluate_a_steady_run(tmp_path, capsys):
    data = write_poisson(tmp_path / "p.nc", n_samples=24)
    out = tmp_path / "run"
    train = _cli("train", "--data", data, "--model", "fno", "--out", out, "--input", "f", "--target", "u",
                 "--split", "16,4,4", "--epochs", "2", "--batch-size", "8", "--scheduler", "cosine", *TINY)
    assert train.returncode == 0, train.stderr
    assert "epoch 2 | loss" in train.stderr and "samples/s" in train.stderr
    assert {"last.pt", "best.pt", "history.json", "run.json"} <= {p.name for p in out.iterdir()}
    assert main(["evaluate", "--run", str(out), "--data", str(data)]) == 0  # the CLI entry point, in-process
    folder = evaluation_dir(out, data)
    metrics = json.loads((folder / "metrics.json").read_text())
    assert metrics["samples"] == "test" and metrics["n_samples"] == 4
    assert {"rel_l2", "rel_l1", "nRMSE", "bRMSE", "fRMSE_low"} <= set(metrics["metrics"])
    assert "rel_l2" in capsys.readouterr().out and (folder / "fields.png").is_file()


def test_nan_in_the_data_stops_training_and_keeps_the_last_checkpoint(tmp_path):
    clean = write_poisson(tmp_path / "clean.nc", n_samples=20)
    ds = poisson_dataset(n_samples=20)
    ds["f"][3, 5, 5] = np.nan  # sample 3 is in the training split below
    pde_data.save(ds, tmp_path / "nan.nc")
    out = tmp_path / "run"
    args = ["--model", "fno", "--out", out, "--input", "f", "--target", "u", "--split", "16,4,0",
            "--batch-size", "4", *TINY]
    assert main(["train", "--data", str(clean), "--epochs", "2", *map(str, args)]) == 0
    assert 3 in pde_data.split_indices(20, sizes=[16, 4, 0], seed=0)["train"]
    before = load_checkpoint(out / "last.pt")
    second = _cli("train", "--data", tmp_path / "nan.nc", "--epochs", "4", "--resume", *args)
    assert second.returncode == 1
    assert "non-finite loss" in second.stderr and "epoch 3" in second.stderr
    assert "last good checkpoint" in second.stderr and "last.pt (epoch 2)" in second.stderr
    after = load_checkpoint(out / "last.pt")
    assert after["epoch"] == 2
    assert all(torch.equal(after["model"][k], v) and torch.isfinite(v).all() for k, v in before["model"].items())


def test_nan_in_the_data_is_named_before_training(tmp_path, capsys):
    """A fresh run finds a NaN (or Inf) in the training data in its normalizer pass and names the variable,
    sample and frame, before any epoch runs; the run folder it would have made is not left behind."""
    ds = poisson_dataset(n_samples=20)
    ds["u"][3, 2, 4] = np.inf  # sample 3 is in the training split below
    pde_data.save(ds, tmp_path / "inf.nc")
    args = ["train", "--data", str(tmp_path / "inf.nc"), "--model", "fno", "--out", str(tmp_path / "run"),
            "--input", "f", "--target", "u", "--split", "16,4,0", *TINY]
    assert main(args) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "variable 'u', sample 3: expected finite training data, found inf" in err
    assert not (tmp_path / "run").exists()
    windows = xr.Dataset({"h": (("sample", "time", "x"), np.ones((6, 5, 8)))})
    windows["h"][4, 3, 1] = np.nan
    pde_data.save(windows, tmp_path / "nan.nc")
    assert main(["train", "--data", str(tmp_path / "nan.nc"), "--model", "fno", "--out", str(tmp_path / "w"),
                 "--window", "2", "--split", "6,0,0", *TINY]) == 1
    assert "variable 'h', sample 4, frame 3: expected finite training data, found nan" in capsys.readouterr().err


def test_unknown_model_lists_the_registry(tmp_path, capsys):
    data = write_poisson(tmp_path / "p.nc", n_samples=8)
    assert main(["train", "--data", str(data), "--model", "fnoo", "--out", str(tmp_path / "r")]) == 1
    err = capsys.readouterr().err
    assert "--model: expected one of" in err and "chonn_fno" in err and "'fnoo'" in err


def test_missing_variables_and_time_mismatch_are_clear_errors(tmp_path, capsys):
    data = write_poisson(tmp_path / "p.nc", n_samples=8)
    assert main(["train", "--data", str(data), "--model", "fno", "--out", str(tmp_path / "r"), "--input", "a"]) == 1
    assert "missing ['a']" in capsys.readouterr().err
    assert main(["train", "--data", str(data), "--model", "fno", "--out", str(tmp_path / "r"), "--window", "2"]) == 1
    assert ("--window: expected data with a 'time' dim to roll out (a window run), found ['f', 'u'] without one"
            in capsys.readouterr().err)  # steady data: the window does not fit, not the (default) inputs
    assert main(["train", "--data", str(data), "--model", "fno", "--out", str(tmp_path / "r"), "--window", "2",
                 "--input", "f"]) == 1  # inputs named: they are what lacks time
    assert "--input: expected variables with a 'time' dim" in capsys.readouterr().err
    waves = xr.Dataset({"h": (("sample", "time", "x"), np.ones((4, 5, 8)))})
    pde_data.save(waves, tmp_path / "w.nc")
    assert main(["train", "--data", str(tmp_path / "w.nc"), "--model", "fno", "--out", str(tmp_path / "r")]) == 1
    assert "--window: expected the number of given frames of the time-dependent variables ['h']" in \
        capsys.readouterr().err
    assert main(["train", "--data", str(tmp_path / "none.nc"), "--model", "fno", "--out", str(tmp_path / "r")]) == 1
    assert "no such file" in capsys.readouterr().err
    assert main(["train", "--data", str(data), "--out", str(tmp_path / "r2"), "--resume"]) == 1
    assert "--resume: expected" in capsys.readouterr().err


def test_config_values_are_text_the_model_s_fields_convert():
    """``--config`` passes text; the one converter reads it as each field's type (a literal where the field
    takes no text, the text itself where it does)."""
    from operators.training import ModelSpec

    config = parse_config(["width=20", "n_modes=(12, 12)", "lifting_ratio=3", "n_layers=2"])
    assert config == {"width": "20", "n_modes": "(12, 12)", "lifting_ratio": "3", "n_layers": "2"}
    assert ModelSpec("fno", config).config == {"width": 20, "n_modes": (12, 12), "lifting_ratio": 3.0, "n_layers": 2}
    assert ModelSpec("chonn_vision", parse_config(["size=cpu"])).config == {"size": "cpu"}
    with pytest.raises(ValueError, match="KEY=VALUE"):
        parse_config(["width"])


def test_train_directly_on_pdebench_files(tmp_path, capsys):
    """Darcy layout (``nu``/``tensor`` → ``a``/``u``) steady, and the per-sample group layout with --window."""
    from test_rollout import travelling_waves

    darcy = poisson_dataset(n_samples=10).rename({"f": "a"})
    pde_data.write_pdebench(darcy, tmp_path / "2D_DarcyFlow_test.hdf5", layout="darcy")
    common = ["--epochs", "1", "--batch-size", "4", "--split", "6,2,2", *TINY]
    assert main(["train", "--data", str(tmp_path / "2D_DarcyFlow_test.hdf5"), "--model", "fno", "--out",
                 str(tmp_path / "darcy"), "--input", "a", "--target", "u", *common]) == 0
    waves = travelling_waves(n_samples=10, n_time=6).rename({"u": "h"})
    pde_data.write_pdebench(waves, tmp_path / "2D_rdb_test.h5", layout="rdb")
    assert main(["train", "--data", str(tmp_path / "2D_rdb_test.h5"), "--model", "fno", "--out",
                 str(tmp_path / "rdb"), "--window", "3", *common]) == 0, capsys.readouterr().err
    run = json.loads((tmp_path / "rdb" / "run.json").read_text())
    assert run["data"]["inputs"] == ["h"] and run["model"]["in_channels"] == 3


def test_nac_over_time_takes_its_frames_from_window(tmp_path, capsys):
    """``nac_fno --config tokens=time`` with ``--window 3``: the model reads the 3 frames as tokens
    (frames filled in from the window), trains, and rolls out through ``evaluate``."""
    from test_rollout import travelling_waves

    waves = travelling_waves(n_samples=8, n_time=7)
    pde_data.save(waves, tmp_path / "waves.nc")
    out = tmp_path / "nac_time"
    assert main(["train", "--data", str(tmp_path / "waves.nc"), "--model", "nac_fno", "--out", str(out),
                 "--window", "3", "--epochs", "1", "--batch-size", "4", "--split", "4,2,2", "--no-progress",
                 "--config", "width=8", "n_modes=4", "n_layers=2", "tokens=time", "topk=2"]) == 0, capsys.readouterr().err
    model = json.loads((out / "run.json").read_text())["model"]
    assert model["config"]["tokens"] == "time" and model["derived"]["frames"] == 3 and "frames" not in model["config"]
    assert main(["evaluate", "--run", str(out), "--data", str(tmp_path / "waves.nc"), "--steps", "3"]) == 0
    # the run asked again with another window: the data decide the frames again (config.yaml does not freeze them)
    assert main(["train", "--config-file", str(out / "config.yaml"), "--window", "2", "--out", str(tmp_path / "w2")]) == 0
    model = json.loads((tmp_path / "w2" / "run.json").read_text())["model"]
    assert model["derived"]["frames"] == 2 and model["in_channels"] == 2


def test_info_describes_a_run_and_its_checkpoints(tmp_path):
    """``circuitop info RUN_DIR`` / ``info RUN_DIR/last.pt``: the spec, the data, parameters, epochs, best
    score; training said how many parameters and items it had, and where it started."""
    data = write_poisson(tmp_path / "p.nc", n_samples=12)
    out = tmp_path / "run"
    train = _cli("train", "--data", data, "--model", "fno", "--out", out, "--input", "f", "--target", "u",
                 "--split", "8,2,2", "--epochs", "2", "--batch-size", "4", *TINY)
    assert train.returncode == 0, train.stderr
    n_params = sum(p.numel() for p in load_run(out).model.parameters())
    assert f"{n_params:,} parameters; 8 training and 2 validation items; starting at epoch 1 of 2" in train.stderr
    resumed = _cli("train", "--out", out, "--resume", "--epochs", "3", "--no-progress", "--threads", "1")
    assert "resuming after epoch 2 of 3" in resumed.stderr, resumed.stderr
    history = json.loads((out / "history.json").read_text())
    best = min(history, key=lambda r: r["val_rel_l2"])
    for target, epoch in ((out, 3), (out / "last.pt", 3)):  # a folder: its last.pt
        info = _cli("info", target)
        assert info.returncode == 0, info.stderr
        lines = dict(line.split(": ", 1) for line in info.stdout.splitlines())
        assert lines["checkpoint"].endswith(f"(epoch {epoch} of 3)") and lines["task"] == "steady"
        assert f"{n_params:,} parameters" in lines["model"] and lines["variables"] == "['f'] → ['u']"
        assert lines["split"] == "train 8, val 2, test 2 (seed 0)" and str(data) in lines["data"]
        assert lines["best"].startswith(f"epoch {best['epoch']} (best.pt): ")
        assert f"val_rel_l2 {best['val_rel_l2']:.4g}" in lines["best"] and lines["last"].startswith("epoch 3 of 3 ")
    empty = tmp_path / "empty"
    empty.mkdir()
    done = _cli("info", empty)
    assert done.returncode == 1 and "expected a run folder with best.pt or last.pt, or a data file" in done.stderr


def test_a_device_or_model_size_that_cannot_work_is_one_line(tmp_path, capsys):
    """``--device cuda`` without CUDA and ``--config width=0`` are refused before the run folder exists."""
    import torch

    data = write_poisson(tmp_path / "p.nc", n_samples=8)
    common = ["train", "--data", str(data), "--model", "fno", "--out", str(tmp_path / "r"), "--no-progress"]
    cases = [(["--config", "width=0"], "--config width: expected a positive integer, found 0"),
             (["--config", "n_modes=(4,0)"], "--config n_modes: expected a positive integer, found (4, 0)"),
             (["--config", "width=wide"], "--config width: expected int, found 'wide'"),
             (["--device", "cuda:x"], "--device: expected a torch device such as 'cpu'")]
    if not torch.cuda.is_available():
        cases.append((["--device", "cuda"], "--device: expected a device this machine has; found 'cuda'"))
    for extra, message in cases:
        assert main([*common, *extra]) == 1
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0] and not (tmp_path / "r").exists()
