"""Run every benchmark script and print one table: ``python -m bench [--quick] [--only NAME ...]``.

Each ``bench/bench_<name>.py`` exposes ``run(quick=False) -> list[Row]``; a script that fails is
reported in the table (and makes the exit status non-zero) instead of stopping the others.
"""

from __future__ import annotations

import argparse
import importlib
import json
import pkgutil
import sys
import time
import traceback
from dataclasses import asdict
from pathlib import Path

from bench._util import Row, print_table

import bench


def discover() -> list[str]:
    """Names of the benchmark modules (``bench_*``), sorted."""
    return sorted(m.name for m in pkgutil.iter_modules(bench.__path__) if m.name.startswith("bench_"))


def run_all(names: list[str], *, quick: bool) -> tuple[list[Row], list[str]]:
    """Run the named modules; return all rows and the names that failed."""
    rows, failed = [], []
    for name in names:
        start = time.perf_counter()
        try:
            module = importlib.import_module(f"bench.{name}")
            rows += module.run(quick=quick)
            rows.append(Row(name, "script wall time", time.perf_counter() - start, "s"))
        except Exception as exc:  # noqa: BLE001 - report and continue with the others
            traceback.print_exc()
            rows.append(Row(name, "FAILED", float("nan"), "", f"{type(exc).__name__}: {exc}"))
            failed.append(name)
    return rows, failed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small sizes, for a fast check")
    parser.add_argument("--only", nargs="+", metavar="NAME", help=f"subset of {discover()}")
    parser.add_argument("--json", type=Path, help="also write the rows to this JSON file")
    args = parser.parse_args(argv)
    names = discover()
    if args.only:
        unknown = sorted(set(args.only) - set(names))
        if unknown:
            parser.error(f"unknown benchmarks {unknown}; expected some of {names}")
        names = [n for n in names if n in args.only]
    rows, failed = run_all(names, quick=args.quick)
    print_table(rows, title=f"circuitop benchmarks ({'quick' if args.quick else 'full'})")
    if args.json:
        from pde_data import atomic_path

        with atomic_path(args.json) as tmp:
            tmp.write_text(json.dumps([asdict(r) for r in rows], indent=2))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
