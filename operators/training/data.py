"""From a data file and a run's task to what the trainer reads: streaming (or cached) loaders.

Nothing here loads a whole file. The train and validation sets are the task's datasets over the file
path (each DataLoader worker opens the file itself) or, when they fit the memory budget
(``loading.cache == "auto"``) or on request (``"memory"``), cached in memory with identical items.

Example:
    >>> train, val = make_loaders(task, pde_data.open_source("ns.h5"), batch_size=20, seed=0)
"""

from __future__ import annotations

import os

import torch

from operators.training.distributed import DistInfo
from operators.training.loader import Loader

__all__ = ["make_loaders", "default_workers"]


def default_workers() -> int:
    """``min(4, cores)``: worker processes reading a file while the main process trains."""
    return min(4, os.cpu_count() or 1)


def _cached(task, source) -> bool:
    loading, splits = task.spec.loading, task.spec.data.splits
    if loading.cache != "auto":
        return loading.cache == "memory"
    return (len(splits.train) + len(splits.val)) * task.item_bytes(source) <= loading.memory_budget


def make_loaders(task, source, *, batch_size: int, seed: int, dist: DistInfo | None = None,
                 dtype: torch.dtype = torch.float32) -> tuple[Loader, Loader | None]:
    """Train loader (shuffled per epoch, this rank's slice of each batch) and validation loader (or None),
    both reading through ``source`` (a :class:`pde_data.Source`: workers reopen its file themselves)."""
    loading, splits = task.spec.loading, task.spec.data.splits
    cache = _cached(task, source)
    workers = 0 if cache else (default_workers() if loading.workers is None else loading.workers)
    common = dict(workers=workers, prefetch=loading.prefetch)
    train = Loader(task.dataset(source, splits.train, cache=cache, dtype=dtype),
                   batch_size=batch_size, seed=seed, dist=dist, **common)
    val = None
    if splits.val and (dist is None or dist.is_main):  # rank 0 validates alone
        val_set = task.dataset(source, splits.val, cache=cache, dtype=dtype)
        val = Loader(val_set, batch_size=batch_size, shuffle=False, dist=DistInfo(device=(dist or DistInfo()).device),
                     **common)
    return train, val
