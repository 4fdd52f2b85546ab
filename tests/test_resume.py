"""kill -9 during ``circuitop train`` (streaming, two loader workers), then ``--resume``: the final weights
equal an uninterrupted run's."""

import os
import signal
import subprocess
import sys
import threading
import time

import torch

from operators.cli import main
from operators.training import load_checkpoint
from test_trainer import write_poisson

EPOCHS = 6
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def _cmd(data, out, *extra):
    return [sys.executable, "-m", "operators.cli", "train", "--data", str(data), "--model", "fno", "--out", str(out),
            "--config", "n_modes=4", "width=8", "n_layers=2", "--input", "f", "--target", "u", "--split", "32,8,0",
            "--epochs", str(EPOCHS), "--batch-size", "8", "--scheduler", "step", "--step-size", "3",
            "--threads", "1", "--no-progress", "--cache", "stream", "--workers", "2",
            "--device", "cpu", *extra]  # bit-identical resume is a CPU property (GPU kernels may use atomics)


def _kill_after_first_checkpoint(cmd, last, timeout=240):
    proc = subprocess.Popen(cmd, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + timeout
    while not last.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    return proc.returncode


def test_kill_9_then_resume_equals_uninterrupted(tmp_path):
    data = write_poisson(tmp_path / "p.nc", n_samples=40)
    killed = {}
    killer = threading.Thread(target=lambda: killed.update(
        rc=_kill_after_first_checkpoint(_cmd(data, tmp_path / "cut"), tmp_path / "cut" / "last.pt")))
    killer.start()
    # meanwhile the uninterrupted run, through the same CLI entry point in this process
    assert main(_cmd(data, tmp_path / "full")[3:]) == 0
    killer.join(timeout=300)
    assert killed["rc"] == -signal.SIGKILL, "the run finished before it could be killed"
    killed_at = load_checkpoint(tmp_path / "cut" / "last.pt")["epoch"]
    assert 1 <= killed_at < EPOCHS
    resumed = subprocess.run(_cmd(data, tmp_path / "cut", "--resume"), env=ENV, capture_output=True, text=True,
                             timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    a, b = (load_checkpoint(tmp_path / d / "last.pt") for d in ("full", "cut"))
    assert a["epoch"] == b["epoch"] == EPOCHS
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])
    assert a["scheduler"] == b["scheduler"]
    assert [r["train_loss"] for r in a["history"]] == [r["train_loss"] for r in b["history"]]
