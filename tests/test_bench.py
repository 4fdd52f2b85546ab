"""The benchmark entry point runs modules, prints one table and writes JSON (not a timed test)."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_bench_entry_point_runs_selected_modules(tmp_path):
    out = tmp_path / "rows.json"
    result = subprocess.run([sys.executable, "-m", "bench", "--quick", "--only", "bench_metrics", "--json", str(out)],
                            cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    rows = json.loads(out.read_text())
    assert {r["benchmark"] for r in rows} == {"metrics", "bench_metrics"}
    assert all(r["value"] > 0 for r in rows)
    assert "circuitop benchmarks (quick)" in result.stdout


def test_bench_entry_point_refuses_unknown_names():
    result = subprocess.run([sys.executable, "-m", "bench", "--only", "bench_nope"], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode != 0 and "unknown benchmarks ['bench_nope']" in result.stderr


def test_gpu_check_covers_every_model_and_runs_against_a_cpu_copy(capsys):
    """bench/gpu_check.py is ready for the first GPU: it covers every registered model, and its checks
    pass with ``--device cpu`` (a second CPU copy: differences 0). Without CUDA, ``--device cuda``
    says so in one line and exits 1."""
    import operators
    from bench import gpu_check

    assert set(gpu_check.MODELS) == set(operators.MODELS)
    assert gpu_check.main(["--device", "cpu"]) == 0
    assert "checks passed" in capsys.readouterr().out
    import torch

    if not torch.cuda.is_available():
        assert gpu_check.main(["--device", "cuda"]) == 1
        assert "expected a CUDA device, found none" in capsys.readouterr().err
