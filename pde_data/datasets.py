"""Torch datasets over (possibly lazy) Datasets of the data model: steady pairs and time windows.

Items are read when they are asked for, in batches that follow the file (one read per sample and
frame range, however many windows of that sample a batch holds): a lazy PDEBench or NetCDF file is
never loaded whole, and a window is a ``(sample, start)`` pair, never a copy. Given a file path
instead of a Dataset, every process (each DataLoader worker) opens the file itself. With
``cache=True`` the split's samples are read once into memory; items are then sliced from there, with
values identical to reading them from the file. Splits are explicit seeded index arrays
(:func:`split_indices`); normalizers (:mod:`pde_data.normalize`) are fitted on the training indices and
applied per item.

==================  ======================================  =========================================
dataset             item ``x``                              item ``y``
==================  ======================================  =========================================
``PairDataset``     ``(in_channels, *spatial)``             ``(out_channels, *spatial)``
``WindowDataset``   ``(m * channels, *spatial)`` (frames     ``(channels, *spatial)`` (``horizon`` 1) or
                    stacked in time order, channel index    ``(horizon, channels, *spatial)``;
                    ``frame * channels + c``) or            ``(horizon, channels, *spatial)`` always
                    ``(m, channels, *spatial)`` if not      if not ``stack``
                    ``stack``
==================  ======================================  =========================================

``read_batch(items)`` returns the items stacked along a leading batch axis; a DataLoader fetches whole
batches through ``__getitems__``, which hands a read error back as a :class:`ReadFailure` naming the
file and sample (the loader raises it in the main process as one line).

Example:
    >>> splits = split_indices(ds.sizes["sample"], sizes=(800, 100, 100), seed=0)
    >>> norm = fit_normalizer(ds, ["a"], indices=splits["train"])
    >>> train = PairDataset("darcy.nc", ["a"], ["u"], indices=splits["train"], input_normalizer=norm)
    >>> x, y = train.read_batch([0, 5, 7])          # (3, 1, 128, 128) each
"""

from __future__ import annotations

import math
import os
from contextlib import contextmanager
from typing import Sequence

import numpy as np
import torch
import xarray as xr
from torch.utils.data import Dataset, get_worker_info

from pde_data.model import SAMPLE, TIME, spatial_dims
from pde_data.normalize import Normalizer
from pde_data.reading import (DataReadError, ReadFailure, SourceHandle, direct_sources, one_line, read_channels_into,
                              read_samples, sample_runs)

__all__ = ["split_indices", "PairDataset", "WindowDataset", "item_bytes"]

Source = xr.Dataset | str | os.PathLike


def split_indices(
    n_samples: int,
    *,
    sizes: Sequence[int] | None = None,
    fractions: Sequence[float] = (0.8, 0.1, 0.1),
    seed: int = 0,
) -> dict[str, np.ndarray]:
    """Seeded disjoint ``train``/``val``/``test`` sample indices (each sorted, for sequential reads).

    Args:
        n_samples: number of samples in the Dataset.
        sizes: explicit split sizes (train, val, test); their sum may not exceed ``n_samples``.
        fractions: used when ``sizes`` is omitted; train takes the rounding remainder.
        seed: seed of the permutation (same seed, same splits).
    """
    if sizes is None:
        if len(fractions) != 3 or min(fractions) < 0 or sum(fractions) > 1 + 1e-9:
            raise ValueError(f"fractions: expected three non-negative numbers summing to <= 1, found {tuple(fractions)}")
        val, test = (int(round(f * n_samples)) for f in fractions[1:])
        sizes = (min(n_samples - val - test, int(round(fractions[0] * n_samples))), val, test)
    if len(sizes) != 3 or min(sizes) < 0 or sum(sizes) > n_samples:
        raise ValueError(f"sizes: expected three non-negative sizes summing to <= {n_samples}, found {tuple(sizes)}")
    perm = np.random.default_rng(seed).permutation(n_samples)
    bounds = np.cumsum([0, *sizes])
    return {name: np.sort(perm[bounds[i]:bounds[i + 1]]) for i, name in enumerate(("train", "val", "test"))}


def _indices(ds: xr.Dataset, indices: Sequence[int] | None) -> np.ndarray:
    n = ds.sizes[SAMPLE]
    idx = np.arange(n) if indices is None else np.asarray(indices, dtype=np.int64)
    if idx.size and (idx.min() < 0 or idx.max() >= n):
        raise ValueError(f"indices: expected sample indices in [0, {n}), found range [{idx.min()}, {idx.max()}]")
    return idx


def _encode_(t: torch.Tensor, normalizer: Normalizer | None) -> torch.Tensor:
    """``t`` encoded in place (``t`` must be a fresh tensor of this batch, never a view of the cache)."""
    return t if normalizer is None else normalizer.encode_(t)


def _batch_tensor(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """An uninitialised batch tensor; in a DataLoader worker it lives in shared memory, so handing it to
    the main process copies nothing (as torch's ``default_collate`` does for its stacked batches)."""
    if get_worker_info() is None:
        return torch.empty(shape, dtype=dtype)
    proto = torch.empty(0, dtype=dtype)
    storage = proto._typed_storage()._new_shared(math.prod(shape), device=proto.device)
    return proto.new(storage).resize_(shape)


def item_bytes(ds: xr.Dataset, variables: Sequence[str], dtype: torch.dtype = torch.float32) -> int:
    """Bytes one sample of ``variables`` takes in memory as ``dtype`` (all frames, all channels)."""
    size = torch.tensor([], dtype=dtype).element_size()
    return sum(int(np.prod([n for d, n in ds[v].sizes.items() if d != SAMPLE])) for v in variables) * size


class _SampleItems(Dataset):
    """What the datasets (here and :class:`pde_data.labels.LabelDataset`) share: the source handle, the split's samples, the cache and error wrapping."""

    def _setup(self, source: Source, variables: Sequence[str], indices, dtype: torch.dtype, cache: bool) -> None:
        self.handle, self.dtype = SourceHandle(source), dtype
        ds = self.handle.ds
        missing = [v for v in variables if v not in ds.data_vars]
        if missing:
            raise ValueError(f"{type(self).__name__}: expected variables {list(variables)} in {self.handle.name}; "
                             f"missing {missing}, found {list(ds.data_vars)}")
        self.indices = _indices(ds, indices)
        self.cached_samples = np.unique(self.indices)
        self._cache: tuple[torch.Tensor, ...] | None = self._load_cache() if cache else None

    @property
    def ds(self) -> xr.Dataset:
        return self.handle.ds

    @property
    def cached(self) -> bool:
        return self._cache is not None

    def item_shape(self, variables: Sequence[str]) -> tuple[int, ...]:
        """``(channels, *spatial)`` of ``variables`` (one frame of one sample)."""
        return (len(variables), *(self.ds.sizes[d] for d in spatial_dims(self.ds[variables[0]])))

    @contextmanager
    def _naming(self, samples: Sequence[int], time: slice | None):
        """Turn any error of the reads inside into one line naming the file, the samples and frames."""
        try:
            yield
            self.handle.verify()
        except Exception as exc:  # noqa: BLE001 - every reader error becomes one line naming file and sample
            runs = ", ".join(f"{a}" if b == a + 1 else f"{a}..{b - 1}" for a, b in sample_runs(samples))
            frames = "" if time is None else f", frames {time.start}..{time.stop - 1}"
            raise DataReadError(f"{self.handle.name}: reading sample {runs}{frames} failed: {one_line(exc)}") from exc

    def _read(self, variables: Sequence[str], samples: Sequence[int], time: slice | None = None) -> torch.Tensor:
        """``read_samples`` through the xarray objects (any source): ``(samples, [time], C, *spatial)``."""
        with self._naming(samples, time):
            return read_samples(self.ds, variables, samples, time=time, dtype=self.dtype)

    def _read_into(self, sources: list, out: torch.Tensor, where: tuple, sample: int, time: slice | None = None) -> None:
        """``read_channels_into``: one sample straight from the HDF5 file into ``out[where]``."""
        with self._naming([sample], time):
            read_channels_into(sources, out.numpy(), where, sample, time)

    def _rows(self, samples: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.cached_samples, samples)

    def _read_groups(self, groups: list[list[str]]) -> tuple[torch.Tensor, ...]:
        """The cache of groups of variables: the split's samples of each, ``(samples, C, *spatial)``, one read."""
        every = self._read([v for group in groups for v in group], self.cached_samples)
        return tuple(part.clone() for part in every.split([len(group) for group in groups], dim=1))

    def _gather(self, groups: list[list[str]], samples: np.ndarray) -> list[torch.Tensor]:
        """Samples ``samples`` (any order, repeats allowed) of each group of variables, ``(len(samples),
        C, *spatial)`` each: sliced from the cache, read straight from a PDEBench file, or through xarray."""
        if self._cache is not None:
            rows = torch.as_tensor(self._rows(samples))
            return [part[rows] for part in self._cache]
        every = [v for group in groups for v in group]
        sources = direct_sources(self.ds, every)
        if sources is not None:  # PDEBench HDF5: each sample read straight into the batch tensors
            out, first = [], 0
            for group in groups:
                batch = _batch_tensor((len(samples), *self.item_shape(group)), self.dtype)
                for k, sample in enumerate(samples):
                    self._read_into(sources[first:first + len(group)], batch, (k,), int(sample))
                out.append(batch)
                first += len(group)
            return out
        distinct = np.unique(samples)
        every = self._read(every, distinct)[torch.as_tensor(np.searchsorted(distinct, samples))]
        return list(every.split([len(group) for group in groups], dim=1))

    def __getitems__(self, items: Sequence[int]):
        """A DataLoader's batch fetch: ``read_batch(items)``, or a :class:`ReadFailure` naming the error."""
        try:
            return self.read_batch(items)
        except DataReadError as exc:
            return ReadFailure(str(exc))

    def __getitem__(self, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = self.read_batch([k])
        return x[0], y[0]


class PairDataset(_SampleItems):
    """Steady pairs: ``inputs`` variables of sample ``i`` → ``outputs`` variables of the same sample.

    Args:
        source: a Dataset with dims ``(sample, *spatial)`` (e.g. Darcy ``a`` → ``u``), or the path of a
            file (opened by each process on first use).
        inputs, outputs: variable names, in channel order.
        indices: the samples of this split (default: all).
        input_normalizer, output_normalizer: applied per item (fitted on the training split).
        cache: read the split's samples into memory once (items identical to reading them from the file).
    """

    def __init__(self, source: Source, inputs: Sequence[str], outputs: Sequence[str], *,
                 indices: Sequence[int] | None = None, input_normalizer: Normalizer | None = None,
                 output_normalizer: Normalizer | None = None, dtype: torch.dtype = torch.float32,
                 cache: bool = False):
        self.inputs, self.outputs = list(inputs), list(outputs)
        self.input_normalizer, self.output_normalizer = input_normalizer, output_normalizer
        self._setup(source, self.inputs + self.outputs, indices, dtype, cache)

    def __len__(self) -> int:
        return len(self.indices)

    def _load_cache(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self._read_groups([self.inputs, self.outputs])

    def read_batch(self, items: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """Items ``items`` stacked: ``(batch, in_channels, *spatial)``, ``(batch, out_channels, *spatial)``."""
        samples = self.indices[np.asarray(items, dtype=np.int64)]
        x, y = self._gather([self.inputs, self.outputs], samples)
        return _encode_(x, self.input_normalizer), _encode_(y, self.output_normalizer)


class WindowDataset(_SampleItems):
    """Time windows for autoregressive training: ``m`` given frames → the next ``horizon`` frame(s).

    Windows start at ``t0 = 0, stride, 2·stride, ...`` while ``t0 + m + horizon <= T``, for every sample
    of ``indices`` (PDEBench's ``initial_step`` is ``m``); window ``k`` is the pair ``windows[k] =
    (sample, t0)``. A batch reads each of its samples once, over the frames its windows span.

    Args:
        source: a Dataset with dims ``(sample, time, *spatial)``, or the path of such a file.
        variables: the variables (channels), in order; inputs and targets use the same ones.
        m: number of given frames (e.g. 1, 3, 5, 10).
        indices: the samples of this split. normalizer: per-channel, applied to every frame.
        horizon: frames predicted per window. stride: step between window starts.
        stack: stack the ``m`` frames along channels (``(m·C, *spatial)``) or keep ``(m, C, *spatial)``.
        cache: read the split's samples into memory once (items identical to reading them from the file).
    """

    def __init__(self, source: Source, variables: Sequence[str], *, m: int, indices: Sequence[int] | None = None,
                 normalizer: Normalizer | None = None, horizon: int = 1, stride: int = 1, stack: bool = True,
                 dtype: torch.dtype = torch.float32, cache: bool = False):
        self.variables, self.m, self.horizon = list(variables), m, horizon
        self.normalizer, self.stack = normalizer, stack
        self._setup(source, self.variables, indices, dtype, cache=False)
        ds = self.ds
        without = [v for v in self.variables if TIME not in ds[v].dims]
        if without:
            raise ValueError(f"WindowDataset: expected variables with a '{TIME}' dim; without time: {without}")
        n_time = ds.sizes[TIME]
        if m < 1 or horizon < 1 or stride < 1 or m + horizon > n_time:
            raise ValueError(f"WindowDataset: expected m >= 1, horizon >= 1, stride >= 1 and m + horizon <= "
                             f"{n_time} frames; found m={m}, horizon={horizon}, stride={stride}")
        starts = np.arange(0, n_time - m - horizon + 1, stride)
        self.windows = np.stack([np.repeat(self.indices, starts.size), np.tile(starts, self.indices.size)], axis=1)
        self._frames = int(starts[-1]) + m + horizon
        self._cache = self._load_cache() if cache else None

    def __len__(self) -> int:
        return len(self.windows)

    def _load_cache(self) -> tuple[torch.Tensor]:
        return (self._read(self.variables, self.cached_samples, slice(0, self._frames)),)

    def _block(self, sources: list | None, sample: int, start: int, stop: int) -> torch.Tensor:
        """Frames ``start:stop`` of ``sample`` as stored: ``(stop - start, channels, *spatial)``."""
        if self._cache is not None:
            return self._cache[0][int(self._rows(np.array([sample]))[0]), start:stop]
        if sources is None:
            return self._read(self.variables, [sample], slice(start, stop))[0]
        block = torch.empty((stop - start, *self.item_shape(self.variables)), dtype=self.dtype)
        self._read_into(sources, block, (), sample, slice(start, stop))
        return block

    def read_batch(self, items: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """Windows ``items`` stacked along a leading batch axis (layouts in the module docstring).

        A sample with one window in the batch is read straight into the batch tensors when the file is
        a PDEBench HDF5 file (one copy); a sample with several windows is read once, over the frames
        they span, and each window copied from there. The batch tensors are then encoded in place.
        """
        pairs = self.windows[np.asarray(items, dtype=np.int64)]
        length, item = self.m + self.horizon, self.item_shape(self.variables)
        sources = None if self._cache is not None else direct_sources(self.ds, self.variables)
        x = _batch_tensor((len(pairs), self.m, *item), self.dtype)
        y = _batch_tensor((len(pairs), self.horizon, *item), self.dtype)
        for sample in np.unique(pairs[:, 0]):
            mine = np.flatnonzero(pairs[:, 0] == sample)
            if sources is not None and len(mine) == 1:
                k, t0 = int(mine[0]), int(pairs[mine[0], 1])
                self._read_into(sources, x, (k,), int(sample), slice(t0, t0 + self.m))
                self._read_into(sources, y, (k,), int(sample), slice(t0 + self.m, t0 + length))
                continue
            first, last = int(pairs[mine, 1].min()), int(pairs[mine, 1].max())
            block = self._block(sources, int(sample), first, last + length)
            for k in mine:
                t0 = int(pairs[k, 1]) - first
                x[k], y[k] = block[t0:t0 + self.m], block[t0 + self.m:t0 + length]
        x, y = _encode_(x, self.normalizer), _encode_(y, self.normalizer)
        if self.stack:
            x = x.flatten(1, 2)
            y = y[:, 0] if self.horizon == 1 else y
        return x, y
