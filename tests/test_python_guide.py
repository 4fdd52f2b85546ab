"""``docs/python.md`` runs as written: its Python blocks, in order, as one script in a fresh folder (issue 43)."""

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def guide_script() -> str:
    """The guide's ```python blocks joined in order."""
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "docs" / "python.md").read_text(), flags=re.S)
    assert len(blocks) >= 6, "expected the guide's blocks: open, datasets, models, a loop, a run, the metrics"
    return "\n".join(blocks)


def test_the_python_guide_runs_as_written(tmp_path):
    (tmp_path / "guide.py").write_text(guide_script())
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), "MPLBACKEND": "Agg"}
    done = subprocess.run([sys.executable, "guide.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "netcdf {'sample': 40, 'x': 16, 'y': 16}" in done.stdout and "VRMSE" in done.stdout
    assert (tmp_path / "runs" / "guide" / "best.pt").is_file()
