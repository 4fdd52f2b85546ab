"""From a data file and a :class:`RunData` to what the trainer reads: normalizers and streaming loaders.

Nothing here loads a whole file. Normalizers are fitted in one streaming pass over the training split;
the train and validation sets are ``pde_data`` datasets over the file path (each DataLoader worker
opens the file itself) or, when they fit the memory budget (``cache="auto"``) or on request
(``cache="memory"``), cached in memory with identical items.

Example:
    >>> rd = describe(ds, window=10)
    >>> norms = fit_normalizers(ds, rd)
    >>> train, val = make_loaders("ns.h5", ds, rd, norms, LoaderConfig(workers=2), batch_size=20, seed=0)
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import xarray as xr
from torch.utils.data import Dataset

import pde_data
from operators.training.distributed import DistInfo
from operators.training.loader import Loader
from operators.training.rundata import RunData

__all__ = ["LoaderConfig", "fit_normalizers", "make_dataset", "make_loaders", "normalizers_from_state",
           "default_workers", "CACHE_MODES"]

CACHE_MODES = ("auto", "memory", "stream")


def default_workers() -> int:
    """``min(4, cores)``: worker processes reading a file while the main process trains."""
    return min(4, os.cpu_count() or 1)


@dataclass(frozen=True)
class LoaderConfig:
    """How data reaches the model (it never changes the results: same batches, same values).

    Args:
        cache: ``"stream"`` reads from the file every epoch; ``"memory"`` reads the train and validation
            samples once; ``"auto"`` caches when they fit ``memory_budget`` bytes.
        workers: DataLoader processes when streaming (``None``: :func:`default_workers`); cached
            data is sliced in the main process.
        prefetch: batches each worker reads ahead.
        memory_budget: bytes ``"auto"`` may cache (default 2 GiB), per process: under ``torchrun`` each
            process caches the train and validation samples for itself.
    """

    cache: str = "auto"
    workers: int | None = None
    prefetch: int = 2
    memory_budget: int = 2 << 30

    def __post_init__(self):
        if self.cache not in CACHE_MODES:
            raise ValueError(f"cache: expected one of {CACHE_MODES}, found {self.cache!r}")
        if self.workers is not None and self.workers < 0:
            raise ValueError(f"--workers: expected a non-negative integer, found {self.workers}")
        if self.memory_budget < 0:
            raise ValueError(f"--memory-budget: expected a non-negative size, found {self.memory_budget}")


def fit_normalizers(ds: xr.Dataset, rd: RunData) -> dict:
    """``{"input", "output"}`` → :class:`pde_data.Normalizer` (or ``None``): from the statistics shipped
    with the data when it has them for every variable (The Well's ``stats.yaml``), else fitted on the
    training split. Class labels have no normalizer."""
    if rd.normalize is None:
        return {"input": None, "output": None}
    train = list(rd.splits.train)

    def fit(variables):  # statistics shipped with the data (The Well's stats.yaml) first
        shipped = pde_data.normalizer_from_stats(ds, variables, kind=rd.normalize)
        return shipped or pde_data.fit_normalizer(ds, variables, indices=train, kind=rd.normalize)

    if rd.windowed:
        norm = fit(rd.inputs)
        return {"input": norm, "output": norm}
    return {"input": fit(rd.inputs), "output": None if rd.classifying else fit(rd.targets)}


def make_dataset(source, rd: RunData, indices, normalizers: dict, *, cache: bool = False,
                 dtype: torch.dtype = torch.float32) -> Dataset:
    """The dataset of ``indices``: windows ``(m, C, *s)`` → ``(horizon, C, *s)``, steady pairs, or
    images ``(C, *s)`` → labels."""
    if rd.classifying:
        return pde_data.LabelDataset(source, rd.inputs, rd.targets[0], indices=list(indices), cache=cache, dtype=dtype,
                                     input_normalizer=normalizers["input"])
    if rd.windowed:
        return pde_data.WindowDataset(source, rd.inputs, m=rd.m, horizon=rd.horizon, indices=list(indices),
                                      normalizer=normalizers["output"], stack=False, cache=cache, dtype=dtype)
    return pde_data.PairDataset(source, rd.inputs, rd.targets, indices=list(indices), cache=cache, dtype=dtype,
                                input_normalizer=normalizers["input"], output_normalizer=normalizers["output"])


def _cached(ds: xr.Dataset, rd: RunData, config: LoaderConfig, dtype: torch.dtype) -> bool:
    if config.cache != "auto":
        return config.cache == "memory"
    n = len(rd.splits.train) + len(rd.splits.val)
    need = n * pde_data.item_bytes(ds, sorted(set(rd.inputs) | set(rd.targets)), dtype)
    return need <= config.memory_budget


def make_loaders(source, ds: xr.Dataset, rd: RunData, normalizers: dict, config: LoaderConfig, *,
                 batch_size: int, seed: int, dist: DistInfo | None = None,
                 dtype: torch.dtype = torch.float32) -> tuple[Loader, Loader | None]:
    """Train loader (shuffled per epoch, this rank's slice of each batch) and validation loader (or None).

    ``source`` is the file path (or an in-memory Dataset); ``ds`` the same data opened here for sizes.
    """
    cache = _cached(ds, rd, config, dtype)
    workers = 0 if cache else (default_workers() if config.workers is None else config.workers)
    common = dict(workers=workers, prefetch=config.prefetch)
    train = Loader(make_dataset(source, rd, rd.splits.train, normalizers, cache=cache, dtype=dtype),
                   batch_size=batch_size, seed=seed, dist=dist, **common)
    val = None
    if rd.splits.val and (dist is None or dist.is_main):  # rank 0 validates alone
        val_set = make_dataset(source, rd, rd.splits.val, normalizers, cache=cache, dtype=dtype)
        val = Loader(val_set, batch_size=batch_size, shuffle=False, dist=DistInfo(device=(dist or DistInfo()).device),
                     **common)
    return train, val


def normalizers_from_state(state: dict) -> dict:
    """Inverse of ``{k: n.state_dict()}`` (``None`` stays ``None``)."""
    return {k: (None if v is None else pde_data.Normalizer.from_state_dict(v)) for k, v in state.items()}
