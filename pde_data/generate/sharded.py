"""Write generated sets as they are made: one file streamed chunk by chunk (:func:`write_samples`), or a folder of
shards made by Dask workers, resumable and checked (:func:`generate_sharded`).

Memory is bounded by one chunk (:func:`pde_data.generate.registry.chunk_size` samples) whatever the set's size: each
chunk is written (NetCDF-4 by :class:`pde_data.PredictionWriter`, or a PDEBench group layout) before the next
is made. A file appears under its name only once complete (written under a temporary name, then renamed).

A sharded set is one task per shard on a ``dask.distributed`` cluster: a ``LocalCluster`` of worker processes
here, or any cluster given by its scheduler's address (SLURM/PBS through ``dask-jobqueue``). Each task writes
``shard-0000i-of-0000S.nc`` and then its record (``.json`` beside it: range, bytes, sha256, moments); when all
are there, ``manifest.json`` is written (atomically, last) and the records are removed. Re-running the same
call skips every shard whose file matches its record's sha256 and makes the others, so a killed run completes;
a folder made with other parameters is refused (one line naming the differences) unless ``overwrite``. Sample
``i`` depends on ``(seed, i)`` alone (:mod:`pde_data.generate.registry`), so the set is the same bit for bit for any
number of shards or workers and any finishing order.

Example:
    >>> spec = GenerationSpec("ns", n=1024, seed=0, params={"n_sim": 64, "n_out": 64})
    >>> manifest = generate_sharded(spec, "ns_set", shards=16, workers=2)
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

import torch
import xarray as xr

from pde_data.generate.registry import GenerationSpec, block_size, chunk_size, make_samples
from pde_data.core.io import atomic_path
from pde_data.core.params import ExistsError, ParameterError
from pde_data.core.versions import package_versions
from pde_data.formats.manifest import (MANIFEST, Manifest, ShardRecord, moments_json, moments_of, read_manifest,
                                      sha256_of, shard_name, write_manifest)
from pde_data.core.model import SAMPLE, parameters_of, sample_variables
from pde_data.formats.verification import STAMP
from pde_data.core.moments import Moments
from pde_data.formats.pdebench_write import PdebenchGroupWriter
from pde_data.formats.prediction_writer import PredictionWriter
from pde_data.formats import zarr_store

__all__ = ["Written", "write_samples", "plan_shards", "generate_sharded", "run_tasks", "reporter", "generator_attrs",
           "GENERATOR_ATTR", "PROGRESS_TOPIC"]

#: the Dask event topic on which shard tasks report progress
PROGRESS_TOPIC = "circuitop-generate"


@dataclass(frozen=True)
class Written:
    """A file written by :func:`write_samples`: its ``bytes``, ``sha256``, each variable's moments and each PDE
    parameter's values per sample."""

    bytes: int
    sha256: str
    moments: Mapping[str, Mapping[str, float]]
    parameters: Mapping[str, list[float]]


def _chunks(spec: GenerationSpec, samples: range) -> list[range]:
    """``samples`` cut at multiples of the generator's chunk size (aligned by absolute index: no block is
    simulated twice)."""
    step = chunk_size(spec)
    cuts = [samples.start] + list(range((samples.start // step + 1) * step, samples.stop, step)) + [samples.stop]
    return [range(a, b) for a, b in zip(cuts[:-1], cuts[1:])]


def write_samples(spec: GenerationSpec, samples: range, path: str | os.PathLike, *, pdebench_layout: str | None = None,
                  pdebench_variables: list[str] | None = None, zarr: bool = False, region: bool = False,
                  device: torch.device | str | None = None, progress: Callable[[float], None] | None = None) -> Written:
    """Make samples ``samples`` of ``spec`` chunk by chunk and stream them into ``path`` (NetCDF-4, the PDEBench
    group layout ``pdebench_layout`` with ``pdebench_variables`` as channels, or with ``zarr`` a Zarr v3 store:
    :class:`~pde_data.formats.zarr_store.ZarrWriter`), atomically; ``progress(samples_done)`` as they are made.
    With ``region``, the samples go at their own indices into the Zarr store made at ``path`` for the whole set
    (one task of :func:`pde_data.generate.sharded_zarr.generate_zarr_sharded`); the digest is of their chunks."""
    totals: dict[str, Moments] = {}
    parameters: dict[str, list[float]] = {}
    with contextlib.ExitStack() as stack:
        writer = None
        for chunk in _chunks(spec, samples):
            done = chunk.start - samples.start
            ds = make_samples(spec, chunk, device=device,
                              progress=None if progress is None else (lambda k, d=done: progress(d + k)))
            if writer is None:
                writer = (_Region(str(path), samples.start, ds) if region else
                          stack.enter_context(_writer(spec, ds, path, len(samples), pdebench_layout,
                                                      pdebench_variables, zarr)))
            _write(writer, ds, chunk.start - samples.start)
            for name, m in moments_of(ds).items():
                totals[name] = m if name not in totals else totals[name].merge(m)
            for name in (p for p in parameters_of(ds) if ds[p].dims == (SAMPLE,)):  # a number per sample
                parameters.setdefault(name, []).extend(float(v) for v in ds[name].values)
    moments = {k: moments_json(m) for k, m in totals.items()}
    size, sha256 = (zarr_store.digest(str(path), samples if region else None) if zarr or region else
                    (os.path.getsize(path), sha256_of(path)))
    return Written(size, sha256, moments, parameters)


#: the attribute of a generated file or store holding its generator and parameters (the spec's JSON)
GENERATOR_ATTR = "circuitop_generator"


def generator_attrs(spec: GenerationSpec, like: xr.Dataset) -> dict:
    """The global attributes of a file or store of ``spec``'s samples: ``like``'s, and :data:`GENERATOR_ATTR`."""
    return {**like.attrs, GENERATOR_ATTR: json.dumps(spec.complete().to_json())}


def _writer(spec: GenerationSpec, like: xr.Dataset, path, n: int, layout: str | None, variables: list[str] | None,
            zarr: bool):
    if layout is not None:
        return PdebenchGroupWriter(path, layout=layout, variables=variables)
    attrs = generator_attrs(spec, like)
    if zarr:
        return zarr_store.ZarrWriter(path, like, n, attrs=attrs)
    return PredictionWriter(path, like.isel({SAMPLE: [0]}), sample_variables(like), n, attrs=attrs)


class _Region:
    """Samples written into an existing Zarr store from index ``start`` on (``write(row, ds)`` at ``start + row``)."""

    def __init__(self, path: str, start: int, like: xr.Dataset):
        self.path, self.start = path, start
        self.variables = sample_variables(like)

    def write(self, row: int, ds: xr.Dataset) -> None:
        zarr_store.write_region(self.path, self.start + row, ds, self.variables)


def _write(writer, ds: xr.Dataset, row: int) -> None:
    if isinstance(writer, PdebenchGroupWriter):
        writer.write(ds)
    else:
        writer.write(row, ds)


def plan_shards(spec: GenerationSpec, count: int) -> list[range]:
    """``count`` contiguous sample ranges covering ``[0, n)``, cut at multiples of the generator's block, as
    equal as the blocks allow.

    Raises:
        ValueError: more shards than blocks (each shard needs one).
    """
    block = block_size(spec)
    blocks = -(-spec.n // block)
    if not 1 <= count <= blocks:
        raise ParameterError("shards", f"1 to {blocks} ({spec.n} samples in blocks of {block})", str(count))
    cuts = [min(spec.n, (i * blocks // count) * block) for i in range(count)] + [spec.n]
    return [range(a, b) for a, b in zip(cuts[:-1], cuts[1:])]


def _record_path(folder: Path, index: int, count: int) -> Path:
    return folder / shard_name(index, count).replace(".nc", ".json")


def _generate_shard(spec_json: dict, index: int, count: int, start: int, stop: int, folder: str,
                    device: str | None, threads: int) -> dict:
    """One Dask task: shard ``index`` written, then its record; returns the record (JSON)."""
    torch.set_num_threads(threads)
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    spec, folder = GenerationSpec.from_json(spec_json), Path(folder)
    report = reporter(index)
    report(0.0)
    path = folder / shard_name(index, count)
    written = write_samples(spec, range(start, stop), path, device=device, progress=report)
    record = ShardRecord(index, count, start, stop, path.name, written.bytes, written.sha256, written.moments,
                         written.parameters)
    with atomic_path(_record_path(folder, index, count)) as tmp:
        tmp.write_text(json.dumps({"generator": spec.complete().to_json(), "shard": record.to_json()}))
    return record.to_json()


def reporter(index: int) -> Callable[[float], None]:
    """``report(samples_done)`` as a Dask event of the worker running the task (nothing outside a worker)."""
    try:
        from distributed import get_worker
        worker = get_worker()
    except (ImportError, ValueError):
        return lambda done: None
    started = time.monotonic()

    def report(done: float) -> None:
        worker.log_event(PROGRESS_TOPIC, {"shard": index, "done": done, "pid": os.getpid(), "t": started})

    return report


def _existing(folder: Path, spec: GenerationSpec, count: int) -> dict[int, ShardRecord]:
    """The shards of ``folder`` already made for this call (file matching its record's sha256); refuses a folder
    made by another call."""
    if (folder / MANIFEST).is_file():
        manifest = read_manifest(folder)
        _refuse_other(folder / MANIFEST, spec, GenerationSpec.from_json(manifest.generator), count, manifest.shards[0].count)
        records = {s.index: s for s in manifest.shards}
    else:
        records = {}
        for path in sorted(folder.glob("shard-*-of-*.json")):
            data = json.loads(path.read_text())
            record = ShardRecord.from_json(data["shard"])
            _refuse_other(path, spec, GenerationSpec.from_json(data["generator"]), count, record.count)
            records[record.index] = record
    return {i: r for i, r in records.items()
            if (folder / r.file).is_file() and (folder / r.file).stat().st_size == r.bytes
            and sha256_of(folder / r.file) == r.sha256}


def _refuse_other(where: Path, spec: GenerationSpec, theirs: GenerationSpec, count: int, their_count: int) -> None:
    diffs = spec.differences(theirs) + ([f"shards: {count} here, {their_count} there"] if count != their_count else [])
    if diffs:
        raise ExistsError("folder", f"{where.parent}: expected a folder of this generate call or a new one, found a "
                          f"set made with other parameters ({'; '.join(diffs)}); pass {{overwrite=True}} to replace it",
                          mentions=["overwrite"])


def _clear(folder: Path) -> None:
    """Remove what earlier calls wrote in ``folder``: shards, records, the manifest, stale temporary files."""
    for pattern in ("shard-*-of-*.nc", "shard-*-of-*.json", MANIFEST, STAMP):
        for path in folder.glob(pattern):
            path.unlink()
    _clear_temporaries(folder)


def _clear_temporaries(folder: Path) -> None:
    """The temporary files a killed writer left (``.shard-….nc.*.tmp``, never under a shard's name)."""
    for path in folder.glob(".shard-*.tmp"):
        path.unlink(missing_ok=True)


def generate_sharded(spec: GenerationSpec, folder: str | os.PathLike, *, shards: int, workers: int | None = None,
                     scheduler: str | None = None, overwrite: bool = False, device: str | None = None,
                     threads: int = 1, retries: int = 2, progress: Callable[[Mapping], None] | None = None) -> Manifest:
    """Make ``spec`` as ``shards`` files in ``folder`` on Dask and write its manifest; returns the manifest.

    Args:
        workers: worker processes of a local cluster (default: one per core, at most ``shards``).
        scheduler: the address of a running Dask scheduler (``tcp://host:8786``) to submit to instead.
        overwrite: replace a set made with other parameters (default: refuse it).
        device: torch device of the solvers on the workers (default: theirs, cuda when present).
        threads: torch threads of each task. The set is the same bit for bit at the same ``threads`` (MKL's
            inverse FFT of the Navier–Stokes solver rounds differently with other thread counts), so the
            default, one thread per worker process, is how Dask uses the cores.
        retries: times a shard task that raised is retried (a worker that dies has its task rerun by Dask).
        progress: ``progress({"done", "total", "workers", "retries"})`` about every 0.2 s.

    Raises:
        FileExistsError: the folder holds a set made with other parameters (and no ``overwrite``).
        ValueError: ``shards`` out of range.
    """
    folder = Path(folder)
    ranges = plan_shards(spec, shards)
    folder.mkdir(parents=True, exist_ok=True)
    if overwrite:
        _clear(folder)
    _clear_temporaries(folder)
    done = _existing(folder, spec, shards)
    todo = [i for i in range(shards) if i not in done]
    if todo:
        done.update(run_tasks(spec, folder, ranges, todo, workers=workers, scheduler=scheduler, device=device,
                                 threads=threads, retries=retries, progress=progress))
    manifest = Manifest(spec.complete().to_json(), tuple(done[i] for i in range(shards)), package_versions())
    write_manifest(folder, manifest)
    for path in folder.glob("shard-*-of-*.json"):
        path.unlink()
    _clear_temporaries(folder)  # what a worker killed mid-shard left (its task was made again elsewhere)
    return manifest


def run_tasks(spec, folder, ranges, todo, *, workers, scheduler, device, threads, retries, progress,
              task: Callable[..., dict] = _generate_shard) -> dict[int, ShardRecord]:
    """``task(spec_json, index, count, start, stop, folder, device, threads)`` for each shard of ``todo`` on Dask (a
    local cluster of ``workers`` processes, or ``scheduler``'s); returns the records the tasks return, by index."""
    from distributed import Client, LocalCluster, as_completed

    with contextlib.ExitStack() as stack:
        if scheduler is None:
            n = workers or min(len(todo), os.cpu_count() or 1)
            cluster = stack.enter_context(LocalCluster(n_workers=n, threads_per_worker=1, processes=True,
                                                       dashboard_address=":0", silence_logs=logging.ERROR))
            client = stack.enter_context(Client(cluster))
        else:
            client = stack.enter_context(Client(scheduler, timeout="30s"))
        tracker = _Tracker(ranges, todo, client, progress)
        client.subscribe_topic(PROGRESS_TOPIC, tracker.event)
        futures = [client.submit(task, spec.to_json(), i, len(ranges), ranges[i].start, ranges[i].stop,
                                 str(folder), device, threads, key=f"circuitop-shard-{i}-{os.getpid()}-{time.time_ns()}",
                                 retries=retries, pure=False) for i in todo]
        results = {}
        pending = as_completed(futures)
        while len(results) < len(futures):
            for future in pending.next_batch(block=False) if pending.has_ready() else ():
                record = ShardRecord.from_json(future.result())
                results[record.index] = record
                tracker.finished(record.index)
            tracker.show()
            time.sleep(0.05 if pending.has_ready() else 0.2)
        client.unsubscribe_topic(PROGRESS_TOPIC)
        tracker.show()
        return results


class _Tracker:
    """Samples done across workers from the tasks' progress events: the latest report of each shard, and a
    retry counted whenever a shard starts again in another process or after it had progressed."""

    def __init__(self, ranges: list[range], todo: list[int], client, progress):
        self._sizes = {i: len(ranges[i]) for i in todo}
        self._done: dict[int, float] = {}
        self._starts: dict[int, tuple] = {}
        self.retries = 0
        self._client, self._progress = client, progress
        self._total = sum(len(r) for r in ranges)
        self._before = self._total - sum(self._sizes.values())

    def event(self, event) -> None:
        msg = event[1] if isinstance(event, tuple) else event
        shard, start = int(msg["shard"]), (msg["pid"], msg["t"])
        if shard in self._starts and self._starts[shard] != start:
            self.retries += 1
        self._starts[shard] = start
        self._done[shard] = float(msg["done"])

    def finished(self, shard: int) -> None:
        self._done[shard] = self._sizes[shard]

    def show(self) -> None:
        if self._progress is None:
            return
        workers = len(self._client.scheduler_info(n_workers=-1).get("workers", {}))
        self._progress({"done": self._before + sum(self._done.values()), "total": self._total,
                        "workers": workers, "retries": self.retries})

