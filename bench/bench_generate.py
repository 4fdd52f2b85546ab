"""Generation at scale: Navier–Stokes on Dask with 1 and 2 workers against the plain loop, and the peak memory of
``circuitop generate ns`` at two set sizes.

Three timings of the same set, whole calls, interleaved over ``rounds`` (these machines are noisy):

- the plain loop: :func:`pde_data.write_samples` in this process at 1 torch thread (what ``generate ns
  --out FILE`` runs), streaming one file;
- :func:`pde_data.generate_sharded` with a local Dask cluster of 1 worker, then of 2 workers (one torch
  thread each, 8 shards), cluster start-up included.

Targets: 2 workers ≥ 1.7× 1 worker on the 2 cores here; Dask's overhead at 1 worker within 10 % of the plain
loop. Then ``circuitop generate ns`` runs as a subprocess at two ``--n`` (:data:`MEMORY_SIZES`), its process
tree's peak RSS sampled from ``/proc`` (bench/_memory.py): memory holds one block of samples, so the peak
should be flat in ``--n`` (target: within 10 %). The samples are large enough for that target to tell: the
larger set's data is at least :data:`SET_OVER_BASELINE` × the smaller run's peak (the baseline), so a writer
that kept the samples would exceed 1.1 several times over; where it is not, the ratio row is NaN (not
measured), never a pass.

Last, training on samples made as it goes (``circuitop train --generate ns``, each epoch's samples made in turn,
``--workers 0``): seconds per epoch in one process against ``torchrun`` with 2 processes, each making half of
every epoch (:class:`operators.training.online.Stream`), interleaved over the same rounds; the epochs after the
first (epoch 1's samples are made before it, to fit the normalizers).

    python -m bench.bench_generate [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import xarray as xr

from bench._memory import run_sampled
from bench._util import Row, print_table
from pde_data import GenerationSpec, generate_sharded, write_samples

__all__ = ["run", "MEMORY_SIZES", "SET_OVER_BASELINE"]

NAME = "generate"
#: quick -> (small --n, large --n, records per sample) of the memory rows, at 64² (64² x records float32 a sample)
MEMORY_SIZES = {True: (32, 512, 50), False: (64, 1024, 40)}
#: the larger set's data over the baseline peak RSS below which "flat in --n" cannot tell a writer that keeps
#: the samples (that would add the whole set, many times the 10 % the target allows)
SET_OVER_BASELINE = 0.5


def _spec(quick: bool) -> GenerationSpec:
    """A Navier–Stokes set in blocks of 2: 32 samples at 64² to t = 30, about 40 s of one core, so that the
    cluster's start (about 3.5 s here) is a small part, as in any set worth sharding (quick: 16 at 32²)."""
    if quick:
        return GenerationSpec("ns", 16, 0, {"n_sim": 32, "n_out": 32, "t_final": 1.0, "dt": 1e-2, "batch_size": 2})
    return GenerationSpec("ns", 32, 0, {"n_sim": 64, "n_out": 64, "t_final": 30.0, "dt": 2e-3, "batch_size": 2})


def _timings(spec: GenerationSpec, rounds: int, tmp: Path) -> dict[str, list[float]]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)

    def plain():
        write_samples(spec, range(spec.n), tmp / "plain.nc", device="cpu")

    def dask(workers: int):
        def call():
            shutil.rmtree(tmp / "set", ignore_errors=True)
            generate_sharded(spec, tmp / "set", shards=8, workers=workers, device="cpu")
        return call

    calls = {"plain loop": plain, "Dask, 1 worker": dask(1), "Dask, 2 workers": dask(2)}
    times: dict[str, list[float]] = {name: [] for name in calls}
    try:
        for _ in range(rounds):
            for name, call in calls.items():
                start = time.perf_counter()
                call()
                times[name].append(time.perf_counter() - start)
    finally:
        torch.set_num_threads(threads)
    return times


def _online_args(quick: bool) -> list[str]:
    """``train`` options of the online rows: Navier–Stokes made as it trains (16 samples an epoch, blocks of 4), a
    small FNO, 3 epochs."""
    sim = ["n_sim=32", "n_out=16", "t_final=1"] if quick else ["n_sim=64", "n_out=32", "t_final=5"]
    return ["--generate", "ns", "--gen", *sim, "n_records=4", "batch_size=4", "--window", "1", "--periodic",
            "--samples-per-epoch",
            "16", "--model", "fno", "--config", "width=8", "n_modes=4", "n_layers=2", "--epochs", "3", "--workers", "0",
            "--device", "cpu", "--threads", "1", "--no-progress"]


def _online(quick: bool, rounds: int, tmp: Path) -> dict[str, list[float]]:
    """Mean seconds per epoch after the first of ``train --generate`` in one process and under 2-process
    ``torchrun``, ``rounds`` times each, interleaved."""
    torchrun = str(Path(sys.executable).with_name("torchrun"))
    if not Path(torchrun).exists():
        raise FileNotFoundError(f"expected torch's torchrun beside the interpreter, found no {torchrun}")
    commands = {"online epoch, 1 process": [sys.executable],
                "online epoch, torchrun 2 processes": [torchrun, "--standalone", "--nproc_per_node", "2"]}
    times: dict[str, list[float]] = {name: [] for name in commands}
    for r in range(rounds):
        for k, (name, command) in enumerate(commands.items()):
            out = tmp / f"online_{r}_{k}"
            done = subprocess.run([*command, "-m", "operators.cli", "train", *_online_args(quick), "--out", str(out)],
                                  capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
            if done.returncode:
                raise RuntimeError(f"{name} failed: {done.stderr[-500:]}")
            history = json.loads((out / "history.json").read_text())
            times[name].append(statistics.mean(epoch["epoch_s"] for epoch in history[1:]))
    return times


def _range(values: list[float]) -> str:
    return f"range {min(values):.3g}-{max(values):.3g} over {len(values)} rounds"


def _memory(quick: bool, tmp: Path, *, launcher: list[str] | None = None) -> dict[int, tuple[float, float]]:
    """``{n: (peak RSS MB of the generate ns process tree, MB of the set's data)}`` at the two ``--n`` of
    :data:`MEMORY_SIZES`; ``launcher``: the command before ``generate`` (default: this interpreter's
    ``-m operators.cli``)."""
    small, large, records = MEMORY_SIZES[quick]
    launcher = launcher or [sys.executable, "-m", "operators.cli"]
    found = {}
    for n in (small, large):
        out = tmp / f"ns{n}.nc"
        cmd = [*launcher, "generate", "ns", "--n", str(n), "--n-sim", "64", "--n-out", "64", "--t-final", "1",
               "--records", str(records), "--dt", "5e-3", "--batch-size", "8", "--device", "cpu", "--out", str(out),
               "--overwrite"]
        peak = run_sampled(cmd, log=tmp / "generate.log", env={**os.environ, "OMP_NUM_THREADS": "1"})
        if peak.returncode:
            raise RuntimeError(f"generate ns --n {n} failed: {(tmp / 'generate.log').read_text()[-500:]}")
        with xr.open_dataset(out) as ds:
            found[n] = (peak.rss / 2**20, ds.nbytes / 2**20)
        out.unlink()
    return found


def _memory_rows(peaks: dict[int, tuple[float, float]], records: int) -> list[Row]:
    """The peak of each ``--n`` and their ratio, NaN where the larger set is too small to tell (see the docstring)."""
    (small, (base, _)), (large, (peak, data)) = sorted(peaks.items())
    rows = [Row(NAME, f"generate ns --n {n} peak RSS", mb, "MB",
                f"process tree, 64² x {records} frames, blocks of 8; the set's data {size:.0f} MB")
            for n, (mb, size) in peaks.items()]
    share = data / base
    sizes = (f"{large // small}x the samples; the --n {large} set's data is {data:.0f} MB, {share:.2f}x the --n "
             f"{small} peak of {base:.0f} MB")
    if share < SET_OVER_BASELINE:
        rows.append(Row(NAME, f"peak RSS flat in --n: --n {large} / --n {small}", float("nan"), "x",
                        f"{sizes}: under {SET_OVER_BASELINE:g}x, too small to tell a writer that keeps the samples"))
    else:
        rows.append(Row(NAME, f"peak RSS flat in --n: --n {large} / --n {small}", peak / base, "x",
                        f"{sizes}: a writer that kept them would reach at least {1 + share:.2g}x; flat = 1, target <= 1.1"))
    return rows


def run(quick: bool = False) -> list[Row]:
    spec = _spec(quick)
    with tempfile.TemporaryDirectory(prefix="bench_generate_") as folder:
        tmp = Path(folder)
        times = _timings(spec, 2, tmp)
        peaks = _memory(quick, tmp)
        online = _online(quick, 2, tmp)
    best = {name: min(t) for name, t in times.items()}
    p = spec.complete().params
    detail = f"ns {spec.n} samples at {p['n_sim']}², t {p['t_final']}, dt {p['dt']}, 8 shards, 1 thread per process"
    rows = [Row(NAME, name, seconds, "s", f"{detail}; {_range(times[name])}", threads=1) for name, seconds in best.items()]
    speedups = [a / b for a, b in zip(times["Dask, 1 worker"], times["Dask, 2 workers"])]
    overheads = [b / a for a, b in zip(times["plain loop"], times["Dask, 1 worker"])]
    rows += [Row(NAME, "Dask 2 workers vs 1 (speed-up)", best["Dask, 1 worker"] / best["Dask, 2 workers"], "x",
                 f"best of each; per round {min(speedups):.3g}-{max(speedups):.3g}; target >= 1.7"),
             Row(NAME, "Dask 1 worker / plain loop (time)", best["Dask, 1 worker"] / best["plain loop"], "x",
                 f"best of each; per round {min(overheads):.3g}-{max(overheads):.3g}; target <= 1.1")]
    rows += _memory_rows(peaks, MEMORY_SIZES[quick][2])
    rows += [Row(NAME, name, min(t), "s", f"ns 16 samples an epoch, blocks of 4, fno width 8; {_range(t)}", threads=1)
             for name, t in online.items()]
    one, two = online.values()
    shared = [a / b for a, b in zip(one, two)]
    rows.append(Row(NAME, "online epoch, torchrun 2 processes vs 1 (speed-up)", min(one) / min(two), "x",
                    f"best of each; per round {min(shared):.3g}-{max(shared):.3g}; 2 cores: at most 2"))
    return rows


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    print_table(run(quick=parser.parse_args().quick), "generation on Dask")
