"""Smoke tests of the example scripts: each runs with ``--smoke`` (a few samples, one epoch, tiny grids)
in a subprocess and must write its results JSON and its plots."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"

#: script -> the plots it must write (besides results.json)
SCRIPTS = {
    "darcy.py": ["metrics.png", "gain.png", "fields_CHONN.png"],
    "poisson_order_ablation.py": ["orders.png", "fields_order1.png"],
    "nac_sequences.py": ["metrics.png"],
    "navier_stokes_rollout.py": ["rollout.png", "windows.png", "fields_CHONN.png"],
    "shallow_water.py": ["metrics.png", "gain.png", "rollout.png", "fields_CHONN.png"],
    "order_benchmark.py": ["target_T1.png", "target_T2.png", "derivative_ratio.png", "scaling.png"],
}


def _run(script: str, *args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, str(EXAMPLES / script), *args]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_example_smoke(script: str, tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = _run(script, "--smoke", "--threads", "1", "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads((out / "results.json").read_text())
    assert results["scale"] == "smoke"
    assert results["results"]
    for name in SCRIPTS[script]:
        assert (out / name).stat().st_size > 0, f"{script} did not write {name}"


def test_example_options_reject_bad_values(capsys) -> None:
    """The shared parser (every example uses it) names the bad value; checked in-process, no subprocess."""
    sys.path.insert(0, str(EXAMPLES))
    try:
        import _common
    finally:
        sys.path.remove(str(EXAMPLES))
    parser = _common.parser("test")
    for bad in (["--epochs", "0"], ["--threads", "x"], ["--quick", "--smoke"]):
        with pytest.raises(SystemExit) as exc:
            parser.parse_args(bad)
        assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "expected a positive integer, found 0" in err and "found 'x'" in err and "not allowed with" in err


def test_an_example_runs_again_into_its_own_folder(tmp_path: Path) -> None:
    """A second run of an example replaces its earlier runs (only the files a run writes) instead of
    being refused by the run folders it left."""
    out = tmp_path / "out"
    for _ in range(2):
        proc = _run("darcy.py", "--smoke", "--threads", "1", "--out", str(out))
        assert proc.returncode == 0, proc.stderr[-3000:]
