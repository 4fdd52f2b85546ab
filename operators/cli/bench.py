"""``circuitop bench``: run the benchmark scripts of the source tree and print one table of ratios;
``circuitop bench models``: the table of what every registry model costs (``bench/bench_models.py``)."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import operators

__all__ = ["register", "source_root", "run"]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="run every benchmark script (bench/) and print one table; "
                       "'bench models': every model's parameters, memory and times, eager and compiled")
    p.add_argument("table", nargs="?", choices=["models"],
                   help="models: parameters, peak memory of a training step, forward and forward+backward "
                   "times eager and under torch.compile, the CKB's share, for every registry model")
    p.add_argument("--quick", action="store_true", help="small sizes, for a fast check")
    p.add_argument("--only", nargs="+", metavar="NAME",
                   help="benchmark modules to run, e.g. bench_scan (with 'models': registry models, e.g. fno)")
    p.add_argument("--json", help="also write the rows to this JSON file")
    p.set_defaults(func=run)


def source_root() -> Path:
    """The checkout holding ``bench/`` (benchmarks ship with the source tree, not the wheel)."""
    root = Path(operators.__file__).resolve().parents[1]
    if not (root / "bench" / "__main__.py").is_file():
        raise FileNotFoundError(f"expected the benchmark scripts in {root / 'bench'}; run from a source checkout")
    return root


def run(args: argparse.Namespace) -> int:
    """Run the benchmarks in the source checkout (``--json``: relative to the current folder)."""
    module = "bench.bench_models" if args.table == "models" else "bench"
    cmd = [sys.executable, "-m", module] + (["--quick"] if args.quick else [])
    cmd += (["--only", *args.only] if args.only else []) + (["--json", str(Path(args.json).resolve())] if args.json else [])
    return subprocess.run(cmd, cwd=source_root(), check=False).returncode
