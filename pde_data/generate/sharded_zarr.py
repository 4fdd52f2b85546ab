"""A generated set as one Zarr v3 store made by Dask workers (:func:`generate_zarr_sharded`), at a local path or a
URL (``s3://bucket/set.zarr``): every task writes its own samples' region of the same store, resumable and checked
as a folder of shards is (:mod:`pde_data.generate.sharded`).

The caller makes sample 0 once to learn the variables' shapes and creates the store (:func:`pde_data.formats.
zarr_store.create`, marked incomplete); each task writes its range (one chunk per sample, no chunk shared) and then
its record, ``.circuitop-shards/shard-0000i-of-0000S.json`` inside the store (range, bytes and sha256 of its chunk
files, moments). When all are there, the manifest goes into the store's root attributes, the mark is removed and
the records are deleted. Re-running the same call keeps every range whose chunks match its record's sha256 and
makes the others; a store made with other parameters is refused unless ``overwrite``. Sample ``i`` depends on
``(seed, i)`` alone, so the store's chunks are those :func:`pde_data.write_samples` writes in one process, bit for
bit, for any number of shards or workers.

Example:
    >>> spec = GenerationSpec("ns", n=1024, seed=0, params={"n_sim": 64, "n_out": 64})
    >>> manifest = generate_zarr_sharded(spec, "s3://bucket/ns.zarr", shards=16, workers=2)
"""

from __future__ import annotations

import functools
import json
import os
from typing import Callable, Mapping

import torch

from pde_data.core import remote
from pde_data.core.model import SAMPLE
from pde_data.core.params import ExistsError
from pde_data.core.versions import package_versions
from pde_data.formats import zarr_store
from pde_data.formats.manifest import Manifest, ShardRecord, shard_name
from pde_data.generate.registry import GenerationSpec, make_samples
from pde_data.generate.sharded import GENERATOR_ATTR, generator_attrs, plan_shards, reporter, run_tasks, write_samples

__all__ = ["generate_zarr_sharded", "RECORDS", "SHARDS_ATTR"]

#: the folder, inside the store, of the records of the ranges written so far (removed when the store is complete)
RECORDS = ".circuitop-shards"
#: the root attribute naming the shard count of a sharded store (with the generator's, what made it)
SHARDS_ATTR = "circuitop_shards"


def generate_zarr_sharded(spec: GenerationSpec, store: str | os.PathLike, *, shards: int, workers: int | None = None,
                          scheduler: str | None = None, overwrite: bool = False, device: str | None = None,
                          threads: int = 1, retries: int = 2,
                          progress: Callable[[Mapping], None] | None = None) -> Manifest:
    """Make ``spec`` as one Zarr store at ``store`` (a path or URL) written by ``shards`` Dask tasks; returns the
    manifest (also in the store's root attributes). The arguments are :func:`pde_data.generate_sharded`'s.

    Raises:
        FileExistsError: a store made with other parameters is there (and no ``overwrite``), or anything that is no
            Zarr store (never replaced).
        ValueError: ``shards`` out of range.
    """
    store = str(store) if remote.is_url(str(store)) else os.path.abspath(store)
    ranges = plan_shards(spec, shards)
    attrs = _existing(spec, store, shards, overwrite)
    if attrs is not None and zarr_store.INCOMPLETE not in attrs:  # made by this call before, complete
        return Manifest.from_json(attrs[zarr_store.MANIFEST_ATTR])
    if attrs is None:
        done = {}
        like = make_samples(spec, range(0, 1), device=device)
        zarr_store.create(store, like, spec.n, attrs={**generator_attrs(spec, like), SHARDS_ATTR: shards})
    else:
        done = _written(store, shards)
    todo = [i for i in range(shards) if i not in done]
    if todo:
        task = functools.partial(_region_task, options=remote.options_of(store) if remote.is_url(store) else None)
        done.update(run_tasks(spec, store, ranges, todo, workers=workers, scheduler=scheduler, device=device,
                              threads=threads, retries=retries, progress=progress, task=task))
    manifest = Manifest(spec.complete().to_json(), tuple(done[i] for i in range(shards)), package_versions())
    zarr_store.finish(store, {zarr_store.MANIFEST_ATTR: manifest.to_json()})
    fs, root = zarr_store.filesystem(store)
    if fs.exists(f"{root}/{RECORDS}"):
        fs.rm(f"{root}/{RECORDS}", recursive=True)
    return manifest


def _existing(spec: GenerationSpec, store: str, shards: int, overwrite: bool) -> dict | None:
    """The root attributes of the store at ``store`` made by this call before (complete or not), or ``None`` where
    the store is to be made (nothing there, or ``overwrite``); refuses anything else."""
    found = zarr_store.state(store)
    if found == "other":
        raise ExistsError("out", f"{remote.display(store)}: expected a Zarr store (or nothing) to write, found a file "
                                 "or folder that is no store; it is left as it is")
    if found == "none":
        return None
    if overwrite:
        zarr_store.remove(store)
        return None
    attrs = zarr_store.root_attrs(store)
    made = json.loads(attrs.get(GENERATOR_ATTR, "null") or "null")
    diffs = (["no generator recorded"] if made is None else spec.differences(GenerationSpec.from_json(made))
             + ([f"shards: {shards} here, {attrs.get(SHARDS_ATTR)} there"] if attrs.get(SHARDS_ATTR) != shards else []))
    if diffs:
        raise ExistsError("out", f"{remote.display(store)}: expected a store of this generate call or a new one, "
                                 f"found one made otherwise ({'; '.join(diffs)}); pass {{overwrite=True}} to replace "
                                 "it", mentions=["overwrite"])
    return attrs


def _written(store: str, shards: int) -> dict[int, ShardRecord]:
    """The records in the store whose ranges' chunks still match their sha256 (a record cut short by a kill is
    ignored: its range is made again); the store is listed once for all of them."""
    fs, root = zarr_store.filesystem(store)
    records = {}
    for index in range(shards):
        try:
            records[index] = ShardRecord.from_json(json.loads(fs.cat_file(f"{root}/{_record_name(index, shards)}")))
        except (FileNotFoundError, ValueError, KeyError):
            continue
    found = zarr_store.region_digests(store, [range(r.start, r.stop) for r in records.values()])
    return {i: r for (i, r), made in zip(records.items(), found) if made == (r.bytes, r.sha256)}


def _record_name(index: int, count: int) -> str:
    return f"{RECORDS}/{shard_name(index, count).replace('.nc', '.json')}"


def _region_task(spec_json: dict, index: int, count: int, start: int, stop: int, store: str, device: str | None,
                 threads: int, *, options: Mapping | None) -> dict:
    """One Dask task: samples ``[start, stop)`` written into the store, then their record; returns the record."""
    torch.set_num_threads(threads)
    if options:
        remote.register(store, options)  # the URL's options, secrets included, in this worker's memory only
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    spec = GenerationSpec.from_json(spec_json)
    report = reporter(index)
    report(0.0)
    written = write_samples(spec, range(start, stop), store, region=True, device=device, progress=report)
    record = ShardRecord(index, count, start, stop, f"{SAMPLE}[{start}:{stop}]", written.bytes, written.sha256,
                         written.moments, written.parameters)
    fs, root = zarr_store.filesystem(store)
    fs.makedirs(f"{root}/{RECORDS}", exist_ok=True)
    fs.pipe_file(f"{root}/{_record_name(index, count)}", json.dumps(record.to_json()).encode())
    return record.to_json()
