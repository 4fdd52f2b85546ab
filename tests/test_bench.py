"""The benchmark entry point runs modules, prints one table and writes JSON (not a timed test)."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_bench_entry_point_runs_selected_modules(tmp_path):
    """Progress on stderr as each benchmark starts and ends; rows labelled with their thread count; no
    profiler log lines (bench_scan measures memory with torch's profiler)."""
    out = tmp_path / "rows.json"
    result = subprocess.run([sys.executable, "-m", "bench", "--quick", "--only", "bench_metrics", "bench_scan",
                             "--json", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=300,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stderr[-2000:]
    written = json.loads(out.read_text())
    assert written["command"] == "python -m bench --quick --only bench_metrics bench_scan" and written["scale"] == "quick"
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    assert written["environment"]["commit"] == head and isinstance(written["busy"], list)
    rows = written["rows"]
    assert {r["benchmark"] for r in rows} >= {"metrics", "bench_metrics", "bench_scan"}
    assert all(r["value"] > 0 for r in rows)
    assert "circuitop benchmarks (quick)" in result.stdout
    progress = [line for line in result.stderr.splitlines() if line.startswith("bench: [")]
    assert [line.split(" in ")[0] for line in progress] == [
        "bench: [1/2] bench_metrics ...", "bench: [1/2] bench_metrics done",
        "bench: [2/2] bench_scan ...", "bench: [2/2] bench_scan done"]
    assert float(progress[1].split(" in ")[1].removesuffix(" s")) > 0
    assert "USDT" not in result.stdout + result.stderr and "profiler_start" not in result.stdout + result.stderr
    timed = [r for r in rows if r["case"] != "script wall time"]
    assert all(r["threads"] == 1 for r in timed)  # OMP_NUM_THREADS=1: torch ran them on one thread
    assert "pdebench_metrics torch float32 20x40x64x64, 1 thread " in result.stdout


def test_a_busy_machine_is_flagged(monkeypatch):
    """A load average above the core count gives one warning line (printed at the start and under the table);
    a row's label says how many threads it ran on."""
    from bench._util import Row, busy_warning

    assert busy_warning(load=1.5, cores=2) is None
    warning = busy_warning(load=3.2, cores=2)
    assert warning.startswith("warning: the machine is busy (load average 3.20") and "unreliable" in warning
    monkeypatch.setattr(os, "getloadavg", lambda: (64.0, 1.0, 1.0))
    assert busy_warning() is not None
    assert Row("ns", "step", 1.0, "s", threads=2).label == "ns | step, 2 threads"
    assert Row("ns", "step", 1.0, "s").label == "ns | step"


def test_busy_warning_in_the_table(monkeypatch, capsys):
    import bench.__main__ as entry

    monkeypatch.setattr(os, "getloadavg", lambda: (64.0, 1.0, 1.0))
    assert entry.main(["--quick", "--only", "bench_darcy"]) == 0
    out, err = capsys.readouterr()
    assert "busy machine" in out.splitlines()[1] and out.count("warning: the machine is busy") == 2
    assert "warning: the machine is busy" in err.splitlines()[0]
    assert "darcy | direct FV solve 128^2 (splu), 1 thread " in out


def test_bench_entry_point_refuses_unknown_names():
    result = subprocess.run([sys.executable, "-m", "bench", "--only", "bench_nope"], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode != 0 and "unknown benchmarks ['bench_nope']" in result.stderr


def test_gpu_check_covers_every_model_against_float64_references(capsys, monkeypatch):
    """bench/gpu_check.py is ready for the first GPU: it covers every registered model, and compares float32
    work with float64 references, so on the CPU its checks measure real differences (the native float32
    kernels against torch's float64 formulations), pass, and catch a float32 path that is wrong by 1e-3.
    Without CUDA, ``--device cuda`` says so in one line and exits 1."""
    import torch

    import operators
    from bench import gpu_check

    assert set(gpu_check.MODELS) == set(operators.MODELS)
    assert gpu_check.main(["--device", "cpu"]) == 0
    assert "checks passed" in capsys.readouterr().out
    checks = gpu_check._model_checks("chonn_fno", *gpu_check.MODELS["chonn_fno"], "cpu")
    assert all(0 < c.difference <= c.tolerance for c in checks)  # not a copy compared with itself

    class Float32Bug(torch.nn.Module):  # right in float64, 0.1 % off in float32
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.ones(2, 3, 1, 1))

        def forward(self, x):
            y = (self.w * x.sum(1, keepdim=True)).sum(1, keepdim=True).expand(-1, 2, -1, -1)
            return y * (1.001 if y.dtype == torch.float32 else 1.0)

    monkeypatch.setattr(gpu_check.operators, "build", lambda *args, **kwargs: Float32Bug())
    failed = [c.name for c in gpu_check._model_checks("fno", {}, 2, "cpu") if not c.passed]
    assert "fno: forward" in failed  # (and the loss and gradients it feeds)
    import torch

    if not torch.cuda.is_available():
        assert gpu_check.main(["--device", "cuda"]) == 1
        assert "expected a CUDA device, found none" in capsys.readouterr().err
