"""Torch datasets over the samples of a :class:`pde_data.Source`: steady pairs and time windows.

Items are read when they are asked for, in batches that follow the file (one read per sample and
frame range, however many windows of that sample a batch holds): a lazy PDEBench or NetCDF file is
never loaded whole, and a window is a ``(sample, start)`` pair, never a copy. Every read goes through
the Source (:meth:`pde_data.Source.read`; HDF5 fields straight into the batch tensors, a window alone
in its batch into its rows of ``x`` and ``y`` at once), which a DataLoader worker opens again for
itself. Batch tensors live in memory reused once a batch is dropped (:class:`pde_data.datasets.batches.BatchBuffers`). With ``cache=True`` the split's samples are read once into
memory; items are then sliced from there, with values identical to reading them from the file. Splits
are explicit seeded index arrays (:func:`split_indices`). Batches are in the data's units: normalizers
(:mod:`pde_data.datasets.normalize`) are fitted on the training indices and applied by the caller (a run's
processor, :class:`operators.training.tasks.Normalizers`); every batch's tensors are fresh (never views of the
cache), so the caller may encode them in place.

``read_batch(items)`` returns the items stacked along a leading batch axis, a
:class:`pde_data.datasets.batch.Batch` (its table gives the layouts), and raises a one-line
:class:`DataReadError` naming the file, samples and frames when a read fails; torch's ``__getitem__``
and ``__getitems__`` come from :class:`pde_data.datasets.batches.BatchReads`, so a plain ``DataLoader`` with the
default collate batches them.

Example:
    >>> source = open_source("darcy.nc")
    >>> splits = split_indices(source.sizes["sample"], sizes=(800, 100, 100), seed=0)
    >>> norm = fit_normalizer(source, ["a"], indices=splits["train"])
    >>> train = PairDataset(source, ["a"], ["u"], indices=splits["train"])
    >>> batch = train.read_batch([0, 5, 7])          # batch.inputs, batch.targets: (3, 1, 128, 128) each
    >>> x = norm.encode_(batch.inputs)               # the model's inputs, encoded in place
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Sequence

import numpy as np
import torch
from pde_data.datasets.batch import Batch
from pde_data.datasets.batches import BatchBuffers, BatchReads
from pde_data.core.model import SAMPLE, TIME, spatial_dims
from pde_data.core.errors import DataReadError, one_line
from pde_data.formats.source import SourceLike, open_source, sample_runs

__all__ = ["split_indices", "default_sizes", "SampleDataset", "PairDataset", "WindowDataset", "item_bytes"]


def default_sizes(n: int) -> tuple[int, int, int]:
    """80/10/10 %: ``n // 10`` validation and test samples, at least one each once there are 3 samples (all train
    below), train the rest."""
    n_val = max(1, n // 10) if n >= 3 else 0
    return n - 2 * n_val, n_val, n_val


def split_indices(n_samples: int, *, sizes: Sequence[int] | None = None, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded disjoint ``train``/``val``/``test`` sample indices (each sorted, for sequential reads).

    Args:
        n_samples: number of samples in the Dataset.
        sizes: split sizes (train, val, test); their sum may not exceed ``n_samples``. Default
            :func:`default_sizes` (the one default split policy, every run's too).
        seed: seed of the permutation (same seed, same splits).
    """
    sizes = default_sizes(n_samples) if sizes is None else sizes
    if len(sizes) != 3 or min(sizes) < 0 or sum(sizes) > n_samples:
        raise ValueError(f"sizes: expected three non-negative sizes summing to <= {n_samples}, found {tuple(sizes)}")
    perm = np.random.default_rng(seed).permutation(n_samples)
    bounds = np.cumsum([0, *sizes])
    return {name: np.sort(perm[bounds[i]:bounds[i + 1]]) for i, name in enumerate(("train", "val", "test"))}


def _indices(n: int, indices: Sequence[int] | None) -> np.ndarray:
    idx = np.arange(n) if indices is None else np.asarray(indices, dtype=np.int64)
    if idx.size and (idx.min() < 0 or idx.max() >= n):
        raise ValueError(f"indices: expected sample indices in [0, {n}), found range [{idx.min()}, {idx.max()}]")
    return idx


def item_bytes(data: SourceLike, variables: Sequence[str], dtype: torch.dtype = torch.float32) -> int:
    """Bytes one sample of ``variables`` takes in memory as ``dtype`` (all frames, all channels)."""
    ds = open_source(data).dataset
    size = torch.tensor([], dtype=dtype).element_size()
    return sum(int(np.prod([n for d, n in ds[v].sizes.items() if d != SAMPLE])) for v in variables) * size


class SampleDataset(BatchReads):
    """What the datasets over the samples of one Source share (:class:`PairDataset`, :class:`WindowDataset`,
    :class:`pde_data.LabelDataset`, :class:`pde_data.SequenceDataset`): the ``source``, the split's
    ``indices``, the optional in-memory cache of the split's samples, batch reads through the Source and
    their one-line errors.

    Args:
        source: a :class:`pde_data.Source`, used as it is (never opened again in this process), or what
            :func:`pde_data.open_source` opens (a path, a shard glob, an in-memory Dataset).
        variables: every variable the dataset reads (checked to be present).
        indices: the samples of this split (default: all). dtype: of the tensors read.
        params: PDE parameters each batch carries as ``params`` ``(batch, len(params))`` (none: ``params`` None):
            :meth:`pde_data.Source.parameters`, read once for all samples (a number each).
    """

    def __init__(self, source: SourceLike, variables: Sequence[str], indices: Sequence[int] | None,
                 dtype: torch.dtype, params: Sequence[str] = ()):
        self.source, self.dtype = open_source(source), dtype
        ds = self.source.dataset
        missing = [v for v in variables if v not in ds.data_vars]
        if missing:
            raise ValueError(f"{type(self).__name__}: expected variables {list(variables)} in {self.source.name}; "
                             f"missing {missing}, found {list(ds.data_vars)}")
        self.indices = _indices(ds.sizes[SAMPLE], indices)
        self.params = list(params)
        try:
            self._params = torch.as_tensor(self.source.parameters(self.params), dtype=dtype) if params else None
        except ValueError as err:
            raise ValueError(f"{self.source.name}: {err}") from None
        self.cached_samples = np.unique(self.indices)
        self._cache: tuple[torch.Tensor, ...] | None = None
        self.buffers = BatchBuffers()  # the memory of batch tensors, reused once a batch is dropped

    def __len__(self) -> int:
        return len(self.indices)

    @property
    def cached(self) -> bool:
        return self._cache is not None

    def item_shape(self, variables: Sequence[str]) -> tuple[int, ...]:
        """``(channels, *spatial)`` of ``variables`` (one frame of one sample)."""
        ds = self.source.dataset
        return (len(variables), *(ds.sizes[d] for d in spatial_dims(ds[variables[0]])))

    @contextmanager
    def _naming(self, samples: Sequence[int], times: slice | None):
        """Turn any error of the reads inside into one line naming the file, the samples and frames."""
        try:
            yield
            self.source.verify()
        except Exception as exc:  # noqa: BLE001 - every reader error becomes one line naming file and sample
            runs = ", ".join(f"{a}" if b == a + 1 else f"{a}..{b - 1}" for a, b in sample_runs(samples))
            frames = "" if times is None else f", frames {times.start}..{times.stop - 1}"
            raise DataReadError(f"{self.source.name}: reading sample {runs}{frames} failed: {one_line(exc)}") from exc

    def _read(self, variables: Sequence[str], samples: Sequence[int], times: slice | None = None,
              out: torch.Tensor | tuple[torch.Tensor, ...] | None = None) -> torch.Tensor | tuple[torch.Tensor, ...]:
        """:meth:`pde_data.Source.read` (into ``out`` if given: a tensor, or tensors splitting the frames)
        with one-line errors."""
        with self._naming(samples, times):
            return self.source.read(variables, samples, times, dtype=self.dtype, out=out)

    def _params_of(self, samples: np.ndarray) -> torch.Tensor | None:
        """The parameters of ``samples`` (source indices), ``(len(samples), P)``; None without ``params``."""
        return None if self._params is None else self._params[torch.as_tensor(samples)]

    def _rows(self, samples: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.cached_samples, samples)

    def _gather(self, groups: list[list[str]], samples: np.ndarray) -> list[torch.Tensor]:
        """Samples ``samples`` (any order, repeats allowed) of each group of variables, ``(len(samples), C,
        *spatial)`` each: fresh tensors, sliced from the cache or read from the Source."""
        if self._cache is not None:
            rows = torch.as_tensor(self._rows(samples))
            return [part[rows] for part in self._cache]
        return [self._read(group, samples, out=self.buffers.tensor((len(samples), *self.item_shape(group)), self.dtype))
                for group in groups]


class PairDataset(SampleDataset):
    """Steady pairs: ``inputs`` variables of sample ``i`` → ``targets`` variables of the same sample.

    Args:
        source: a :class:`pde_data.Source` (or a path, or a Dataset) with dims ``(sample, *spatial)``
            (e.g. Darcy ``a`` → ``u``).
        inputs, targets: variable names, in channel order; no ``targets`` (``()``): the inputs read alone
            (the batches' ``targets`` None).
        indices: the samples of this split (default: all).
        cache: read the split's samples into memory once (items identical to reading them from the file).
        params: per-sample parameters each batch carries (:class:`SampleDataset`).
    """

    def __init__(self, source: SourceLike, inputs: Sequence[str], targets: Sequence[str], *,
                 indices: Sequence[int] | None = None, dtype: torch.dtype = torch.float32, cache: bool = False,
                 params: Sequence[str] = ()):
        self.inputs, self.targets = list(inputs), list(targets)
        super().__init__(source, self.inputs + self.targets, indices, dtype, params)
        if cache:
            self._cache = tuple(self._read(group, self.cached_samples) for group in self._groups)

    @property
    def _groups(self) -> list[list[str]]:
        return [self.inputs, self.targets] if self.targets else [self.inputs]

    def read_batch(self, items: Sequence[int]) -> Batch:
        """Items ``items`` stacked: inputs ``(batch, in_channels, *spatial)``, targets ``(batch, out_channels,
        *spatial)`` (None without targets)."""
        samples = self.indices[np.asarray(items, dtype=np.int64)]
        x, *y = self._gather(self._groups, samples)
        return Batch(x, y[0] if y else None, params=self._params_of(samples))


class WindowDataset(SampleDataset):
    """Time windows for autoregressive training: ``window`` given frames → the next ``horizon`` frame(s).

    Windows start at ``t0 = 0, stride, 2·stride, ...`` while ``t0 + window + horizon <= T``, for every sample
    of ``indices`` (PDEBench's ``initial_step`` is ``window``); window ``k`` is the pair ``windows[k] =
    (sample, t0)``. A batch reads each of its samples once, over the frames its windows span. A stride of at
    least ``T`` gives one window per sample, from its first frame (a rollout's given frames and its truth);
    ``horizon=0`` reads the given frames alone (``targets`` None: prediction).

    Args:
        source: a :class:`pde_data.Source` (or a path, or a Dataset) with dims ``(sample, time, *spatial)``.
        variables: the variables (channels), in order; inputs and targets use the same ones.
        window: number of given frames (e.g. 1, 3, 5, 10).
        indices: the samples of this split.
        horizon: frames predicted per window (0: none read). stride: step between window starts.
        cache: read the split's samples into memory once (items identical to reading them from the file).
        params: per-sample parameters each batch carries (:class:`SampleDataset`).
    """

    def __init__(self, source: SourceLike, variables: Sequence[str], *, window: int, indices: Sequence[int] | None = None,
                 horizon: int = 1, stride: int = 1, dtype: torch.dtype = torch.float32, cache: bool = False,
                 params: Sequence[str] = ()):
        self.variables, self.window, self.horizon = list(variables), window, horizon
        super().__init__(source, self.variables, indices, dtype, params)
        ds = self.source.dataset
        without = [v for v in self.variables if TIME not in ds[v].dims]
        if without:
            raise ValueError(f"WindowDataset: expected variables with a '{TIME}' dim; without time: {without}")
        n_time = ds.sizes[TIME]
        if window < 1 or horizon < 0 or stride < 1 or window + horizon > n_time:
            raise ValueError(f"WindowDataset: expected window >= 1, horizon >= 0, stride >= 1 and window + horizon <= "
                             f"{n_time} frames; found window={window}, horizon={horizon}, stride={stride}")
        starts = np.arange(0, n_time - window - horizon + 1, stride)
        self.windows = np.stack([np.repeat(self.indices, starts.size), np.tile(starts, self.indices.size)], axis=1)
        frames = slice(0, int(starts[-1]) + window + horizon)
        self._cache = (self._read(self.variables, self.cached_samples, frames),) if cache else None

    def __len__(self) -> int:
        return len(self.windows)

    def _block(self, sample: int, start: int, stop: int) -> torch.Tensor:
        """Frames ``start:stop`` of ``sample`` as stored: ``(stop - start, channels, *spatial)``."""
        if self._cache is not None:
            return self._cache[0][int(self._rows(np.array([sample]))[0]), start:stop]
        shape = (1, stop - start, *self.item_shape(self.variables))
        return self._read(self.variables, [sample], slice(start, stop), out=self.buffers.tensor(shape, self.dtype))[0]

    def read_batch(self, items: Sequence[int]) -> Batch:
        """Windows ``items`` stacked: inputs ``(batch, window, channels, *spatial)``, targets ``(batch, horizon, channels,
        *spatial)`` (None when ``horizon`` is 0).

        A window alone in the batch with its sample is read straight into its rows of ``x`` and ``y``;
        the samples of several windows are read once, over the frames their windows span, and each window
        copied from there (so is every window of the cache).
        """
        pairs = self.windows[np.asarray(items, dtype=np.int64)]
        length, item = self.window + self.horizon, self.item_shape(self.variables)
        x = self.buffers.tensor((len(pairs), self.window, *item), self.dtype)
        y = self.buffers.tensor((len(pairs), self.horizon, *item), self.dtype) if self.horizon else None
        for sample in np.unique(pairs[:, 0]):
            mine = np.flatnonzero(pairs[:, 0] == sample)
            if len(mine) == 1 and self._cache is None:
                k, t0 = int(mine[0]), int(pairs[mine[0], 1])
                rows = x[k:k + 1] if y is None else (x[k:k + 1], y[k:k + 1])
                self._read(self.variables, [sample], slice(t0, t0 + length), out=rows)
                continue
            first, last = int(pairs[mine, 1].min()), int(pairs[mine, 1].max())
            block = self._block(int(sample), first, last + length)
            for k in mine:
                t0 = int(pairs[k, 1]) - first
                x[k] = block[t0:t0 + self.window]
                if y is not None:
                    y[k] = block[t0 + self.window:t0 + length]
        return Batch(x, y, params=self._params_of(pairs[:, 0]))
