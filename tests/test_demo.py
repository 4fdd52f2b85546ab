"""The main job (``make demo``) end to end at the smallest budget: a real subprocess, real files."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # end-to-end: real subprocesses (CI runs them)

ROOT = Path(__file__).resolve().parents[1]


def test_demo_writes_its_report_and_its_models_learn(tmp_path):
    """Every model beats the mean predictor on its training split (by a margin: 20 epochs take it to about half
    the mean predictor's rel. L2), and the report, metrics and plots are written."""
    args = ["--n-samples", "8", "--n-sim", "32", "--n-out", "16", "--t-final", "4", "--dt", "0.004",
            "--window", "2", "--rollout", "2", "--epochs", "20", "--width", "8", "--modes", "4", "--n-layers", "2"]
    result = subprocess.run([sys.executable, str(ROOT / "examples" / "demo.py"), "--out", str(tmp_path), *args],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert f"report written to {(tmp_path / 'report.md').resolve()}" in result.stdout
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert sorted(metrics["training_split"]) == sorted(metrics["results"]) == ["chonn_fno", "fno", "fno_host"]
    for name, fit in metrics["training_split"].items():
        assert fit["rel_l2"] <= 0.8 * fit["mean_predictor_rel_l2"], (name, fit)
        r = metrics["results"][name]["rollout"]
        assert len(r["per_step_rel_l2"]) == 2 and 0 < r["mean_rel_l2"] < 10
        assert (Path(metrics["results"][name]["out"]) / "fields.png").stat().st_size > 10_000
    assert (tmp_path / "per_step_error.png").is_file() and (tmp_path / "ns_demo.h5").is_file()
    report = (tmp_path / "report.md").read_text()
    assert "| mean per-step relative L2 |" in report and "| rel_l2_derivative |" in report
    assert "| training split: rel_l2 (mean predictor's) |" in report
