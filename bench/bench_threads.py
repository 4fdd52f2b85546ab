"""``--threads auto`` (every command's default) against fixed thread counts, on a quiet and on a busy machine.

Each measurement is a whole ``circuitop train`` process (Darcy 16², ``fno`` width 32, 8 modes, batches of 32,
``--epochs`` epochs, data cached in memory) with ``OMP_NUM_THREADS`` unset, so that ``auto`` decides: at
``--threads 1``, at ``--threads C`` (C = the cores this process may use: torch's default, what a run without
``--threads`` used before ``auto``), and at the default ``auto``. Busy: a second training (the same command at
its own defaults) runs beside them the whole time. Rounds interleave the three; the rows give the median over
rounds of each process's wall time and the ratios side by side: ``auto`` over the best fixed count (the claim:
at most 1.2 on a busy machine) and over torch's default (the claim: at most 1.0 on a quiet one, within noise).

Run: ``python -m bench.bench_threads [--quick]`` (quick: 2 epochs, 2 rounds; default: 4 epochs, 3 rounds).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pde_data
from bench._util import Row, print_table
from operators.threads import usable_cores

NAME = "threads"
ROOT = Path(__file__).resolve().parents[1]


def _train(data: Path, out: Path, epochs: int, threads: str | None) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    args = [sys.executable, "-m", "operators.cli", "train", "--data", str(data), "--model", "fno", "--epochs",
            str(epochs), "--batch-size", "32", "--config", "width=32", "n_modes=8", "--no-progress", "--cache",
            "memory", "--out", str(out), "--overwrite"] + ([] if threads is None else ["--threads", threads])
    return subprocess.Popen(args, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _seconds(data: Path, out: Path, epochs: int, threads: str | None) -> tuple[float, str]:
    start = time.perf_counter()
    proc = _train(data, out, epochs, threads)
    _, err = proc.communicate()
    if proc.returncode:
        raise RuntimeError(f"train --threads {threads}: {err[-500:]}")
    chosen = next((line for line in err.splitlines() if line.startswith("threads: auto")), "")
    return time.perf_counter() - start, chosen


def measure(folder: Path, *, epochs: int, rounds: int, busy: bool) -> tuple[dict[str, float], list[str]]:
    """Median wall seconds per setting (``1``, ``C``, ``auto``) and the lines ``auto`` said."""
    data = pde_data.save(pde_data.generate_darcy(400, n_grid=16, seed=0), folder / "darcy16.nc")
    cores = str(usable_cores())
    background = _train(data, folder / "beside", 10_000, None) if busy else None
    times: dict[str, list[float]] = {"1": [], cores: [], "auto": []}
    said = []
    try:
        for _ in range(rounds):
            for setting in times:
                seconds, line = _seconds(data, folder / f"run-{setting}", epochs, None if setting == "auto" else setting)
                times[setting].append(seconds)
                said += [line] if line else []
    finally:
        if background is not None:
            background.kill()
            background.wait()
    return {k: statistics.median(v) for k, v in times.items()}, said


def run(quick: bool = False) -> list[Row]:
    """The rows: ``auto`` over the best fixed count and over torch's default, quiet then busy."""
    epochs, rounds = (2, 2) if quick else (4, 3)
    rows, cores = [], str(usable_cores())
    for busy in (False, True):
        with tempfile.TemporaryDirectory(prefix="bench-threads-") as tmp:
            t, said = measure(Path(tmp), epochs=epochs, rounds=rounds, busy=busy)
        where = "busy (a second training beside)" if busy else "quiet"
        chosen = [line.split()[3] for line in said]  # "threads: auto chose N (...)"
        detail = f"1 thread {t['1']:.1f} s, {cores} threads {t[cores]:.1f} s, auto {t['auto']:.1f} s; " + \
            (f"auto chose {', '.join(chosen)} in its rounds; last: {said[-1]}" if said else "auto kept OMP_NUM_THREADS")
        rows.append(Row(NAME, f"{where}: auto / best fixed", t["auto"] / min(t["1"], t[cores]), "x", detail))
        rows.append(Row(NAME, f"{where}: auto / torch's default ({cores})", t["auto"] / t[cores], "x"))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", type=Path, help="also write the rows to this JSON file")
    args = parser.parse_args()
    rows = run(args.quick)
    print_table(rows, "threads: auto against fixed counts (whole train processes)")
    if args.json:
        from bench.__main__ import _write_json

        _write_json(args.json, rows, sys.argv[1:], quick=args.quick, busy=[], program="python -m bench.bench_threads")


if __name__ == "__main__":
    main()
