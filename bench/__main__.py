"""Run every benchmark script and print one table: ``python -m bench [--quick] [--only NAME ...]``.

Each ``bench/bench_<name>.py`` exposes ``run(quick=False) -> list[Row]``; a script that fails is
reported in the table (and makes the exit status non-zero) instead of stopping the others. A line on
stderr says when each benchmark starts and ends (with its wall time), and a warning, at the start and
under the table, when the machine is busy.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import pkgutil
import sys
import time
import traceback
from dataclasses import asdict, replace
from pathlib import Path

import torch

from bench._util import Row, busy_warning, print_table
from operators.provenance import PACKAGES, code_version

import bench


#: benchmark modules that run on their own, never with the others: the model table compiles every model
#: (about an hour on 2 cores; ``circuitop bench models``)
SEPARATE = ("bench_models",)
#: the packages each benchmark module measures (a result is on older code when one of their sources changed)
MEASURES = {"bench_darcy": ("pde_data",), "bench_solvers": ("pde_data",), "bench_scan": ("circuitop",),
            "bench_ltc": ("circuitop",), "bench_nac": ("circuitop", "evaluation"), "bench_metrics": ("evaluation",),
            "bench_operators": ("circuitop", "operators", "evaluation"), "bench_models": ("circuitop", "operators"),
            "bench_data": PACKAGES, "bench_generate": PACKAGES, "bench_trainer": PACKAGES, "bench_threads": PACKAGES}


def discover() -> list[str]:
    """Names of the benchmark modules (``bench_*``) run together, sorted."""
    return sorted(m.name for m in pkgutil.iter_modules(bench.__path__)
                  if m.name.startswith("bench_") and m.name not in SEPARATE)


def run_all(names: list[str], *, quick: bool) -> tuple[list[Row], list[str]]:
    """Run the named modules; return all rows and the names that failed."""
    rows, failed = [], []
    for i, name in enumerate(names, 1):
        _say(f"[{i}/{len(names)}] {name} ...")
        start = time.perf_counter()
        try:
            rows += run_one(name, quick=quick)
        except Exception as exc:  # noqa: BLE001 - report and continue with the others
            traceback.print_exc()
            rows.append(Row(name, "FAILED", float("nan"), "", f"{type(exc).__name__}: {exc}"))
            failed.append(name)
        seconds = time.perf_counter() - start
        rows.append(Row(name, "script wall time", seconds, "s"))
        _say(f"[{i}/{len(names)}] {name} {'FAILED' if name in failed else 'done'} in {seconds:.1f} s")
    return rows, failed


def run_one(name: str, *, quick: bool) -> list[Row]:
    """The rows of ``bench.<name>``, each row that does not say its thread count given the one it ran under
    (the module's own ``torch.set_num_threads`` calls set theirs on their rows)."""
    module = importlib.import_module(f"bench.{name}")
    threads = torch.get_num_threads()
    return [r if r.threads is not None else replace(r, threads=threads) for r in module.run(quick=quick)]


def _say(line: str) -> None:
    print(f"bench: {line}", file=sys.stderr, flush=True)


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
    busy = busy_warning()
    if busy:
        _say(busy)
    rows, failed = run_all(names, quick=args.quick)
    footer = [f"{line} ({when})" for line, when in ((busy, "at the start"), (busy_warning(), "at the end")) if line]
    title = f"circuitop benchmarks ({'quick' if args.quick else 'full'})" + (", busy machine" if footer else "")
    print_table(rows, title=title, footer=footer)
    if args.json:
        _write_json(args.json, rows, argv if argv is not None else sys.argv[1:], quick=args.quick, busy=footer,
                    modules=names)
    return 1 if failed else 0


def _write_json(path: Path, rows: list[Row], argv: list[str], *, quick: bool, busy: list[str],
                program: str = "python -m bench", modules: list[str] | None = None) -> None:
    """``{"command", "scale", "environment" (versions, cores, the commit and its sources' hashes), "measures",
    "busy", "rows"}``, atomically: what ``examples/results_tables.py`` renders into RESULTS.md (``program``: the
    command's first words; ``modules``: the benchmark modules run, by default the one ``program`` names;
    ``measures``: the packages they measure, :data:`MEASURES`)."""
    import platform

    from pde_data import atomic_path

    options = [a for a in argv if not a.startswith("--json") and a != str(path)]
    environment = {"python": platform.python_version(), "torch": torch.__version__, "cores": os.cpu_count(),
                   "omp_num_threads": os.environ.get("OMP_NUM_THREADS"), **code_version()}
    if torch.cuda.is_available():
        environment["gpu"] = torch.cuda.get_device_name()
    modules = modules if modules is not None else [program.split()[-1].removeprefix("bench.")]
    measures = [p for p in PACKAGES if any(p in MEASURES.get(m, PACKAGES) for m in modules)]
    payload = {"command": " ".join([program, *options]), "scale": "quick" if quick else "full",
               "environment": environment, "measures": measures, "busy": busy, "rows": [asdict(r) for r in rows]}
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(payload, indent=1, allow_nan=True))


if __name__ == "__main__":
    sys.exit(main())
