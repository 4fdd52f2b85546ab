"""What a user meets after training: evaluations that keep every result, honest sample sets, the mean
predictor and per-variable metrics, ``predict`` from inputs alone, and variable mapping (``--input/--target``),
through the CLI as a subprocess where a user would type it."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import xarray as xr

import evaluation
import pde_data
from cli_run import evaluation_dir, run_cli
from operators.training import DataSpec, LoadingSpec, ModelSpec, OptimSpec, RunSpec, TaskSpec, evaluate_run, load_run, train_run
from evaluation.summary import per_sample_metrics
from test_rollout import travelling_waves

TINY = {"n_modes": 3, "width": 6, "n_layers": 2}


def fields(n=24, size=12, seed=0) -> xr.Dataset:
    """a → (u, v): u = 2a + 1 and v = -a + 3, on a unit grid."""
    a = np.random.default_rng(seed).normal(size=(n, size, size)).astype("f4")
    grid = np.arange(size) / size
    dims = ("sample", "x", "y")
    return xr.Dataset({"a": (dims, a), "u": (dims, 2 * a + 1), "v": (dims, 3 - a)}, coords={"x": grid, "y": grid})


def _train(tmp_path, data, split=(16, 4, 4), targets=("u", "v")) -> Path:
    spec = RunSpec(data=DataSpec(str(data), inputs=("a",), targets=targets, split=split),
                   model=ModelSpec("fno", TINY), optim=OptimSpec(epochs=2, batch_size=8),
                   loading=LoadingSpec(workers=0))
    train_run(spec, tmp_path / "run", progress=False)
    return tmp_path / "run"


@pytest.fixture(scope="module")
def steady(tmp_path_factory):
    root = tmp_path_factory.mktemp("steady")
    data = pde_data.save(fields(), root / "fields.nc")
    return _train(root, data), data


def _listed(folder: Path) -> None:
    """``metrics.json`` lists every file of its folder, and only those."""
    listed = json.loads((folder / "metrics.json").read_text())["files"]
    assert sorted(Path(f).name for f in listed) == sorted(p.name for p in folder.iterdir())
    assert all(Path(f).parent == folder for f in listed)


def test_two_evaluations_keep_their_results_and_a_third_needs_overwrite(steady, tmp_path):
    run, data = steady
    other = pde_data.save(fields(n=10, seed=1), tmp_path / "other.nc")
    first = run_cli("evaluate", "--run", run, "--data", data)
    second = run_cli("evaluate", "--run", run, "--data", other, "--samples", "all")
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    for folder, n in ((evaluation_dir(run, data), 4), (evaluation_dir(run, other, "all"), 10)):
        assert json.loads((folder / "metrics.json").read_text())["n_samples"] == n
        assert pde_data.open_source(folder / "pred.nc").dataset.sizes["sample"] == n
        _listed(folder)
    before = (evaluation_dir(run, data) / "metrics.json").read_text()
    again = run_cli("evaluate", "--run", run, "--data", data, "--steps", "3")
    assert again.returncode == 1 and len(again.stderr.strip().splitlines()) == 1
    assert "earlier evaluation" in again.stderr and "--overwrite" in again.stderr
    assert (evaluation_dir(run, data) / "metrics.json").read_text() == before
    replaced = run_cli("evaluate", "--run", run, "--data", data, "--overwrite", "--json")
    assert replaced.returncode == 0 and json.loads(replaced.stdout)["n_samples"] == 4
    assert not [p for p in (run / "evaluations").iterdir() if p.name.startswith(".")]  # no staging left behind
    info = run_cli("info", run)
    assert info.returncode == 0 and "evaluation fields.nc-test:" in info.stdout and "evaluation other.nc-all:" in info.stdout


def test_the_table_has_the_mean_predictor_and_each_variable(steady, tmp_path):
    run, data = steady
    result = evaluate_run(run, data, out=tmp_path / "e", plots=False)
    assert set(result["per_variable"]) == {"u", "v"}
    loaded, ds = load_run(run), xr.open_dataset(data)
    train = ds.isel(sample=list(loaded.spec.data.splits.train))
    test = ds.isel(sample=list(loaded.spec.data.splits.test))
    true = torch.from_numpy(np.stack([test["u"].values, test["v"].values], axis=1))
    means = torch.tensor([float(train["u"].mean()), float(train["v"].mean())]).reshape(1, 2, 1, 1)
    expected = evaluation.rel_l2(means.expand_as(true).contiguous(), true)  # each variable's training mean everywhere
    assert result["baseline"]["mean_predictor"]["rel_l2"] == pytest.approx(float(expected), rel=1e-4)
    assert result["per_variable"]["u"]["rel_l2"] != result["per_variable"]["v"]["rel_l2"]
    table = run_cli("evaluate", "--run", run, "--data", data, "--out", tmp_path / "t")
    lines = table.stdout.splitlines()
    header = next(line for line in lines if line.startswith("metric")).split("  ")
    assert [h.strip() for h in header if h.strip()] == ["metric", "model (95% interval)", "mean predictor",
                                                        "model [u]", "model [v]"]
    assert lines[-2] == "(only 4 samples: too few to tell models apart (expected at least 10))"  # under the table


def test_validation_is_never_reported_as_test_and_few_samples_are_flagged(tmp_path):
    data = pde_data.save(fields(n=12), tmp_path / "f.nc")
    run = _train(tmp_path, data, split=(9, 3, 0), targets=("u",))
    refused = run_cli("evaluate", "--run", run, "--data", data)
    assert refused.returncode == 1 and len(refused.stderr.strip().splitlines()) == 1
    assert "--samples: expected a stored test split" in refused.stderr and "--samples val" in refused.stderr
    val = run_cli("evaluate", "--run", run, "--data", data, "--samples", "val")
    assert val.returncode == 0, val.stderr
    assert "validation split (it chose best.pt: not a test score), 3 samples" in val.stdout
    assert "warning: only 3 samples: too few to tell models apart" in val.stdout
    result = json.loads((evaluation_dir(run, data, "val") / "metrics.json").read_text())
    assert result["samples"] == "val" and "too few" in result["warning"]


def test_predict_from_inputs_alone_at_another_resolution(steady, tmp_path):
    run, _ = steady
    inputs = fields(n=5, size=16, seed=2)[["a"]]  # no targets, another grid
    path = pde_data.save(inputs, tmp_path / "inputs.nc")
    # on the CPU, as load_run below (on a GPU, TF32 convolutions differ from it by about 1e-4)
    done = run_cli("predict", "--run", run, "--data", path, "--out", tmp_path / "pred.nc", "--device", "cpu")
    assert done.returncode == 0, done.stderr
    assert "the run was trained on" in done.stderr
    assert "runs at the file's resolution, on its inputs as stored" in done.stderr
    pred = pde_data.open_source(tmp_path / "pred.nc").dataset
    assert set(pred.data_vars) == {"u", "v"} and pred["u"].dims == ("sample", "x", "y")
    np.testing.assert_array_equal(pred["x"].values, inputs["x"].values)
    in_python = load_run(run).predict(inputs)  # the README's Python equivalent
    np.testing.assert_allclose(pred["u"].values, in_python["u"].values, rtol=1e-6, atol=1e-6)
    again = run_cli("predict", "--run", run, "--data", path, "--out", tmp_path / "pred.nc")
    assert again.returncode == 1 and "--overwrite" in again.stderr


def test_a_run_on_a_and_u_scores_on_neuraloperators_input_and_target(tmp_path):
    data = pde_data.save(fields()[["a", "u"]], tmp_path / "f.nc")
    run = _train(tmp_path, data, targets=("u",))
    ds = xr.open_dataset(data)
    torch.save({"x": torch.from_numpy(ds["a"].values), "y": torch.from_numpy(ds["u"].values)}, tmp_path / "no.pt")
    unmapped = run_cli("evaluate", "--run", run, "--data", tmp_path / "no.pt", "--samples", "all")
    assert unmapped.returncode == 1 and "--input: expected the variables ['a', 'u']" in unmapped.stderr
    mapped = run_cli("evaluate", "--run", run, "--data", tmp_path / "no.pt", "--samples", "all", "--input", "input",
                     "--target", "target", "--json")
    assert mapped.returncode == 0, mapped.stderr
    own = evaluate_run(run, data, samples="all", write=False)
    assert json.loads(mapped.stdout)["metrics"]["rel_l2"] == pytest.approx(own["metrics"]["rel_l2"], rel=1e-5)
    wrong = run_cli("evaluate", "--run", run, "--data", tmp_path / "no.pt", "--samples", "all", "--input", "x", "y")
    assert wrong.returncode == 1 and "--input: expected 1 variables of the file standing in for" in wrong.stderr


def _window_run(tmp_path, *, n_samples: int, split: tuple[int, int, int]) -> tuple[xr.Dataset, Path]:
    """A window run (2 given frames, one epoch) trained into ``tmp_path/run`` on travelling waves; the waves and
    their file."""
    waves = travelling_waves(n_samples=n_samples)
    data = pde_data.save(waves, tmp_path / "w.nc")
    spec = RunSpec(data=DataSpec(str(data), split=split), task=TaskSpec(window=2), model=ModelSpec("fno", TINY),
                   optim=OptimSpec(epochs=1, batch_size=8), loading=LoadingSpec(workers=0))
    train_run(spec, tmp_path / "run", progress=False)
    return waves, data


def test_predict_a_rollout_past_the_files_frames(tmp_path):
    waves, data = _window_run(tmp_path, n_samples=10, split=(8, 2, 0))
    given = pde_data.save(waves.isel(time=slice(0, 2), sample=slice(0, 3)), tmp_path / "given.nc")
    missing = run_cli("predict", "--run", tmp_path / "run", "--data", given, "--out", tmp_path / "p.nc")
    assert missing.returncode == 1 and "--steps: expected a number of rollout steps" in missing.stderr
    done = run_cli("predict", "--run", tmp_path / "run", "--data", given, "--out", tmp_path / "p.nc", "--steps", "4",
                   "--device", "cpu")  # as load_run below
    assert done.returncode == 0, done.stderr
    pred = pde_data.open_source(tmp_path / "p.nc").dataset
    assert pred["u"].dims == ("sample", "time", "x", "y") and pred.sizes["time"] == 6
    np.testing.assert_array_equal(pred["time"].values, np.arange(6.0))  # extrapolated at the given spacing
    np.testing.assert_array_equal(pred["u"].values[:, :2], waves["u"].values[:3, :2])
    in_python = load_run(tmp_path / "run").predict(given, steps=4)
    np.testing.assert_allclose(pred["u"].values, in_python["u"].values, rtol=1e-6, atol=1e-6)


def test_every_per_sample_metric_has_a_seeded_bootstrap_interval(steady, tmp_path):
    """The interval holds the metric, is the same under the same seed, moves with another, and equals a percentile
    bootstrap of the per-sample values done by hand."""
    run, data = steady
    one = evaluate_run(run, data, out=tmp_path / "a", plots=False, bootstrap=500, seed=3)
    again = evaluate_run(run, data, out=tmp_path / "b", plots=False, bootstrap=500, seed=3)
    other = evaluate_run(run, data, out=tmp_path / "c", plots=False, bootstrap=500, seed=4)
    assert one["bootstrap"] == {"resamples": 500, "seed": 3, "level": 0.95}
    assert one["intervals"] == again["intervals"] != other["intervals"]
    assert set(one["intervals"]) == {key for key, _, _ in per_sample_metrics("field")}
    for name, (low, high) in one["intervals"].items():
        assert low <= one["metrics"][name] <= high, name
    pred = xr.open_dataset(tmp_path / "a" / "pred.nc")[["u", "v"]]
    test = xr.open_dataset(data)[["u", "v"]].sel(sample=pred["sample"].values)
    per_sample = np.asarray(evaluation.rel_l2(pred, test, reduce="none"), dtype=np.float64)
    per_sample = per_sample.reshape(len(per_sample), -1).mean(1)
    draws = np.random.default_rng(3).integers(0, len(per_sample), size=(500, len(per_sample)))
    assert one["intervals"]["rel_l2"] == pytest.approx(np.quantile(per_sample[draws].mean(1), [0.025, 0.975]), rel=1e-5)
    assert "intervals" not in evaluate_run(run, data, out=tmp_path / "d", plots=False, bootstrap=0)


def test_a_window_run_reports_the_wells_windows_correlation_times_and_drift(tmp_path):
    _window_run(tmp_path, n_samples=14, split=(8, 2, 4))
    done = run_cli("evaluate", "--run", tmp_path / "run", "--out", tmp_path / "e", "--bootstrap", "200")
    assert done.returncode == 0, done.stderr
    rollout = json.loads((tmp_path / "e" / "metrics.json").read_text())["rollout"]
    steps = rollout["steps"]
    assert list(rollout["windows"]["vrmse"]) == ["1", "2-5", f"6-{steps}"][:1 + (steps >= 2) + (steps >= 6)]
    assert set(rollout["correlation_time"]) == {"0.95", "0.9", "0.8"} and set(rollout["drift"]) == {"u"}
    assert len(rollout["drift"]["u"]["energy"]) == steps
    assert "rollout vrmse by steps  1:" in done.stdout and "correlation < 0.9: median" in done.stdout
