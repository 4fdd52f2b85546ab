"""The ``circuitop`` command run as a real subprocess from the repository root, one torch thread."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def run_cli(*args, timeout: int = 300) -> subprocess.CompletedProcess:
    """``python -m operators.cli ARGS`` (arguments as strings), output captured as text."""
    return subprocess.run([sys.executable, "-m", "operators.cli", *map(str, args)], cwd=ROOT, env=ENV,
                          capture_output=True, text=True, timeout=timeout)


def head_commit() -> str:
    """The commit the code's records should name: ``CIRCUITOP_COMMIT`` where set (a copy sent to a GPU machine,
    whose ``.git`` may be stale, names its commit so), else the checkout's HEAD."""
    return os.environ.get("CIRCUITOP_COMMIT") or subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()


def torchrun_beside_one_process(args, folder: Path, *, atol: float) -> tuple[dict, dict]:
    """Train ``args(out, *extra)`` (``train`` argument lists) under 2-process ``torchrun``, streaming with one
    loader worker per process, into ``folder/two``, and meanwhile in this process from memory into
    ``folder/one``; assert both end with the same weights (to ``rtol`` 1e-4, ``atol``: only the float
    summation order differs) and training losses, and return their ``last.pt`` states ``(one, two)``."""
    import pytest
    import torch

    from operators.cli import main
    from operators.training import load_checkpoint

    torchrun = Path(sys.executable).with_name("torchrun")
    # on the CPU (gloo) on every machine: a GPU machine would put both processes on cuda:0 and cuda:1
    ddp = subprocess.Popen([str(torchrun), "--standalone", "--nproc_per_node", "2", "-m", "operators.cli",
                            *args(folder / "two", "--cache", "stream", "--workers", "1", "--device", "cpu")], env=ENV,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # one process, same CLI entry point, meanwhile
    assert main(args(folder / "one", "--cache", "memory", "--device", "cpu")) == 0
    _, err = ddp.communicate(timeout=300)
    assert ddp.returncode == 0, err[-3000:]
    a, b = load_checkpoint(folder / "one" / "last.pt"), load_checkpoint(folder / "two" / "last.pt")
    for key, value in a["model"].items():
        torch.testing.assert_close(b["model"][key], value, rtol=1e-4, atol=atol)
    assert [r["train_loss"] for r in b["history"]] == pytest.approx([r["train_loss"] for r in a["history"]], rel=1e-4)
    return a, b


def evaluation_dir(run_dir, data, samples: str = "test") -> Path:
    """The folder ``evaluate --run RUN_DIR --data DATA`` writes by default."""
    return Path(run_dir) / "evaluations" / f"{Path(data).name}-{samples}"
