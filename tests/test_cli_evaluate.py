"""``circuitop evaluate``: the real command in a subprocess on small NetCDF files, and its usage errors.

Each subprocess pays the full import of the CLI (torch, neuraloperator, ...), so only two cases run
that way; the other usage errors go through the same ``main`` in-process.
"""

import json
from pathlib import Path
import subprocess
import sys

import numpy as np
import pytest
import xarray as xr

import pde_data
from evaluation import pdebench_metrics, rel_l2
from operators.cli import main

DIMS = ("sample", "time", "x", "y")


def circuitop(*args):
    return subprocess.run([sys.executable, "-m", "operators.cli", "evaluate", *args],
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("evaluate")
    rng = np.random.default_rng(0)
    true = xr.Dataset({"h": (DIMS, rng.normal(size=(3, 4, 16, 16)) + 1.0),
                       "u": (DIMS, rng.normal(size=(3, 4, 16, 16)))})
    noise = xr.Dataset({v: (DIMS, rng.normal(size=(3, 4, 16, 16))) for v in ("h", "u")})
    pred = true + 0.1 * noise.where(noise.time >= 2, 0.0)  # the two input frames are copied through
    paths = {"pred": root / "pred.nc", "true": root / "true.nc", "other": root / "other.nc"}
    pde_data.save(pred, paths["pred"])
    pde_data.save(true, paths["true"])
    pde_data.save(true.isel(x=slice(0, 8)), paths["other"])
    return {k: str(v) for k, v in paths.items()}, pred, true


def _one_line_error(returncode, stderr, *fragments):
    assert returncode != 0
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def test_json_output_matches_the_library(files):
    paths, pred, true = files
    result = circuitop("--pred", paths["pred"], "--true", paths["true"], "--window", "2", "--json")
    assert result.returncode == 0, result.stderr
    table = json.loads(result.stdout)
    expected = pdebench_metrics(pred, true, window=2)
    for key in ("RMSE", "nRMSE", "CSV", "Max", "bRMSE", "fRMSE_low", "fRMSE_mid"):
        assert table[key] == pytest.approx(expected[key], rel=1e-6)
    assert "fRMSE_high" not in table  # a 16 x 16 grid has no radius >= 12: the band is absent
    assert table["RMSE"] > 0.05  # the copied input frames were excluded, not averaged in
    scored = [d.isel(time=slice(2, None)) for d in (pred, true)]
    assert table["rel_l2"] == pytest.approx(rel_l2(*scored), rel=1e-6)
    pdebench_name = circuitop("--pred", paths["pred"], "--true", paths["true"], "--initial-step", "2", "--json")
    assert json.loads(pdebench_name.stdout) == table  # PDEBench's name for --window
    assert {"rel_l1", "rel_l1_median", "nrmse_range", "max_mse", "rel_l2_spectral", "rel_l2_derivative"} <= set(table)


def test_mismatched_files_give_a_one_line_error(files):
    paths, *_ = files
    result = circuitop("--pred", paths["pred"], "--true", paths["other"])
    _one_line_error(result.returncode, result.stderr, "pred dims", "'x': 16", "true dims", "'x': 8")


def test_table_output(files, capsys):
    paths, *_ = files
    assert main(["evaluate", "--pred", paths["pred"], "--true", paths["true"]]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any(line.split()[0] == "nRMSE" for line in lines)
    assert "window: 0" in lines


@pytest.mark.parametrize("args,fragments", [
    (["--pred", "{pred}"], ["exactly one of", "['--pred']"]),
    (["--pred", "{pred}", "--true", "{true}", "--run", "r"], ["exactly one of"]),
    (["--pred", "{pred}", "--true", "{true}", "--window", "4"], ["window", "[0, 4)"]),
    (["--pred", "{pred}", "--true", "{true}", "--steps", "5"], ["--steps"]),
    (["--pred", "{other}.missing", "--true", "{true}"], ["no such file"]),
])
def test_bad_usage(files, capsys, args, fragments):
    paths, *_ = files
    code = main(["evaluate", *[a.format(**paths) for a in args]])
    _one_line_error(code, capsys.readouterr().err, *fragments)


def test_run_mode_without_a_run_says_what_is_missing(tmp_path, capsys):
    code = main(["evaluate", "--run", str(tmp_path), "--data", str(tmp_path / "d.nc"), "--steps", "40"])
    _one_line_error(code, capsys.readouterr().err, "no checkpoint at", "best.pt")


def test_coordinates_must_agree_unless_ignored(files, tmp_path, capsys):
    """Same shape, other coordinates: time ×10 or x shifted is refused by name; --ignore-coords scores it."""
    _, pred, true = files
    grid = {"time": np.arange(4) * 0.1, "x": np.arange(16) / 16, "y": np.arange(16) / 16}
    pred, true = pred.assign_coords(grid), true.assign_coords(grid)
    pde_data.save(true, tmp_path / "true.nc")
    assert main(["evaluate", "--pred", str(pde_data.save(pred, tmp_path / "same.nc")), "--true",
                 str(tmp_path / "true.nc")]) == 0
    for name, moved in (("time", pred.assign_coords(time=grid["time"] * 10)),
                        ("x", pred.assign_coords(x=grid["x"] + 0.5))):
        path = pde_data.save(moved, tmp_path / f"moved_{name}.nc")
        capsys.readouterr()
        assert main(["evaluate", "--pred", str(path), "--true", str(tmp_path / "true.nc")]) == 1
        _one_line_error(1, capsys.readouterr().err, f"coordinate '{name}'", "--ignore-coords")
        assert main(["evaluate", "--pred", str(path), "--true", str(tmp_path / "true.nc"), "--ignore-coords"]) == 0


def test_a_runs_predictions_are_rescored_against_its_data(tmp_path, capsys):
    """``pred.nc`` of ``evaluate --run`` holds the test samples (its sample coordinate says which): scored
    with --pred/--true against the whole data file, it gives the run's own metrics."""
    from operators.training import DataSpec, LoadingSpec, ModelSpec, OptimSpec, RunSpec, evaluate_run, train_run
    from test_trainer import write_poisson

    data = write_poisson(tmp_path / "p.nc", n_samples=16)
    spec = RunSpec(data=DataSpec(str(data), inputs=("f",), targets=("u",), split=(10, 2, 4)),
                   model=ModelSpec("fno", {"n_modes": 3, "width": 6, "n_layers": 2}),
                   optim=OptimSpec(epochs=1, batch_size=4), loading=LoadingSpec(workers=0))
    train_run(spec, tmp_path / "run", progress=False)
    result = evaluate_run(tmp_path / "run", data, plots=False)
    assert main(["evaluate", "--pred", str(Path(result["out"]) / "pred.nc"), "--true", str(data), "--json"]) == 0
    table = json.loads(capsys.readouterr().out)
    assert table["rel_l2"] == pytest.approx(result["metrics"]["rel_l2"], rel=1e-5)
