"""A torch dataset over sequence data (padded, irregular), and normalizers fitted on valid steps only.

A sequence set follows :mod:`pde_data.model`: inputs ``(sample, time[, feature])``, an optional ``time``
coordinate (shared ``(time,)`` or irregular ``(sample, time)``), an optional ``length`` variable for
unequal lengths, and targets per sequence (float ``(sample,)`` or an integer label) or per step (float
``(sample, time[, feature])``). :class:`SequenceDataset` reads a batch as

==========  ==========================================  ==============================================
tensor      shape                                       meaning
==========  ==========================================  ==============================================
``x``       ``(batch, time, in_channels)`` float        input variables as channels (``to_tensor``)
``y``       ``(batch, out_channels)`` float,            per-sequence targets,
            ``(batch, time, out_channels)`` float or    per-step targets,
            ``(batch,)`` int64                          or one label
``dt``      ``(batch, time)`` float                     step sizes (:func:`pde_data.model.time_steps`;
                                                        1.0 without a time coordinate and on padding)
``mask``    ``(batch, time)`` bool                      True on valid steps (all without ``length``)
==========  ==========================================  ==============================================

Normalizers encode ``x`` and a float ``y``; padded steps of ``x`` and of a per-step ``y`` are 0 after
encoding, as in the file. Items are read when asked for, one read per run of consecutive samples (the
per-sequence variables ``(sample,)`` — targets and lengths — are a few bytes per sample and read once).

Example:
    >>> norm = fit_sequence_normalizer(ds, ["health", "gap"], indices=splits["train"])
    >>> train = SequenceDataset("seq.nc", ["health", "gap"], ["rul"], indices=splits["train"], input_normalizer=norm)
    >>> x, y, dt, mask = train.read_batch([0, 1, 2])   # (3, 32, 2), (3, 1), (3, 32), (3, 32)
"""

from __future__ import annotations

import os
from typing import Sequence

import numpy as np
import torch
import xarray as xr

from pde_data.batches import BatchReads
from pde_data.labels import is_label, read_labels
from pde_data.model import FEATURE, LENGTH, SAMPLE, TIME, time_steps, to_tensor, valid_mask
from pde_data.normalize import KINDS, Normalizer, _Moments, _training_samples
from pde_data.reading import DataReadError, SourceHandle, one_line, read_samples, sample_runs

__all__ = ["SequenceDataset", "fit_sequence_normalizer"]

_STEP_DIMS = ({SAMPLE, TIME}, {SAMPLE, TIME, FEATURE})


def _open_source(source: xr.Dataset | str | os.PathLike) -> SourceHandle:
    """This module's one access to data: a handle whose ``.ds`` is the Dataset (a file is opened once per
    process, so a DataLoader worker opens its own) and whose ``.name`` names it in errors."""
    return SourceHandle(source)


def _is_step(da: xr.DataArray) -> bool:
    return set(da.dims) in _STEP_DIMS


def _kind(ds: xr.Dataset, names: Sequence[str], param: str) -> str:
    """``"label"`` (one integer label), ``"sequence"`` (float ``(sample,)``) or ``"step"`` (``(sample, time[,
    feature])``): the kind of all variables ``names``, else a ``ValueError`` naming the parameter ``param``."""
    missing = [v for v in names if v not in ds.data_vars]
    if not names or missing:
        raise ValueError(f"{param}: expected variables of the data set; missing {missing or 'all'}, "
                         f"found {list(ds.data_vars)}")
    if any(is_label(ds[v]) for v in names):
        if len(names) > 1:
            raise ValueError(f"{param}: expected one label variable alone, found {list(names)}")
        return "label"
    if all(tuple(ds[v].dims) == (SAMPLE,) for v in names):
        return "sequence"
    if all(_is_step(ds[v]) for v in names):
        return "step"
    raise ValueError(f"{param}: expected all per-sequence ({SAMPLE},) or all per-step ({SAMPLE}, {TIME}[, {FEATURE}]) "
                     f"variables, found dims {[tuple(ds[v].dims) for v in names]}")


def _per_sequence(ds: xr.Dataset, names: Sequence[str], samples: np.ndarray) -> np.ndarray:
    """Float variables ``(sample,)`` of ``samples``, ``(len(samples), len(names))`` (each read whole: a few bytes per sample)."""
    return np.stack([np.asarray(ds[v].values, dtype=np.float64)[samples] for v in names], axis=1)


def _read_run(ds: xr.Dataset, groups: Sequence[Sequence[str]], start: int, stop: int,
              dtype: torch.dtype) -> list[torch.Tensor]:
    """Samples ``start:stop``: each group of step variables ``(n, time, C)``, then the step sizes ``(n, time)``."""
    part = ds[[v for group in groups for v in group]].isel({SAMPLE: slice(start, stop)})
    out = [to_tensor(part, list(group), dtype=dtype) for group in groups]
    if TIME in part.coords:
        return out + [time_steps(part, dtype=dtype)]
    return out + [torch.ones((stop - start, part.sizes[TIME]), dtype=dtype)]


class SequenceDataset(BatchReads):
    """Sequence items ``(x, y, dt, mask)`` (layouts in the module docstring) for sample ``indices[k]``.

    Args:
        source: a Dataset of the sequence layout, or the path of a file :func:`pde_data.open_data` reads
            (opened by each process on first use; the dataset pickles as the path).
        inputs: input variables ``(sample, time[, feature])``, in channel order.
        targets: float variables ``(sample,)``, float variables ``(sample, time[, feature])``, or one label.
        indices: the samples of this split (default: all).
        input_normalizer, output_normalizer: applied to ``x`` and to a float ``y`` (fitted on the training
            split, e.g. by :func:`fit_sequence_normalizer`).
        cache: read the split's samples into memory once (items identical to reading them from the file).
    """

    def __init__(self, source: xr.Dataset | str | os.PathLike, inputs: Sequence[str], targets: Sequence[str], *,
                 indices: Sequence[int] | None = None, input_normalizer: Normalizer | None = None,
                 output_normalizer: Normalizer | None = None, cache: bool = False, dtype: torch.dtype = torch.float32):
        self.inputs, self.targets, self.dtype = list(inputs), list(targets), dtype
        self.input_normalizer, self.output_normalizer = input_normalizer, output_normalizer
        self._source = _open_source(source)
        ds = self._source.ds
        if _kind(ds, self.inputs, "inputs") != "step":
            raise ValueError(f"inputs: expected sequence variables of dims ({SAMPLE}, {TIME}[, {FEATURE}]), found "
                             f"{[tuple(ds[v].dims) for v in self.inputs]}")
        self.target_kind = _kind(ds, self.targets, "targets")
        n = ds.sizes[SAMPLE]
        self.indices = np.arange(n) if indices is None else np.asarray(indices, dtype=np.int64)
        if self.indices.size and (self.indices.min() < 0 or self.indices.max() >= n):
            raise ValueError(f"indices: expected sample indices in [0, {n}), found {self.indices.min()} .. "
                             f"{self.indices.max()}")
        self.n_time = ds.sizes[TIME]
        self._lengths = ds[LENGTH].values[self.indices] if LENGTH in ds.data_vars else None
        if self._lengths is not None:
            valid_mask(self._lengths, self.n_time)  # checks the lengths once
        if self.target_kind == "label":
            self._y = torch.as_tensor(read_labels(ds, self.targets[0], self.indices))
        elif self.target_kind == "sequence":
            self._y = torch.as_tensor(_per_sequence(ds, self.targets, self.indices), dtype=dtype)
        self._cached = np.unique(self.indices)
        self._cache = self._read(self._cached) if cache else None

    def __len__(self) -> int:
        return len(self.indices)

    @property
    def _groups(self) -> list[list[str]]:
        return [self.inputs, self.targets] if self.target_kind == "step" else [self.inputs]

    def _read(self, samples: np.ndarray) -> list[torch.Tensor]:
        """The step variables and step sizes of ``samples`` (sorted, distinct), one read per run of them."""
        runs = sample_runs(samples)
        try:
            parts = [_read_run(self._source.ds, self._groups, a, b, self.dtype) for a, b in runs]
            self._source.verify()  # a file changed under the reads (a truncated HDF5 file reads as zeros)
        except Exception as exc:  # noqa: BLE001 - every reader error becomes one line naming file and samples
            where = ", ".join(f"{a}" if b == a + 1 else f"{a}..{b - 1}" for a, b in runs)
            raise DataReadError(f"{self._source.name}: reading sample {where} failed: {one_line(exc)}") from exc
        return [torch.cat(group) for group in zip(*parts)]

    def _steps(self, samples: np.ndarray) -> list[torch.Tensor]:
        """The step tensors of ``samples`` (any order, repeats allowed): from the cache or one read."""
        if self._cache is not None:
            rows = torch.as_tensor(np.searchsorted(self._cached, samples))
            return [t[rows] for t in self._cache]
        distinct = np.unique(samples)
        rows = torch.as_tensor(np.searchsorted(distinct, samples))
        return [t[rows] for t in self._read(distinct)]

    def _mask(self, items: Sequence[int]) -> torch.Tensor:
        """``(len(items), time)`` bool, True on the valid steps of items ``items``."""
        if self._lengths is None:
            return torch.ones((len(items), self.n_time), dtype=torch.bool)
        return torch.from_numpy(valid_mask(self._lengths[np.asarray(items, dtype=np.int64)], self.n_time))

    def read_batch(self, items: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Items ``items`` stacked: ``(x, y, dt, mask)`` as in the module docstring."""
        items = np.asarray(items, dtype=np.int64)
        steps, mask = self._steps(self.indices[items]), self._mask(items)
        x, dt = _encode(steps[0], self.input_normalizer, mask), steps[-1].masked_fill(~mask, 1.0)
        if self.target_kind == "step":
            y = _encode(steps[1], self.output_normalizer, mask)
        elif self.target_kind == "sequence":
            y = _encode(self._y[torch.as_tensor(items)], self.output_normalizer)
        else:
            y = self._y[torch.as_tensor(items)]
        return x, y, dt, mask


def _encode(t: torch.Tensor, normalizer: Normalizer | None, mask: torch.Tensor | None = None) -> torch.Tensor:
    """``t`` encoded (a new tensor), with its padded steps (``~mask``, ``(batch, time)``) set to 0."""
    t = t if normalizer is None else normalizer.encode(t)
    return t if mask is None else t.masked_fill(~mask[..., None], 0.0)


def fit_sequence_normalizer(ds: xr.Dataset, variables: Sequence[str], *, indices: Sequence[int] | None = None,
                            kind: str = "gaussian", chunk_size: int = 4096, eps: float = 1e-8) -> Normalizer:
    """Per-channel statistics of ``variables`` on the samples ``indices``, over their valid steps only.

    As :func:`pde_data.fit_normalizer` (one streaming pass, Chan et al.'s merge of float64 moments,
    population std), but padded steps (``k >= length``) are left out, and per-sequence float variables
    ``(sample,)`` (regression targets) are allowed: all ``variables`` are step variables or all are
    per-sequence ones.

    Args:
        ds: a (lazy) Dataset of the sequence layout. variables: channels in order (``feature`` expands).
        indices: training samples (default: all). kind: ``"gaussian"`` or ``"minmax"``.
        chunk_size: samples read per block. eps: added to the scale.

    Returns:
        A :class:`Normalizer` with ``shift``, ``scale`` ``(channels,)`` float32 (broadcasting over
        ``(batch, [time,] channels)``).
    """
    if kind not in KINDS:
        raise ValueError(f"kind: expected one of {KINDS}, found {kind!r}")
    if chunk_size < 1:
        raise ValueError(f"chunk_size: expected a positive int, found {chunk_size}")
    steps = {"step": True, "sequence": False}.get(_kind(ds, variables, "variables"))
    if steps is None:
        raise ValueError(f"variables: expected float variables to normalize, found the label {list(variables)}")
    samples = _training_samples(ds, indices)
    lengths = ds[LENGTH].values if steps and LENGTH in ds.data_vars else None
    total = None
    for start in range(0, samples.size, chunk_size):
        block = samples[start:start + chunk_size]
        if steps:
            values = read_samples(ds, variables, block, dtype=torch.float64)  # (n, time, C)
            if lengths is not None:
                values = values[torch.from_numpy(valid_mask(lengths[block], values.shape[1]))]
        else:
            values = torch.from_numpy(_per_sequence(ds, variables, block))
        moments = _Moments.of(values.reshape(-1, values.shape[-1]), 1)
        if not bool(torch.isfinite(moments.mean).all()):
            raise ValueError(f"variables: expected finite training data in {list(variables)}, found NaN or Inf "
                             f"in samples {block[0]} .. {block[-1]}")
        total = moments if total is None else total.merge(moments)
    std = (total.m2 / total.count).sqrt()
    shift, scale = (total.mean, std + eps) if kind == "gaussian" else (total.low, total.high - total.low + eps)
    return Normalizer(kind, shift.float(), scale.float())
