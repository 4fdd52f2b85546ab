"""What a new user reads (issue 43): each message they found confusing is one line that names the option, what
was expected and what was found (the command exits 1); a prediction file names what made it."""

import pytest
import xarray as xr

import pde_data
from cli_run import head_commit, run_cli
from operators.cli import main


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny steady Darcy run (8², one epoch, the default modes) and its data."""
    folder = tmp_path_factory.mktemp("messages")
    data = pde_data.save(pde_data.generate_darcy(12, n_grid=8, seed=0), folder / "darcy.nc")
    assert main(["train", "--data", str(data), "--model", "fno", "--epochs", "1", "--config", "width=4", "--out",
                 str(folder / "run")]) == 0  # the default Fourier modes, fitted to the grid
    return folder


def _error(capsys, *args) -> str:
    assert main([str(a) for a in args]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def test_a_checkpoint_file_given_for_the_run_folder(trained, capsys):
    err = _error(capsys, "evaluate", "--run", trained / "run" / "best.pt")
    assert "--run: expected a run folder (holding best.pt, last.pt and run.json), found the file" in err
    assert f"(pass its folder, {trained / 'run'})" in err and "best.pt/best.pt" not in err


@pytest.mark.parametrize("command", ["train", "evaluate"])
def test_an_out_folder_that_cannot_be_created(trained, capsys, command):
    args = (["train", "--data", trained / "darcy.nc", "--model", "fno", "--epochs", "1"] if command == "train"
            else ["evaluate", "--run", trained / "run"])
    err = _error(capsys, *args, "--out", "/proc/circuitop/x")
    assert "--out: expected a folder this process can create and write to, found /proc/circuitop/x, which " \
           "cannot be created (No such file or directory)" in err and "[Errno" not in err


def test_a_stand_in_variable_of_another_rank(trained, capsys):
    ds = xr.open_dataset(trained / "darcy.nc")
    line = xr.Dataset({"line": ds["a"].isel(y=0, drop=True), "u": ds["u"]})
    pde_data.save(line, trained / "line.nc")
    err = _error(capsys, "evaluate", "--run", trained / "run", "--data", trained / "line.nc", "--input", "line",
                 "--samples", "all", "--out", trained / "e")
    assert "--input: expected variables with 2 spatial dims, as the run was trained on, found 'line' of dims " \
           "('sample', 'x')" in err


def test_a_grid_note_is_said_once(trained, capsys):
    pde_data.save(pde_data.generate_darcy(4, n_grid=16, seed=1), trained / "fine.nc")
    assert main(["evaluate", "--run", str(trained / "run"), "--data", str(trained / "fine.nc"), "--samples", "all",
                 "--out", str(trained / "fine")]) == 0
    out = capsys.readouterr().out
    assert "note: " in out and "note: note:" not in out and "has the grid {'x': 16, 'y': 16}" in out


def test_a_window_on_steady_data_names_the_window_in_a_subprocess(trained):
    done = run_cli("train", "--data", trained / "darcy.nc", "--model", "fno", "--window", "3", "--out",
                   trained / "w")
    assert done.returncode == 1
    assert done.stderr.strip().startswith("circuitop train: error: --window: expected data with a 'time' dim")


def test_a_prediction_file_names_what_made_it(trained):
    out = trained / "pred.nc"
    assert main(["predict", "--run", str(trained / "run"), "--data", str(trained / "darcy.nc"), "--out", str(out)]) == 0
    attrs = xr.open_dataset(out).attrs
    assert attrs["run"] == str((trained / "run").resolve()) and attrs["checkpoint"] == "best" and attrs["epoch"] == 1
    assert attrs["data_fingerprint"] == pde_data.open_source(trained / "darcy.nc").fingerprint().digest
    assert attrs["commit"].split()[0] == head_commit() and attrs["circuitop_version"]


def test_a_log_gets_one_line_per_epoch_not_a_progress_bar(trained):
    done = run_cli("train", "--data", trained / "darcy.nc", "--model", "fno", "--epochs", "2", "--config",
                   "n_modes=4", "width=4", "--out", trained / "logged")
    assert done.returncode == 0, done.stderr
    assert "\r" not in done.stderr  # stderr is a pipe here, as in a log file
    assert [line.split(" |")[0] for line in done.stderr.splitlines() if line.startswith("epoch ")] == \
        ["epoch 1", "epoch 2"]


def _table(stdout: str) -> list[str]:
    """The printed metric rows (under the ``metric`` header, above the lines in parentheses)."""
    lines = stdout.splitlines()
    start = next(k for k, line in enumerate(lines) if line.startswith("metric "))
    return [line for line in lines[start + 1:] if line and not line.startswith(("(", "wrote "))]


def test_evaluate_prints_a_headline_table_and_writes_the_whole_one(trained, capsys):
    import json

    assert main(["evaluate", "--run", str(trained / "run"), "--out", str(trained / "head")]) == 0
    printed = capsys.readouterr().out
    metrics = json.loads((trained / "head" / "metrics.json").read_text())["metrics"]
    shown = _table(printed)
    assert 3 <= len(shown) <= 10 < len(metrics) and shown[0].split()[0] == "rel_l2"
    assert f"({len(metrics) - len(shown)} more metrics in {trained / 'head' / 'metrics.md'}" in printed
    markdown = (trained / "head" / "metrics.md").read_text().splitlines()
    assert [row.split(" | ")[0].removeprefix("| ") for row in markdown if row.startswith("| ")][1:] == list(metrics)
    assert main(["evaluate", "--run", str(trained / "run"), "--out", str(trained / "every"), "--all"]) == 0
    assert [row.split()[0] for row in _table(capsys.readouterr().out)] == list(metrics)


def test_every_plot_of_an_evaluation_is_titled_with_the_run_and_the_data(trained):
    from PIL import Image

    assert main(["evaluate", "--run", str(trained / "run"), "--out", str(trained / "titled")]) == 0
    pngs = sorted((trained / "titled").glob("*.png"))
    assert [p.name for p in pngs] == ["fields.png", "spectra.png"]
    titles = {p.name: Image.open(p).text["Title"] for p in pngs}  # written into each PNG, read back
    assert titles["fields.png"].startswith("run on darcy.nc: u, sample ")
    assert titles["spectra.png"].startswith("run on darcy.nc: power spectra of u, sample ")


def test_fourier_modes_the_grid_cannot_hold_are_refused_and_the_default_fits_the_grid(trained, capsys):
    import json

    data = trained / "darcy.nc"  # 8x8: wavenumbers up to 4 per axis
    err = _error(capsys, "train", "--data", data, "--model", "fno", "--config", "n_modes=100", "--out", trained / "m")
    assert "--config n_modes: expected at most 4 Fourier modes per axis on the training grid 8x8" in err
    assert "--force keeps them" in err and "found 100" in err
    fitted = json.loads((trained / "run" / "run.json").read_text())["model"]  # trained with the default config
    assert fitted["derived"]["n_modes"] == 2 and "n_modes" not in fitted["config"]  # 8 // 3: the 2/3 rule
    assert fitted["derived"]["padding"] == 0.25  # a grid not said to be periodic: the latent field padded
    assert main(["train", "--data", str(data), "--model", "fno", "--epochs", "1", "--config", "n_modes=6",
                 "width=4", "--force", "--out", str(trained / "forced")]) == 0
    assert json.loads((trained / "forced" / "run.json").read_text())["model"]["config"]["n_modes"] == 6


def test_a_sequence_run_says_its_time_steps_and_a_batch_above_the_split_is_said(tmp_path, capsys):
    seq = pde_data.save(pde_data.generate_degradation(12, min_length=4, max_length=8, seed=0), tmp_path / "seq.nc")
    assert main(["info", str(seq)]) == 0
    assert "time: the 'time' coordinate ('sample', 'time') gives dt: irregular steps, " in capsys.readouterr().out
    assert main(["train", "--data", str(seq), "--model", "gru", "--target", "rul", "--epochs", "1", "--batch-size",
                 "1000", "--split", "8,2,2", "--out", str(tmp_path / "run")]) == 0
    err = capsys.readouterr().err
    assert "time steps: the 'time' coordinate ('sample', 'time') gives dt: irregular steps" in err
    assert "batch size 1000 is above the 8 training items: each epoch trains one batch of 8" in err
    plain = pde_data.generate_degradation(4, min_length=4, max_length=8, seed=0).drop_vars("time")
    assert pde_data.core.model.describe_time(plain) == "no 'time' coordinate: every step counts as dt = 1"


def test_a_generated_run_says_what_an_epoch_of_samples_costs(tmp_path, capsys):
    assert main(["train", "--generate", "darcy", "--gen", "n_grid=16", "--samples-per-epoch", "4", "--model", "fno",
                 "--epochs", "2", "--config", "width=4", "--out", str(tmp_path / "run")]) == 0
    err = capsys.readouterr().err
    said = [line for line in err.splitlines() if line.startswith("generated: ")]
    assert len(said) == 1 and said[0].startswith("generated: epoch 1's 4 samples took ")
    assert said[0].endswith("each later epoch is made as the one before trains")


def test_a_model_far_larger_than_its_data_is_warned_before_training(trained, capsys):
    """More than 100 parameters per training target value: one warning line before the first epoch; a model
    within that bound (the fixture's width 4: 813 parameters for 10 × 64 values) gets none."""
    def warnings(width: int, out: str) -> list[str]:
        assert main(["train", "--data", str(trained / "darcy.nc"), "--model", "fno", "--epochs", "1", "--split",
                     "10,1,1", "--config", f"width={width}", "--threads", "1", "--out", str(trained / out)]) == 0
        err = capsys.readouterr().err.splitlines()
        first_epoch = next(k for k, line in enumerate(err) if line.startswith("epoch 1"))
        return [line for line in err[:first_epoch] if line.startswith("warning: model:")]

    assert warnings(4, "fits") == []
    (line,) = warnings(48, "too_large")
    assert line.startswith("warning: model: 102,673 parameters for 640 training target values (160 per value")
