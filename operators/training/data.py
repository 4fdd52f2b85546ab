"""From a run's data and its task to what the trainer reads: streaming (or cached) loaders.

Nothing here loads a whole file. The train and validation sets are the task's datasets over the file
path (each DataLoader worker opens the file itself) or, when they fit the memory budget
(``loading.cache == "auto"``) or on request (``"memory"``), cached in memory with identical items. A run on
generated data (``data.generate``) trains on a :class:`~operators.training.online.StreamLoader` instead
(:class:`RunData` says which).

Example:
    >>> train, val = make_loaders(task, pde_data.open_source("ns.h5"), batch_size=20, seed=0)
    >>> data = RunData.open(spec)                    # the file, or a generator's fixed set and training stream
    >>> spec = data.resolve(spec)
    >>> task = make_task(spec, data.normalizers(make_task(spec)))
    >>> train, val = data.loaders(task, batch_size=20, seed=0)
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

import pde_data
from operators.training.distributed import DistInfo
from operators.training.loader import Loader
from operators.training.spec import RunSpec
from pde_data.core.room import format_bytes

if TYPE_CHECKING:  # a run on a file never imports the generated runs' module
    from operators.training import online

__all__ = ["make_loaders", "default_workers", "RunData", "MemoryPlan", "memory_plan"]


def default_workers() -> int:
    """``min(4, cores)``: worker processes reading a file while the main process trains."""
    return min(4, os.cpu_count() or 1)


def _set_bytes(task, source) -> int:
    """Bytes the train and validation splits take in memory (what the cache would hold)."""
    splits = task.spec.data.splits
    return (len(splits.train) + len(splits.val)) * task.item_bytes(source)


def _cached(task, source) -> bool:
    loading = task.spec.loading
    if loading.cache != "auto":
        return loading.cache == "memory"
    return _set_bytes(task, source) <= loading.memory_budget


def make_loaders(task, source, *, batch_size: int, seed: int, dist: DistInfo | None = None,
                 dtype: torch.dtype = torch.float32,
                 stream: online.Stream | None = None) -> tuple[Loader | online.StreamLoader, Loader | None]:
    """Train loader (shuffled per epoch, this rank's slice of each batch; over ``stream`` if given, else the
    training split) and validation loader (or None), reading through ``source`` (a :class:`pde_data.Source`:
    workers reopen its file themselves)."""
    loading, splits = task.spec.loading, task.spec.data.splits
    cache = _cached(task, source)
    workers = 0 if cache else (default_workers() if loading.workers is None else loading.workers)
    common = dict(workers=workers, prefetch=loading.prefetch)
    if stream is not None:
        from operators.training.online import StreamLoader

        train = StreamLoader(task, stream, source, batch_size=batch_size, seed=seed, dist=dist)
    else:
        train = Loader(task.batches(source, splits.train, cache=cache, dtype=dtype),
                       batch_size=batch_size, seed=seed, dist=dist, **common)
    val = None
    if splits.val and (dist is None or dist.is_main):  # rank 0 validates alone
        val_set = task.batches(source, splits.val, cache=cache, dtype=dtype)
        val = Loader(val_set, batch_size=batch_size, shuffle=False, dist=DistInfo(device=(dist or DistInfo()).device),
                     **common)
    return train, val


@dataclass(frozen=True)
class MemoryPlan:
    """What a run's data will hold in memory, said before the first epoch (:meth:`line`).

    ``set_bytes``: the train and validation splits; held in this process when ``cached``, else streamed.
    ``batch_bytes``: one training batch (every tensor of it). Each of ``workers`` loader processes of each of
    ``loaders`` loaders keeps up to ``kept`` batches of shared memory for reuse
    (:class:`pde_data.datasets.batches.BatchBuffers`); this process maps a worker's batch while it uses it.
    """

    set_bytes: int
    budget: int
    cached: bool
    batch_bytes: int
    workers: int
    loaders: int
    kept: int

    def line(self) -> str:
        """One line: cached or streamed (and why), the batch size in bytes and the workers' reused memory."""
        budget = f"the memory budget of {self.budget / 2**30:.3g} GiB"
        if self.cached:
            head = f"data: train+val cached in memory, {format_bytes(self.set_bytes)} (within {budget})"
        else:
            over = f"over {budget}" if self.set_bytes > self.budget else "streaming asked for"
            head = f"data: streamed from the file (train+val {format_bytes(self.set_bytes)}, {over})"
        shared = self.workers * self.loaders * self.kept * self.batch_bytes  # every worker's reused batch memory
        workers = (f"; {self.workers} workers x {self.loaders} loaders reuse about {self.kept} each "
                   f"({format_bytes(shared)} of shared memory)") if self.workers else ""
        return f"{head}; batches of {format_bytes(self.batch_bytes)}{workers}; plus the model's own working set"


def memory_plan(task, source, train: Loader, val: Loader | None, batch_size: int) -> MemoryPlan:
    """The :class:`MemoryPlan` of loaders made by :func:`make_loaders` (reads one item to size a batch)."""
    loading, dataset = task.spec.loading, train.dataset
    one = dataset.read_batch([0]).tensors()
    return MemoryPlan(set_bytes=_set_bytes(task, source), budget=loading.memory_budget, cached=_cached(task, source),
                      batch_bytes=sum(t.nbytes for t in one) * batch_size, workers=train.workers,
                      loaders=1 + (val is not None), kept=dataset.buffers.slots // len(one))


@dataclass
class RunData:
    """A run's data, opened once: ``source``, what it resolves, validates and tests on (its file, or a generated
    run's fixed set), and a generated run's training ``stream`` (None: the file's training split)."""

    source: pde_data.Source
    stream: online.Stream | None = None

    @classmethod
    def open(cls, spec: RunSpec, device: torch.device | str | None = None, dist: DistInfo | None = None) -> "RunData":
        """The data of ``spec``; a generated run's are made on ``device``, the next epoch's in the background
        unless ``loading.workers`` is 0, each of the ``dist`` processes making its part of every epoch."""
        if spec.data.generate is None:
            return cls(pde_data.open_source(spec.data.path, storage_options=spec.data.storage or None))
        from operators.training import online

        spec = online.completed(spec)
        stream = online.Stream(spec, device, background=spec.loading.workers != 0, dist=dist)
        return cls(online.open_fixed(spec, device), stream)

    def resolve(self, spec: RunSpec) -> RunSpec:
        """``spec`` fixed against the data (:func:`~operators.training.tasks.resolve`; a generated run's:
        :func:`online.resolve_run`)."""
        if spec.data.generate is None:
            from operators.training.tasks import resolve

            return resolve(spec, self.source)
        from operators.training import online

        return online.resolve_run(online.completed(spec), self.source)

    def normalizers(self, task):
        """The task's normalizers fitted on the training split, or on a generated run's first epoch."""
        if self.stream is None:
            return task.processor(self.source)
        from operators.training.online import fit_stream_normalizers

        return fit_stream_normalizers(task, self.stream)

    def loaders(self, task, *, batch_size: int, seed: int, dist: DistInfo | None = None) -> tuple:
        """:func:`make_loaders` of this data."""
        return make_loaders(task, self.source, batch_size=batch_size, seed=seed, dist=dist, stream=self.stream)
