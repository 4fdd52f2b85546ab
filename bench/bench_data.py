"""Streaming data: training memory and loader throughput on PDEBench 2D-CFD files of ~1 GB and ≥ 4 GB.

For each file size the script writes a PDEBench ``cfd``-layout HDF5 file (``density``, ``pressure``,
``Vx``, ``Vy``: float32 ``(N, 21, X, Y)``, h5py chunks ``(1, 1, X, Y)``, no compression; cell-centre
``x``/``y-coordinate``, ``t-coordinate`` (T+1,), root attrs ``eta``, ``zeta``, ``M``) sample by sample
(smooth random fields: a few travelling sines with random phases plus 1 % noise) into a temporary
folder, then measures, in this order:

1. raw h5py reads in file order: every sample's 4 full ``(T, X, Y)`` arrays into a preallocated
   array (samples/s, MB/s); then, like for like with a window loader, every window's ``m + 1 = 11``
   frames of the 4 variables (one slab read per variable, windows/s), into one reused buffer and into
   a new array per batch (what a loader hands out; on this VM first-touching new memory costs more
   than the read itself);
2. the streaming loader (``make_loaders`` of a window task, ``loading.cache="stream"``, default workers) over
   one epoch of the training split (summing each batch's inputs touches it), windows/s and
   trajectory-equivalents/s (windows/s ÷ ``T − m`` windows per sample), as ratios to 1.;
3. on the smallest file only, the loader at the disk's speed (``--disk-speed`` runs this phase alone):
   ``--repeats`` rounds (default 3), each running every reader in turn over the first 820 windows (A, B,
   A, B; ratios are taken within a round, and each row gives the median and range): raw h5py windows in
   file order (h5py's 1 MiB chunk cache: 10 of a window's 11 frames come from it, read for the window
   before), the same plus one copy of every window, raw windows in the training loader's shuffled epoch
   order (chunk cache off, as the loader reads plain chunks), the same plus one copy (the bound: no
   loader that shuffles and must copy its reads into batch tensors can be faster), and the training
   loader at 0, 1 and 2 workers (40 batches after the first; x and y normalized in place; the model is
   trivial: ``x.sum()``); each over raw file order (target >= 0.8) and the loaders over the bound.
   Measured on the 1 GB file (182 x 21 x 128², a 2-core VM shared with other jobs, one torch thread per
   process): the bound runs at 0.51x (0.49-0.53) of raw file order, so 0.8x is out of reach of any
   loader that shuffles here: the order alone costs ~0.55x (no chunk-cache hits: every frame of a
   window comes from the page cache again), the copy another ~10 %. The loader reached 0.27x
   (0.16-0.33) at 0 workers, ~0.5x of the bound: the rest is work the bound does not do (the NaN
   check, the normalizer's two in-place passes over x and y, the model's sum). Workers cannot overlap
   reading with training on 2 cores shared with the trainer: 0.21x (0.21-0.22) at 1, 0.20x at 2.
4. on the smallest file only, the same loop as 2 with ``cache="memory"`` (the pass filling the cache timed
   apart from the epoch);
5. one epoch of a small FNO (``--window 10``) through ``python -m operators.cli train --cache stream``
   in a subprocess whose whole process tree (CLI + DataLoader workers) is sampled every 0.1 s: peaks of
   the summed RSS and of the summed PSS, the epoch's time and samples/s (``history.json``).

Then the ratio of the peaks (largest file / smallest; target ≤ 1.2, and each peak ≤ 1.5 GB).

Last, a file in The Well's format (450 MB: 23 trajectories × 101 frames × 128² × 3 channels; quick:
8 × 21 × 64²): our streaming loader against The Well's ``WellDataset`` in a torch ``DataLoader``, same
windows (4 → 1), batch (16) and workers, one shuffled epoch each (target: ours ≥ 2× theirs). Needs
``the_well`` (``pip install --no-deps the-well einops``: it pins an old fsspec and neuraloperator); the
row says "not run" without it.

Page cache: dropping the OS caches needs root. The files are read right after being written, so they
are likely in the page cache: each Row detail gives the fraction of the file that was cached when the
phase started (``mincore``). ``--evict`` asks the kernel to drop the file's pages before every phase
(``posix_fadvise(DONTNEED)``, advisory: the detail shows how much stayed) for disk-bound numbers.

Everything written (data files, run folders) is deleted in a ``finally``.

Run: ``python -m bench.bench_data [--quick] [--tmp DIR] [--json OUT] [--sizes-gb 1 4] [--evict]
[--disk-speed] [--repeats N]``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np

from bench._memory import cached_fraction, evict, run_sampled
from bench._util import Row, print_table

__all__ = ["run", "write_cfd", "Sizes"]

NAME = "data"
#: the rows of the HTTP and Zarr phase (``--remote``), a benchmark of their own in RESULTS.md
REMOTE = "data_remote"
VARIABLES = ("density", "pressure", "Vx", "Vy")
WINDOW = 10  # m: given frames
BATCH = 20
MB = 2**20
PEAK_TARGET_MB = 1.5 * 1024  # "at most 1.5 GB"
REPO = Path(__file__).resolve().parents[1]
#: small FNO of the memory run (``--config``)
FNO_CONFIG = ("width=8", "n_modes=8", "n_layers=2")


@dataclass(frozen=True)
class Sizes:
    """One file: ``n`` samples of ``t`` frames on an ``x × x`` grid."""

    n: int
    t: int = 21
    x: int = 128

    @property
    def sample_bytes(self) -> int:
        return len(VARIABLES) * self.t * self.x * self.x * 4

    @property
    def nbytes(self) -> int:
        return self.n * self.sample_bytes

    @property
    def windows_per_sample(self) -> int:
        return self.t - WINDOW  # horizon 1, stride 1

    @classmethod
    def for_gb(cls, gb: float, *, t: int = 21, x: int = 128) -> "Sizes":
        """The fewest samples holding at least ``gb`` × 10⁹ bytes of data."""
        return cls(max(8, math.ceil(gb * 1e9 / cls(1, t, x).sample_bytes)), t, x)

    def label(self) -> str:
        return f"{self.nbytes / 1e9:.2g} GB ({self.n}x{self.t}x{self.x}^2)"


# -- writing ---------------------------------------------------------------------------------------
def _fields(rng: np.random.Generator, out: np.ndarray, axis: np.ndarray, t: np.ndarray, modes: int = 3) -> None:
    """Fill ``out`` (V, T, X, Y) with travelling sines of random wavenumbers/phases plus 1 % noise."""
    rng.standard_normal(dtype=np.float32, out=out)
    out *= 0.01
    for v in range(out.shape[0]):
        for _ in range(modes):
            kx, ky = rng.integers(1, 4, size=2)
            amp, phase, omega = rng.uniform(0.1, 0.3), rng.uniform(0, 2 * np.pi), rng.uniform(1.0, 4.0) * np.pi
            ax = 2 * np.pi * kx * axis[None, :] + (phase + omega * t)[:, None]  # (T, X)
            ay = 2 * np.pi * ky * axis  # (Y,)
            # sin(ax + ay) = sin(ax) cos(ay) + cos(ax) sin(ay), as two outer products
            s, c = (amp * np.sin(ax)).astype(np.float32), (amp * np.cos(ax)).astype(np.float32)
            out[v] += s[:, :, None] * np.cos(ay).astype(np.float32)[None, None, :]
            out[v] += c[:, :, None] * np.sin(ay).astype(np.float32)[None, None, :]
    out[:2] += 1.0  # density, pressure positive


def write_cfd(path: str | os.PathLike, sizes: Sizes, *, seed: int = 0) -> float:
    """Write a PDEBench 2D-CFD-layout file one sample at a time (flushed and fsynced); returns seconds."""
    start = time.perf_counter()
    rng = np.random.default_rng(seed)
    axis = (np.arange(sizes.x) + 0.5) / sizes.x
    t = np.linspace(0.0, 1.0, sizes.t + 1)
    buf = np.empty((len(VARIABLES), sizes.t, sizes.x, sizes.x), dtype=np.float32)
    with h5py.File(path, "w") as f:
        dsets = [f.create_dataset(name, shape=(sizes.n, sizes.t, sizes.x, sizes.x), dtype=np.float32,
                                  chunks=(1, 1, sizes.x, sizes.x)) for name in VARIABLES]
        f["x-coordinate"] = axis.astype(np.float32)
        f["y-coordinate"] = axis.astype(np.float32)
        f["t-coordinate"] = t.astype(np.float32)
        f.attrs.update({"eta": 0.1, "zeta": 0.1, "M": 1.0})
        for i in range(sizes.n):
            _fields(rng, buf, axis, t[:-1])
            for v, dset in enumerate(dsets):
                dset[i] = buf[v]
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return time.perf_counter() - start


def _check_disk(folder: Path, need: int) -> None:
    free = shutil.disk_usage(folder).free
    if free < need:
        raise RuntimeError(f"bench_data: expected at least {need / 1e9:.2f} GB free in {folder} for the data file "
                           f"and the run folders; found {free / 1e9:.2f} GB free (pass --tmp DIR elsewhere)")


# -- measurements ----------------------------------------------------------------------------------
def _cache_note(path: Path, evicting: bool) -> str:
    if evicting:
        evict(path)
    frac = cached_fraction(path)
    how = "evicted with posix_fadvise(DONTNEED) first" if evicting else "file just written, not evicted"
    return f"{how}: {100 * frac:.0f} % in page cache at start"


def _raw_samples(path: Path, sizes: Sizes) -> tuple[float, int]:
    """Seconds to read every sample's 4 full (T, X, Y) arrays in file order; samples read."""
    buf = np.empty((len(VARIABLES), sizes.t, sizes.x, sizes.x), dtype=np.float32)
    with h5py.File(path, "r") as f:
        dsets = [f[name] for name in VARIABLES]
        start = time.perf_counter()
        for i in range(sizes.n):
            for v, d in enumerate(dsets):
                d.read_direct(buf, np.s_[i], np.s_[v])
        return time.perf_counter() - start, sizes.n


def _raw_windows(path: Path, sizes: Sizes) -> tuple[float, int]:
    """Seconds to read every window's m + 1 frames of the 4 variables (one slab per variable); windows."""
    length = WINDOW + 1
    buf = np.empty((len(VARIABLES), length, sizes.x, sizes.x), dtype=np.float32)
    with h5py.File(path, "r") as f:
        dsets = [f[name] for name in VARIABLES]
        start = time.perf_counter()
        for i in range(sizes.n):
            for t0 in range(sizes.windows_per_sample):
                for v, d in enumerate(dsets):
                    d.read_direct(buf, np.s_[i, t0:t0 + length], np.s_[v])
        return time.perf_counter() - start, sizes.n * sizes.windows_per_sample


def _raw_windows_fresh(path: Path, sizes: Sizes) -> tuple[float, int]:
    """As :func:`_raw_windows`, but each batch of ``BATCH`` windows goes into a newly allocated array (as a
    loader must hand out new batches): the cost of first-touching fresh memory (page faults) included."""
    length = WINDOW + 1
    pairs = [(i, t0) for i in range(sizes.n) for t0 in range(sizes.windows_per_sample)]
    with h5py.File(path, "r") as f:
        dsets = [f[name] for name in VARIABLES]
        start = time.perf_counter()
        for b in range(0, len(pairs), BATCH):
            buf = np.empty((BATCH, len(VARIABLES), length, sizes.x, sizes.x), dtype=np.float32)
            for j, (i, t0) in enumerate(pairs[b:b + BATCH]):
                for v, d in enumerate(dsets):
                    d.read_direct(buf, np.s_[i, t0:t0 + length], np.s_[j, v])
        return time.perf_counter() - start, len(pairs)


def _split(n: int) -> tuple[int, int, int]:
    """Nearly everything trains: ``(n - 4, 2, 2)``."""
    return n - 4, 2, 2


def _window_task(source, *, window: int, sizes: tuple[int, int, int], cache: str, workers: int):
    """The task of a window run over ``source`` (a :class:`pde_data.Source`; an FNO's, which the loaders
    never use) and the seconds of its normalizer fit."""
    from operators.training import DataSpec, LoadingSpec, ModelSpec, RunSpec, TaskSpec, make_task, resolve

    spec = RunSpec(data=DataSpec(split=sizes), task=TaskSpec(window=window), model=ModelSpec("fno"),
                   loading=LoadingSpec(cache=cache, workers=workers, prefetch=2))
    task = make_task(resolve(spec, source))
    start = time.perf_counter()
    normalizers = task.fit_normalizers(source)
    return make_task(task.spec, normalizers), time.perf_counter() - start


def _loader_epoch(path: Path, sizes: Sizes, cache: str) -> dict:
    """Set up the loaders (normalizers fitted, cache filled) and iterate one training epoch."""
    import pde_data
    from operators.training.data import default_workers, make_loaders

    source = pde_data.open_source(path)
    workers = default_workers()
    task, fit_s = _window_task(source, window=WINDOW, sizes=_split(sizes.n), cache=cache, workers=workers)
    start = time.perf_counter()
    train, val = make_loaders(task, source, batch_size=BATCH, seed=0)
    setup_s = time.perf_counter() - start
    total, windows, first_s = 0.0, 0, None
    start = time.perf_counter()
    for batch in train.epoch(0):
        x = batch.inputs
        total += float(x.sum())
        windows += len(x)
        if first_s is None:
            first_s, first_n = time.perf_counter() - start, windows
    epoch_s = time.perf_counter() - start
    if windows != len(train) or not math.isfinite(total):
        raise RuntimeError(f"loader epoch: expected {len(train)} finite windows, found {windows} (sum {total})")
    del train, val  # ends the persistent workers
    steady = (windows - first_n) / (epoch_s - first_s) if windows > first_n else float("nan")
    return {"fit_s": fit_s, "setup_s": setup_s, "epoch_s": epoch_s, "windows": windows, "first_s": first_s,
            "steady_rate": steady,
            "workers": workers if cache == "stream" else 0, "n_train": len(task.spec.data.splits.train)}


def _cli_epoch(path: Path, sizes: Sizes, run_dir: Path) -> dict:
    """One epoch of a small FNO through the CLI, its process tree sampled every 0.1 s."""
    split = ",".join(map(str, _split(sizes.n)))
    cmd = [sys.executable, "-m", "operators.cli", "train", "--data", str(path), "--model", "fno",
           "--window", str(WINDOW), "--periodic", "--epochs", "1", "--out", str(run_dir), "--split", split,
           "--batch-size", str(BATCH), "--cache", "stream", "--config", *FNO_CONFIG, "--threads", "1",
           "--no-progress"]
    log = run_dir.with_suffix(".log")
    peak = run_sampled(cmd, interval=0.1, log=log, cwd=REPO)
    if peak.returncode != 0:
        tail = log.read_text()[-3000:]
        raise RuntimeError(f"CLI train exited with status {peak.returncode}: {' '.join(cmd)}\n{tail}")
    epoch = json.loads((run_dir / "history.json").read_text())[0]
    return {"peak": peak, "epoch_s": epoch["epoch_s"], "samples_per_s": epoch["samples_per_s"], "split": split}


def _raw_rows(path: Path, sizes: Sizes, label: str, evicting: bool) -> tuple[list[Row], dict]:
    """Phase 1: raw h5py reads (samples, windows into a reused buffer, windows into fresh batches)."""
    rows, rates, wps = [], {}, sizes.windows_per_sample
    phases = (("samples", "samples/s", _raw_samples, "file order, 4 vars x (T,X,Y) read_direct into one array"),
              ("windows", "windows/s", _raw_windows,
               f"file order, per window 4 slab reads of m+1={WINDOW + 1} frames ({wps} windows/sample: each frame "
               f"read up to {WINDOW + 1}x)"),
              ("fresh", "windows/s, fresh batches", _raw_windows_fresh,
               f"the same reads into a new array per batch of {BATCH} (first-touch page faults included)"))
    for key, what, read, detail in phases:
        note = _cache_note(path, evicting)
        seconds, count = read(path, sizes)
        rates[key] = count / seconds
        rows.append(Row(NAME, f"{label} raw h5py {what}", rates[key], what.split(",")[0], f"{detail}; {note}"))
        if key == "samples":
            rows.append(Row(NAME, f"{label} raw h5py MB/s", sizes.nbytes / MB / seconds, "MB/s", "same reads"))
    return rows, rates


def _loader_rows(path: Path, sizes: Sizes, label: str, evicting: bool, raw: dict) -> tuple[list[Row], float]:
    """Phase 2: one epoch of the streaming loader, as ratios to the raw reads."""
    note = _cache_note(path, evicting)
    s = _loader_epoch(path, sizes, "stream")
    rate, wps = s["windows"] / s["epoch_s"], sizes.windows_per_sample
    rows = [Row(NAME, f"{label} stream loader windows/s", rate, "windows/s",
                f"train epoch 0, {s['windows']} windows of {s['n_train']} samples, batch {BATCH}, "
                f"workers {s['workers']} (default), worker start-up included (first batch after {s['first_s']:.2f} s; "
                f"{s['steady_rate']:.1f} windows/s after it); each window reads m+1={WINDOW + 1} "
                f"frames, so every frame is read up to {WINDOW + 1}x per epoch; {note}"),
            Row(NAME, f"{label} stream loader trajectory-equiv/s", rate / wps, "samples/s",
                f"windows/s / {wps} windows per sample"),
            Row(NAME, f"{label} stream loader / raw samples", rate / wps / raw["samples"], "x",
                "trajectory-equivalents/s over raw h5py samples/s (target >= 0.8)"),
            Row(NAME, f"{label} stream loader / raw windows", rate / raw["windows"], "x",
                "loader windows/s over raw h5py window reads/s into one reused buffer"),
            Row(NAME, f"{label} stream loader / raw windows, fresh batches", rate / raw["fresh"], "x",
                "loader windows/s over raw h5py window reads/s into a new array per batch (like for like)"),
            Row(NAME, f"{label} fit_normalizers", s["fit_s"], "s", "one streaming pass over the train split")]
    return rows, rate


def _raw_windows_in(path: Path, sizes: Sizes, order: list[tuple[int, int]], *, copy: bool = False,
                    chunk_cache: int = 1 << 20) -> float:
    """Windows/s of reading ``order``'s windows ``(sample, t0)`` (m+1 frames, 4 slab reads each) into one
    reused buffer, each window then copied once into a second one if ``copy`` (the bound of a loader that
    must copy what it reads), through an HDF5 chunk cache of ``chunk_cache`` bytes (h5py's default: 1 MiB)."""
    length = WINDOW + 1
    buf = np.empty((len(VARIABLES), length, sizes.x, sizes.x), dtype=np.float32)
    second = np.empty_like(buf)
    with h5py.File(path, "r", rdcc_nbytes=chunk_cache) as f:
        dsets = [f[name] for name in VARIABLES]
        start = time.perf_counter()
        for i, t0 in order:
            for v, d in enumerate(dsets):
                d.read_direct(buf, np.s_[i, t0:t0 + length], np.s_[v])
            if copy:
                np.copyto(second, buf)
        return len(order) / (time.perf_counter() - start)


def _loader_rate(source, task, workers: int, n_batches: int) -> float:
    """Steady windows/s of the training loader (``workers`` processes) over the first ``n_batches`` batches
    of epoch 0 after the first one (worker start-up excluded); the model is trivial: ``x.sum()``."""
    from dataclasses import replace

    from operators.training import make_task
    from operators.training.data import make_loaders

    spec = task.spec
    task = make_task(replace(spec, loading=replace(spec.loading, workers=workers)), task.normalizers)
    train, _ = make_loaders(task, source, batch_size=BATCH, seed=0)
    batches, windows, total = train.epoch(0), 0, 0.0
    next(batches)
    start = time.perf_counter()
    for _, batch in zip(range(n_batches), batches):
        total += float(batch.inputs.sum())
        windows += len(batch.inputs)
    rate = windows / (time.perf_counter() - start)
    del batches, train  # ends the persistent workers
    return rate


def _spread(values: list[float]) -> str:
    return f"median of {len(values)}, range {min(values):.3g}-{max(values):.3g}"


def _window_orders(task, sizes: Sizes, n: int) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """The first ``n`` windows ``(sample, t0)`` in file order, and the first ``n`` the training loader reads
    in epoch 0 (its shuffled global batches, each sorted)."""
    from operators.training.loader import global_batches

    wps, train = sizes.windows_per_sample, task.spec.data.splits.train
    in_file = [(i, t0) for i in range(sizes.n) for t0 in range(wps)][:n]
    batches = global_batches(len(train) * wps, BATCH, seed=0, epoch=0, shuffle=True)
    shuffled = [(int(train[k // wps]), k % wps) for b in batches for k in sorted(b.tolist())][:n]
    return in_file, shuffled


def _disk_speed_rows(path: Path, sizes: Sizes, label: str, *, repeats: int = 3, n_batches: int = 40,
                     workers: tuple[int, ...] = (0, 1, 2)) -> list[Row]:
    """The loader at the disk's speed: loader windows/s (trivial model) over the raw h5py window rate in
    file order, ``repeats`` rounds that each run every reader in turn (A, B, A, B: a slow spell of the
    shared machine hits all alike); each ratio is taken within a round."""
    import pde_data

    source = pde_data.open_source(path)
    task, _ = _window_task(source, window=WINDOW, sizes=_split(sizes.n), cache="stream", workers=0)
    n = min(len(task.spec.data.splits.train) * sizes.windows_per_sample, (n_batches + 1) * BATCH)
    in_file, shuffled = _window_orders(task, sizes, n)
    readers = {"raw file order": lambda: _raw_windows_in(path, sizes, in_file),
               "raw file order + 1 copy": lambda: _raw_windows_in(path, sizes, in_file, copy=True),
               "raw shuffled": lambda: _raw_windows_in(path, sizes, shuffled, chunk_cache=0),
               BOUND: lambda: _raw_windows_in(path, sizes, shuffled, copy=True, chunk_cache=0)}
    readers |= {f"loader {w} workers": (lambda w=w: _loader_rate(source, task, w, n_batches)) for w in workers}
    rates: dict[str, list[float]] = {name: [] for name in readers}
    for _ in range(repeats):
        for name, read in readers.items():
            rates[name].append(read())
    loader_note = ", 1 torch thread per worker; x, y normalized in place (the task's normalizers)"
    rows = [Row(NAME, f"{label} disk speed: {name}", float(np.median(r)), "windows/s",
                f"{_spread(r)}; first {n} windows" + (loader_note if "loader" in name else ""), threads=1)
            for name, r in rates.items()]
    return rows + _ratio_rows(rates, label)


#: the best a loader that reads the shuffled windows and copies them once can do
BOUND = "raw shuffled + 1 copy (bound)"


def _ratio_rows(rates: dict[str, list[float]], label: str) -> list[Row]:
    """Every reader over raw file order, and each loader over :data:`BOUND`: medians and ranges of the
    ratios taken within a round."""
    pairs = [(name, "raw file order") for name in rates if name != "raw file order"]
    pairs += [(name, BOUND) for name in rates if name.startswith("loader")]
    rows = []
    for name, base in pairs:
        ratios = [a / b for a, b in zip(rates[name], rates[base])]
        target = "; target >= 0.8" if name.startswith("loader") and base == "raw file order" else ""
        rows.append(Row(NAME, f"{label} disk speed: {name} / {base}", float(np.median(ratios)), "x",
                        f"{_spread(ratios)} (ratios within a round){target}", threads=1))
    return rows


def _memory_rows(path: Path, sizes: Sizes, label: str, evicting: bool, stream_rate: float) -> list[Row]:
    """Phase 4 (smallest file): the same epoch from the in-memory cache."""
    note = _cache_note(path, evicting)
    m = _loader_epoch(path, sizes, "memory")
    rate = m["windows"] / m["epoch_s"]
    return [Row(NAME, f"{label} memory cache fill", m["setup_s"], "s",
                f"make_loaders(cache='memory'): reads the train+val samples once; {note}"),
            Row(NAME, f"{label} memory loader windows/s", rate, "windows/s",
                f"train epoch 0 after the fill, main process (workers 0); stream: {stream_rate:.1f}; "
                f"{m['windows']} windows"),
            Row(NAME, f"{label} memory / stream loader", rate / stream_rate, "x", "windows/s ratio")]


def _cli_rows(path: Path, sizes: Sizes, label: str, evicting: bool, run_dir: Path) -> tuple[list[Row], dict]:
    """Phase 5: one CLI training epoch with the process tree's memory sampled."""
    note = _cache_note(path, evicting)
    c = _cli_epoch(path, sizes, run_dir)
    peak = c["peak"]
    verdict = "met" if peak.pss / MB <= PEAK_TARGET_MB else "NOT met"
    rows = [Row(NAME, f"{label} CLI train peak RSS (tree)", peak.rss / MB, "MB",
                f"sum of VmRSS over {peak.processes} processes (CLI + loader workers), sampled every 0.1 s "
                f"({peak.samples} samples); shared pages counted once per process"),
            Row(NAME, f"{label} CLI train peak PSS (tree)", peak.pss / MB, "MB",
                f"sum of smaps_rollup Pss; target <= {PEAK_TARGET_MB:.0f} MB: {verdict}"),
            Row(NAME, f"{label} CLI train epoch", c["epoch_s"], "s",
                f"fno {' '.join(FNO_CONFIG)}, --window {WINDOW} --split {c['split']} --batch-size {BATCH} "
                f"--cache stream, default workers, --threads 1; process wall {peak.wall_s:.1f} s; {note}",
                threads=1),
            Row(NAME, f"{label} CLI train samples/s", c["samples_per_s"], "windows/s",
                "history.json samples_per_s of epoch 1 (a sample is a window)", threads=1)]
    return rows, {"rss": peak.rss, "pss": peak.pss}


def _file_rows(path: Path, sizes: Sizes, *, evicting: bool, memory_cache: bool, run_dir: Path,
               repeats: int = 3) -> tuple[list[Row], dict]:
    label = sizes.label()
    rows, raw = _raw_rows(path, sizes, label, evicting)
    loader_rows, stream_rate = _loader_rows(path, sizes, label, evicting, raw)
    rows += loader_rows
    if memory_cache:
        rows += _disk_speed_rows(path, sizes, label, repeats=repeats)
    if memory_cache:
        rows += _memory_rows(path, sizes, label, evicting, stream_rate)
    cli_rows, peak = _cli_rows(path, sizes, label, evicting, run_dir)
    return rows + cli_rows, peak


def _well_file(path: Path, quick: bool) -> Path:
    """A file in The Well's format: 3 channels (a scalar and a 2-vector), float32; quick 8 × 21 × 64²,
    full 23 × 101 × 128² (450 MB, the size of the issue's measurement)."""
    import pde_data

    n, t, x = (8, 21, 64) if quick else (23, 101, 128)
    rng = np.random.default_rng(0)
    scalar = np.empty((n, t, x, x), np.float32)
    vector = np.empty((n, t, x, x, 2), np.float32)
    for i in range(n):  # sample by sample: the full file's arrays are not held twice
        scalar[i] = rng.standard_normal((t, x, x), dtype=np.float32)
        vector[i] = rng.standard_normal((t, x, x, 2), dtype=np.float32)
    return pde_data.write_well(path, fields={"density": scalar, "velocity": vector}, time=np.arange(t, dtype=float),
                               coords={"x": np.linspace(0, 1, x), "y": np.linspace(0, 1, x)})


def _well_rows(folder: Path, quick: bool) -> list[Row]:
    """Our streaming loader against The Well's own ``WellDataset`` (in a torch DataLoader) on one Well
    file: windows of 4 frames → 1, batch 16, the same workers, one shuffled epoch each; windows/s.
    ``the_well`` is installed for this row only (``pip install --no-deps the-well einops``)."""
    try:
        from the_well.data import WellDataset
    except ImportError:
        return [Row(NAME, "Well-format file: WellDataset", float("nan"), "windows/s",
                    "not run: the_well not installed (pip install --no-deps the-well einops)")]
    import torch

    import pde_data
    from operators.training.data import default_workers, make_loaders

    well_dir = folder / "well"
    well_dir.mkdir()
    path = _well_file(well_dir / "data.hdf5", quick)
    workers = default_workers()
    try:
        source = pde_data.open_source(path)
        task, _ = _window_task(source, window=4, sizes=(source.sizes["sample"], 0, 0), cache="stream", workers=workers)
        train, _ = make_loaders(task, source, batch_size=16, seed=0)
        start, ours = time.perf_counter(), 0
        for batch in train.epoch(0):
            ours += len(batch.inputs)
        ours_s = time.perf_counter() - start
        del train
        theirs_set = WellDataset(path=str(well_dir), n_steps_input=4, n_steps_output=1, use_normalization=False)
        loader = torch.utils.data.DataLoader(theirs_set, batch_size=16, shuffle=True, num_workers=workers,
                                             generator=torch.Generator().manual_seed(0))
        start, theirs = time.perf_counter(), 0
        for batch in loader:
            theirs += len(batch["input_fields"])
        theirs_s = time.perf_counter() - start
    finally:
        shutil.rmtree(well_dir, ignore_errors=True)
    size = f"{source.sizes['sample']}x{source.sizes['time']}x{source.sizes['x']}^2x3"
    return [Row(NAME, f"Well-format {size}: stream loader", ours / ours_s, "windows/s", f"{workers} workers, batch 16"),
            Row(NAME, f"Well-format {size}: WellDataset + DataLoader", theirs / theirs_s, "windows/s",
                f"{workers} workers, batch 16"),
            Row(NAME, f"Well-format {size}: ours / WellDataset", (ours / ours_s) / (theirs / theirs_s), "x",
                "target >= 2")]


def _zarr_copy(path: Path, store: Path) -> None:
    """The file's data model as a Zarr store (:class:`pde_data.formats.zarr_store.ZarrWriter`), sample by sample."""
    import pde_data
    from pde_data.formats.zarr_store import ZarrWriter

    ds = pde_data.open_source(path).dataset
    with ZarrWriter(store, ds.isel(sample=[0]), ds.sizes["sample"]) as writer:
        for i in range(ds.sizes["sample"]):
            writer.write(i, ds.isel(sample=[i]).load())
    ds.close()


def _remote_rows(folder: Path, sizes: Sizes, *, repeats: int = 3, n_batches: int = 40) -> list[Row]:
    """The streaming training loader (2 workers, shuffled windows) over one file read three ways, ``repeats`` rounds
    each running local HDF5, the same file over HTTP on loopback (``python -m bench._http``: aiohttp serving byte
    ranges from a process of its own) and a local Zarr copy in turn: HTTP / local (target >= 0.5) and Zarr / HDF5
    (target >= 0.8), median
    and range over the rounds."""
    import subprocess

    import psutil

    import pde_data
    from pde_data.core import remote
    from pde_data.formats import zarr_store

    path, store = folder / "remote_cfd.hdf5", folder / "remote_cfd.zarr"
    write_cfd(path, sizes)
    _zarr_copy(path, store)
    server = subprocess.Popen([sys.executable, "-m", "bench._http", str(folder)], stdout=subprocess.PIPE, text=True)
    try:  # the server in a process of its own, as a real one (not sharing this process's interpreter lock)
        url = f"http://127.0.0.1:{int(server.stdout.readline())}/{path.name}"
        sources = {"local": pde_data.open_source(path), "http": pde_data.open_source(url),
                   "zarr": pde_data.open_source(store)}
        task, _ = _window_task(sources["local"], window=10, sizes=_split(sizes.n), cache="stream", workers=2)
        rates: dict[str, list[float]] = {k: [] for k in sources}
        serving = psutil.Process(server.pid)
        busy = []  # the server's CPU seconds per second of the HTTP rounds: cores the loader's workers did not have
        for _ in range(repeats):
            for name, source in sources.items():
                before, start = sum(serving.cpu_times()[:2]), time.perf_counter()
                rates[name].append(_loader_rate(source, task, 2, n_batches))
                if name == "http":
                    busy.append((sum(serving.cpu_times()[:2]) - before) / (time.perf_counter() - start))
        transfer = _transfer_rates(path, url)
    finally:
        server.kill()
        server.wait()
    cache = (f"aiohttp serving from its own process; block cache of {remote.BLOCK_BYTES / MB:g} MiB blocks x "
             f"{remote.CACHED_BLOCKS} per open file")
    label, rows = sizes.label(), []
    zarr = (f"blosc lz4, one sample per chunk, frames in chunks of at most {zarr_store.CHUNK_BYTES / MB:g} MiB; read "
            "through xarray's Zarr backend")
    for name, of, target, note in (("http", "local", 0.5, cache), ("zarr", "local", 0.8, zarr)):
        ratios = [a / b for a, b in zip(rates[name], rates[of])]
        median = statistics.median(ratios)
        rows.append(Row(REMOTE, f"{label} loader {name} / local HDF5, 2 workers", median, "x",
                        f"{_spread(ratios)} over {repeats} rounds; target >= {target}: "
                        f"{'met' if median >= target else 'NOT met'}; {note}; local "
                        f"{statistics.median(rates[of]):.0f} windows/s"))
    for size, (http, local) in transfer.items():
        rows.append(Row(REMOTE, f"{label} bytes/s of {size / MB:.3g} MiB ranges, HTTP / the file", http / local, "x",
                        f"{http / 1e6:.0f} MB/s by fsspec over loopback, {local / 1e6:.0f} MB/s from the page "
                        "cache, one process: the bound of a loader over HTTP on this machine"))
    rows.append(Row(REMOTE, f"{label} HTTP server's CPU while the http loader runs", statistics.median(busy), "cores",
                    f"{_spread(busy)}; of the machine's {os.cpu_count()} cores, those the loader's 2 workers (and the "
                    "training process) did not have: on loopback the server shares the machine"))
    return rows


def _transfer_rates(path: Path, url: str, total: int = 128 << 20) -> dict[int, tuple[float, float]]:
    """``{range bytes: (bytes/s over HTTP, bytes/s read from the local file)}`` of ``total`` bytes read in ranges
    of a window's size (704 KiB: eleven 64 KiB frames) and of a block (4 MiB), spread over the file."""
    from pde_data.core import remote

    fs, size, rates = remote.filesystem(url), path.stat().st_size, {}
    for chunk in (704 << 10, 4 << 20):
        starts = [(k * 7919 * chunk) % (size - chunk) for k in range(total // chunk)]
        start = time.perf_counter()
        for a in starts:
            fs.cat_file(url, start=a, end=a + chunk)
        http = total / (time.perf_counter() - start)
        start = time.perf_counter()
        with open(path, "rb") as fh:
            for a in starts:
                fh.seek(a)
                fh.read(chunk)
        rates[chunk] = (http, total / (time.perf_counter() - start))
    return rates


def _disk_speed_only(folder: Path, sizes: Sizes, repeats: int) -> list[Row]:
    """Only the disk-speed phase, on one file of ``sizes`` (``--disk-speed``)."""
    path = folder / f"2D_CFD_bench_{sizes.n}.hdf5"
    try:
        write_cfd(path, sizes)
        return _disk_speed_rows(path, sizes, sizes.label(), repeats=repeats)
    finally:
        path.unlink(missing_ok=True)


def run(quick: bool = False, *, tmp: str | os.PathLike | None = None, sizes_gb: tuple[float, ...] = (1.0, 4.0),
        evicting: bool = False, disk_speed: bool = False, remote_only: bool = False, repeats: int = 3) -> list[Row]:
    """Benchmark rows: ``quick`` writes two tiny files (12 and 24 samples at 64²) instead of ~1 GB and ≥ 4 GB;
    ``disk_speed``: only the disk-speed phase (``repeats`` rounds) on the smallest file; ``remote_only``: only the
    HTTP and Zarr phase (:func:`_remote_rows`) on it."""
    files = [Sizes(12, x=64), Sizes(24, x=64)] if quick else [Sizes.for_gb(gb) for gb in sorted(sizes_gb)]
    folder = Path(tempfile.mkdtemp(prefix="bench_data_", dir=tmp))
    rows, peaks = [], []
    try:
        if disk_speed:
            _check_disk(folder, files[0].nbytes + (64 << 20))
            return _disk_speed_only(folder, files[0], repeats)
        if remote_only:
            _check_disk(folder, 2 * files[0].nbytes + (64 << 20))
            return _remote_rows(folder, files[0], repeats=repeats)
        _check_disk(folder, max(s.nbytes for s in files) + (256 << 20))  # one file at a time, + run folders
        for k, sizes in enumerate(files):
            path = folder / f"2D_CFD_bench_{sizes.n}.hdf5"
            try:
                write_s = write_cfd(path, sizes, seed=k)
                rows.append(Row(NAME, f"{sizes.label()} write", path.stat().st_size / MB / write_s, "MB/s",
                                f"h5py, sample by sample, fsynced; {path.stat().st_size / 1e9:.3f} GB on disk, "
                                f"{write_s:.1f} s"))
                file_rows, peak = _file_rows(path, sizes, evicting=evicting, memory_cache=k == 0,
                                             run_dir=folder / f"run_{sizes.n}", repeats=repeats)
                rows += file_rows
                peaks.append(peak)
            finally:
                path.unlink(missing_ok=True)
                shutil.rmtree(folder / f"run_{sizes.n}", ignore_errors=True)
        rows += _well_rows(folder, quick) + _remote_rows(folder, files[0], repeats=repeats)
        if len(files) > 1:
            big, small = files[-1].label(), files[0].label()
            for key in ("pss", "rss"):
                ratio = peaks[-1][key] / peaks[0][key]
                verdict = "met" if ratio <= 1.2 else "NOT met"
                rows.append(Row(NAME, f"CLI train peak {key.upper()} {big} / {small}", ratio, "x",
                                f"target <= 1.2 (within 20 %): {verdict}"))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.bench_data", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="two tiny files (12 and 24 samples at 64^2)")
    parser.add_argument("--tmp", type=Path, help="folder for the data files (default: tempfile's)")
    parser.add_argument("--json", type=Path, help="also write the rows to this JSON file")
    parser.add_argument("--sizes-gb", type=float, nargs="+", default=[1.0, 4.0], metavar="GB",
                        help="file sizes in GB = 1e9 bytes (default 1 4); ignored with --quick")
    parser.add_argument("--evict", action="store_true",
                        help="drop each file's pages from the OS page cache before every phase (posix_fadvise)")
    parser.add_argument("--disk-speed", action="store_true",
                        help="only the loader-at-the-disk's-speed phase, on the smallest file")
    parser.add_argument("--remote", action="store_true",
                        help="only the phase reading the smallest file over HTTP on loopback and as a Zarr store")
    parser.add_argument("--repeats", type=int, default=3, help="rounds of the disk-speed and remote phases (default 3)")
    args = parser.parse_args(argv)
    rows = run(quick=args.quick, tmp=args.tmp, sizes_gb=tuple(args.sizes_gb), evicting=args.evict,
               disk_speed=args.disk_speed, remote_only=args.remote, repeats=args.repeats)
    print_table(rows, title=f"streaming data ({'quick' if args.quick else 'full'}, {os.cpu_count()} cores)")
    if args.json:  # the form examples/results_tables.py renders (a run again alone: results/bench-remote.json)
        from bench.__main__ import _write_json

        _write_json(args.json, rows, sys.argv[1:] if argv is None else argv, quick=args.quick, busy=[],
                    program="python -m bench.bench_data")
    return 0


if __name__ == "__main__":
    sys.exit(main())
