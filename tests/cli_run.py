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
