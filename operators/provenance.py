"""Which code made a number: the git commit of the source checkout, for results JSON and benchmark rows.

Example:
    >>> code_version()
    {'commit': '0c0b163…', 'dirty': False, 'circuitop': '0.1.0'}
"""

from __future__ import annotations

import os
import subprocess
from importlib import metadata
from pathlib import Path

__all__ = ["code_version"]

_ROOT = Path(__file__).resolve().parents[1]


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(["git", *args], cwd=_ROOT, capture_output=True, text=True, timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip()


def code_version() -> dict:
    """``{"commit", "dirty", "circuitop"}``: the checkout's HEAD commit (None outside a git checkout, e.g. an
    installed wheel), whether tracked files other than ``results/`` and Markdown differ from it (the number
    may come from uncommitted code), and the package version. A copy of a checkout sent elsewhere (a GPU
    machine, where its ``.git`` may be missing or stale) names its commit in ``CIRCUITOP_COMMIT``, which then
    wins; the copy is taken as that commit, clean."""
    if os.environ.get("CIRCUITOP_COMMIT"):
        return {"commit": os.environ["CIRCUITOP_COMMIT"], "dirty": False, "circuitop": _version()}
    commit = _git("rev-parse", "HEAD")
    # results and prose do not change what the code computes: a regenerated RESULTS.md is not "dirty" code
    changes = _git("status", "--porcelain", "--untracked-files=no", "--", ".", ":!results", ":!*.md") if commit else None
    return {"commit": commit, "dirty": bool(changes), "circuitop": _version()}


def _version() -> str | None:
    try:
        return metadata.version("circuitop")
    except metadata.PackageNotFoundError:
        return None
