"""``circuitop bench``: run the benchmark scripts of the source tree and print one table of ratios."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import operators

__all__ = ["register", "source_root", "run"]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="run every benchmark script (bench/) and print one table")
    p.add_argument("--quick", action="store_true", help="small sizes, for a fast check")
    p.add_argument("--only", nargs="+", metavar="NAME", help="benchmark modules to run, e.g. bench_scan")
    p.add_argument("--json", help="also write the rows to this JSON file")
    p.set_defaults(func=run)


def source_root() -> Path:
    """The checkout holding ``bench/`` (benchmarks ship with the source tree, not the wheel)."""
    root = Path(operators.__file__).resolve().parents[1]
    if not (root / "bench" / "__main__.py").is_file():
        raise FileNotFoundError(f"expected the benchmark scripts in {root / 'bench'}; run from a source checkout")
    return root


def run(args: argparse.Namespace) -> int:
    cmd = [sys.executable, "-m", "bench"] + (["--quick"] if args.quick else [])
    cmd += (["--only", *args.only] if args.only else []) + (["--json", args.json] if args.json else [])
    return subprocess.run(cmd, cwd=source_root(), check=False).returncode
