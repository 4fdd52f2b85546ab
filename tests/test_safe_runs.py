"""Nothing a user made is lost without an explicit flag: run folders belong to one run (lock, --resume,
--overwrite), ``--resume`` keeps the stored settings, ``generate`` refuses existing outputs. Every case runs
the real CLI as a subprocess on small files and checks the exit code, the one-line message and that the old
files are byte-identical afterwards."""

import fcntl
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from test_trainer import write_poisson
from cli_run import run_cli as _cli

ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
TINY = ["--config", "n_modes=4", "width=8", "n_layers=2", "--threads", "1", "--no-progress", "--workers", "0"]


def _train(data, out, *extra, epochs=1):
    return _cli("train", "--data", data, "--model", "fno", "--out", out, "--input", "f", "--target", "u",
                "--split", "8,2,2", "--epochs", epochs, "--batch-size", "4", *TINY, *extra)


def _digests(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.is_file()}


def _one_line_error(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 1, done.stderr
    lines = [line for line in done.stderr.splitlines() if "error:" in line]
    assert len(lines) == 1, done.stderr
    return lines[0]


def _default_sigint() -> None:
    """Ctrl-C as in a terminal: a suite started as a background job (``make test &``) ignores SIGINT, and its
    children would inherit that."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _started_long_run(data, out) -> subprocess.Popen:
    """A long ``train`` into ``out``, returned once its first epoch is checkpointed."""
    proc = subprocess.Popen([sys.executable, "-m", "operators.cli", "train", "--data", str(data), "--model", "fno",
                             "--out", str(out), "--input", "f", "--target", "u", "--split", "8,2,2",
                             "--epochs", "100000", "--batch-size", "4", *TINY], env=ENV, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, preexec_fn=_default_sigint)
    deadline = time.monotonic() + 120
    while not (out / "last.pt").exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.01)
    return proc


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A finished 2-epoch run and its data file."""
    tmp = tmp_path_factory.mktemp("runs")
    data = write_poisson(tmp / "p.nc", n_samples=12)
    done = _train(data, tmp / "run", epochs=2)
    assert done.returncode == 0, done.stderr
    return data, tmp / "run"


def test_an_existing_run_is_refused_without_resume_or_overwrite(trained, tmp_path):
    data, run = trained
    before = _digests(run)
    line = _one_line_error(_train(data, run))
    assert "expected an empty or new run folder" in line and "--resume" in line and "--overwrite" in line
    assert _digests(run) == before and not (run / ".lock").exists()


def test_overwrite_replaces_a_run_but_never_a_users_file(trained, tmp_path):
    data, run = trained
    copy = tmp_path / "run"
    copy.mkdir()
    for name in ("last.pt", "best.pt", "history.json", "run.json"):
        (copy / name).write_bytes((run / name).read_bytes())
    (copy / "notes.txt").write_text("mine")
    line = _one_line_error(_train(data, copy, "--overwrite"))
    assert "holds files a run does not write (notes.txt)" in line and (copy / "notes.txt").read_text() == "mine"
    (copy / "notes.txt").unlink()
    done = _train(data, copy, "--overwrite")
    assert done.returncode == 0, done.stderr
    assert json.loads((copy / "history.json").read_text())[-1]["epoch"] == 1  # the 1-epoch run replaced it


def test_a_held_lock_refuses_and_a_left_one_is_taken_over(trained, tmp_path):
    data, _ = trained
    out = tmp_path / "run"
    out.mkdir()
    holder = {"pid": os.getpid(), "host": socket.gethostname(), "started": "2026-01-01T00:00:00"}
    with open(out / ".lock", "w") as fh:  # this process holds the folder as a run would
        fh.write(json.dumps(holder))
        fh.flush()
        fcntl.lockf(fh, fcntl.LOCK_EX)
        line = _one_line_error(_train(data, out))
    assert f"locked by pid {os.getpid()} on {socket.gethostname()}" in line
    assert sorted(p.name for p in out.iterdir()) == [".lock"]
    done = _train(data, out)  # the lock file is still there, but nobody holds it (as after kill -9)
    assert done.returncode == 0, done.stderr
    assert f"taking over the lock file left by pid {os.getpid()}" in done.stderr and not (out / ".lock").exists()


def test_overwrite_with_a_bad_argument_keeps_the_old_run(trained, tmp_path):
    data, run = trained
    before = _digests(run)
    line = _one_line_error(_cli("train", "--data", data, "--model", "fno", "--out", run, "--input", "nope",
                                "--target", "u", "--overwrite", *TINY))
    assert "missing ['nope']" in line and _digests(run) == before


def test_two_runs_into_one_folder_at_once(trained, tmp_path):
    """A second run refuses while the first holds the folder; the first goes on (interrupted here, to end
    the test) with its checkpoints whole."""
    data, _ = trained
    out = tmp_path / "run"
    first = _started_long_run(data, out)
    second = _train(data, out)
    assert first.poll() is None, "the first run ended before the second started"
    first.send_signal(signal.SIGINT)
    _, err = first.communicate(timeout=120)
    assert f"locked by pid {first.pid}" in _one_line_error(second)
    assert first.returncode == 130, err
    history = json.loads((out / "history.json").read_text())
    assert history[-1]["epoch"] == len(history) >= 1


def test_resume_keeps_the_stored_settings(trained, tmp_path):
    data, run = trained
    before = _digests(run)
    for flags, expected in ((["--lr", "0.1"], f"--lr: resuming {run} keeps the stored value 0.001; found 0.1"),
                            (["--model", "unet"], "--model: resuming"),
                            (["--config", "width=16"], "--config width: resuming"),
                            (["--epochs", "1"], "--epochs: expected at least the 2 epochs")):
        done = _cli("train", "--data", data, "--out", run, "--resume", *flags, "--no-progress")
        assert expected in _one_line_error(done)
    assert _digests(run) == before
    done = _cli("train", "--data", data, "--out", run, "--resume", "--epochs", "3", "--lr", "0.001",
                "--workers", "1", "--no-progress")  # the stored lr, and loader settings, are fine
    assert done.returncode == 0, done.stderr
    assert json.loads((run / "history.json").read_text())[-1]["epoch"] == 3
    done = _cli("train", "--data", data, "--out", run, "--resume", "--no-progress")  # the stored 3 epochs: done
    assert done.returncode == 0, done.stderr
    assert json.loads((run / "history.json").read_text())[-1]["epoch"] == 3


def test_resume_needs_a_run(tmp_path, trained):
    data, _ = trained
    line = _one_line_error(_cli("train", "--data", data, "--out", tmp_path / "none", "--resume"))
    assert "--resume: expected" in line and "last.pt" in line
    assert not (tmp_path / "none").exists()


def test_an_interrupted_run_says_how_to_resume(trained, tmp_path):
    data, _ = trained
    out = tmp_path / "run"
    proc = _started_long_run(data, out)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "interrupted" in err and "--resume" in err
    assert not (out / ".lock").exists()


def test_generate_refuses_an_existing_output(tmp_path):
    out = tmp_path / "p.nc"
    args = ["generate", "poisson", "--out", out, "--n", "4", "--K", "4", "--n-grid", "16"]
    assert _cli(*args).returncode == 0
    before = out.read_bytes()
    line = _one_line_error(_cli(*args, "--seed", "1"))
    assert "found an existing one; pass --overwrite" in line and out.read_bytes() == before
    assert _cli(*args, "--seed", "1", "--overwrite").returncode == 0 and out.read_bytes() != before
    folder = tmp_path / "folder.nc"
    folder.mkdir()
    assert "found a folder" in _one_line_error(_cli(*args[:3], folder, *args[4:], "--overwrite"))
    assert "found a special file" in _one_line_error(_cli(*args[:3], "/dev/null", *args[4:], "--overwrite"))
    assert Path("/dev/null").is_char_device()
    blocked = tmp_path / "plain-file"
    blocked.write_text("x")
    assert "impossible to create" in _one_line_error(_cli(*args[:3], blocked / "p.nc", *args[4:]))


def test_a_run_logs_every_epoch(trained):
    """``metrics.csv`` (one row per epoch), ``curves.png`` and TensorBoard scalars hold the same history."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    _, run = trained
    history = json.loads((run / "history.json").read_text())
    rows = (run / "metrics.csv").read_text().splitlines()
    header = rows[0].split(",")
    assert len(rows) == 1 + len(history) >= 3  # 2 epochs, or 3 after the resume test (same module fixture)
    assert {"epoch", "lr", "train_loss", "val_rel_l2", "samples_per_s"} <= set(header)
    for line, record in zip(rows[1:], history):
        cells = dict(zip(header, line.split(",")))
        assert float(cells["train_loss"]) == record["train_loss"] and float(cells["val_rel_l2"]) == record["val_rel_l2"]
    assert (run / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    events = EventAccumulator(str(run))
    events.Reload()
    losses = events.Scalars("train_loss")
    assert [e.step for e in losses] == [r["epoch"] for r in history]
    assert [e.value for e in losses] == pytest.approx([r["train_loss"] for r in history], rel=1e-6)
