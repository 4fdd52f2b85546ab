"""A torch dataset over sequence data (padded, irregular), and normalizers fitted on valid steps only.

A sequence set follows :mod:`pde_data.core.model`: inputs ``(sample, time[, feature])``, an optional ``time``
coordinate (shared ``(time,)`` or irregular ``(sample, time)``), an optional ``length`` variable for
unequal lengths, and targets per sequence (float ``(sample,)`` or an integer label) or per step (float
``(sample, time[, feature])``). :class:`SequenceDataset` reads a :class:`pde_data.datasets.batch.Batch` (its
table): the input variables as channels (``to_tensor``), the targets, the step sizes ``dt``
(:func:`pde_data.core.model.time_steps`; 1.0 without a time coordinate and on padding) and the ``mask`` of valid
steps (all without ``length``).

Batches are in the data's units, padded steps of the inputs and of per-step targets 0; normalizers
(:func:`fit_sequence_normalizer`) are applied by the caller (a run's processor,
:class:`operators.training.tasks.Normalizers`, which keeps padded steps 0 after encoding). Items are read when
asked for, through the :class:`pde_data.Source` (one read per run of consecutive samples,
:meth:`pde_data.Source.read`); the per-sequence variables ``(sample,)`` — targets and lengths — are a few bytes
per sample and read once.

Example:
    >>> source = open_source("seq.nc")
    >>> norm = fit_sequence_normalizer(source, ["health", "gap"], indices=splits["train"])
    >>> train = SequenceDataset(source, ["health", "gap"], ["rul"], indices=splits["train"])
    >>> batch = train.read_batch([0, 1, 2])   # inputs (3, 32, 2), targets (3, 1), dt and mask (3, 32)
    >>> x = norm.encode(batch.inputs).masked_fill(~batch.mask[..., None], 0.0)
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch
import xarray as xr

from pde_data.datasets.batch import Batch
from pde_data.datasets.fields import SampleDataset
from pde_data.datasets.labels import is_label, read_labels
from pde_data.core.model import FEATURE, LENGTH, SAMPLE, TIME, time_steps, valid_mask
from pde_data.datasets.normalize import METHODS, Moments, Normalizer, training_samples
from pde_data.formats.source import SourceLike, open_source

__all__ = ["SequenceDataset", "fit_sequence_normalizer", "target_form", "is_step"]

_STEP_DIMS = ({SAMPLE, TIME}, {SAMPLE, TIME, FEATURE})

def is_step(da: xr.DataArray) -> bool:
    """Whether ``da`` has one value per step: dims ``(sample, time[, feature])``."""
    return set(da.dims) in _STEP_DIMS


def target_form(ds: xr.Dataset, names: Sequence[str], param: str) -> str:
    """``"label"`` (one integer label), ``"sequence"`` (float ``(sample,)``) or ``"step"`` (``(sample, time[,
    feature])``): the form of all variables ``names``, else a ``ValueError`` naming the parameter ``param``."""
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
    if all(is_step(ds[v]) for v in names):
        return "step"
    raise ValueError(f"{param}: expected all per-sequence ({SAMPLE},) or all per-step ({SAMPLE}, {TIME}[, {FEATURE}]) "
                     f"variables, found dims {[tuple(ds[v].dims) for v in names]}")


def _per_sequence(ds: xr.Dataset, names: Sequence[str], samples: np.ndarray) -> np.ndarray:
    """Float variables ``(sample,)`` of ``samples``, ``(len(samples), len(names))`` (each read whole: a few bytes per sample)."""
    return np.stack([np.asarray(ds[v].values, dtype=np.float64)[samples] for v in names], axis=1)


class SequenceDataset(SampleDataset):
    """Sequence items (a ``Batch`` of the layout in the module docstring) for sample ``indices[k]``.

    Args:
        source: a :class:`pde_data.Source` of the sequence layout, used as it is, or what
            :func:`pde_data.open_source` opens (a path, an in-memory Dataset).
        inputs: input variables ``(sample, time[, feature])``, in channel order.
        targets: float variables ``(sample,)``, float variables ``(sample, time[, feature])``, or one label;
            none (``()``) to read the inputs alone (``targets`` then None).
        indices: the samples of this split (default: all).
        cache: read the split's samples into memory once (items identical to reading them from the file).
    """

    def __init__(self, source: SourceLike, inputs: Sequence[str], targets: Sequence[str], *,
                 indices: Sequence[int] | None = None, cache: bool = False, dtype: torch.dtype = torch.float32):
        self.inputs, self.targets = list(inputs), list(targets)
        source = open_source(source)
        ds = source.dataset
        if target_form(ds, self.inputs, "inputs") != "step":
            raise ValueError(f"inputs: expected sequence variables of dims ({SAMPLE}, {TIME}[, {FEATURE}]), found "
                             f"{[tuple(ds[v].dims) for v in self.inputs]}")
        self.target_form = target_form(ds, self.targets, "targets") if self.targets else "none"
        super().__init__(source, self.inputs + self.targets, indices, dtype)
        self.n_time = ds.sizes[TIME]
        self._lengths = ds[LENGTH].values[self.indices] if LENGTH in ds.data_vars else None
        if self._lengths is not None:
            valid_mask(self._lengths, self.n_time)  # checks the lengths once
        if self.target_form == "label":
            self._y = torch.as_tensor(read_labels(ds, self.targets[0], self.indices))
        elif self.target_form == "sequence":
            self._y = torch.as_tensor(_per_sequence(ds, self.targets, self.indices), dtype=dtype)
        if cache:
            self._cache = tuple(self._steps(self.cached_samples))

    @property
    def _groups(self) -> list[list[str]]:
        return [self.inputs, self.targets] if self.target_form == "step" else [self.inputs]

    def _steps(self, samples: np.ndarray) -> list[torch.Tensor]:
        """Of ``samples`` (any order, repeats allowed): each group of step variables ``(n, time, C)``, then the
        step sizes ``(n, time)``; sliced from the cache, or read through the Source with one-line errors."""
        if self._cache is not None:
            rows = torch.as_tensor(self._rows(samples))
            return [t[rows] for t in self._cache]
        return [self._read(group, samples) for group in self._groups] + [self._step_sizes(samples)]

    def _step_sizes(self, samples: np.ndarray) -> torch.Tensor:
        """``(len(samples), time)`` step sizes from the ``time`` coordinate (:func:`pde_data.core.model.time_steps`;
        1.0 without one)."""
        ds = self.source.dataset
        if TIME not in ds.coords:
            return torch.ones((len(samples), self.n_time), dtype=self.dtype)
        distinct, rows = np.unique(samples, return_inverse=True)
        with self._naming(samples, None):
            dt = time_steps(ds[[self.inputs[0]]].isel({SAMPLE: distinct}), dtype=self.dtype)
        return dt[torch.as_tensor(rows.reshape(-1))]

    def _mask(self, items: Sequence[int]) -> torch.Tensor:
        """``(len(items), time)`` bool, True on the valid steps of items ``items``."""
        if self._lengths is None:
            return torch.ones((len(items), self.n_time), dtype=torch.bool)
        return torch.from_numpy(valid_mask(self._lengths[np.asarray(items, dtype=np.int64)], self.n_time))

    def read_batch(self, items: Sequence[int]) -> Batch:
        """Items ``items`` stacked, as in the module docstring."""
        items = np.asarray(items, dtype=np.int64)
        steps, mask = self._steps(self.indices[items]), self._mask(items)
        padded = ~mask[..., None]
        x, dt = steps[0].masked_fill(padded, 0.0), steps[-1].masked_fill(~mask, 1.0)
        y = None  # no targets (prediction from the inputs alone)
        if self.target_form == "step":
            y = steps[1].masked_fill(padded, 0.0)
        elif self.target_form in ("sequence", "label"):
            y = self._y[torch.as_tensor(items)]
        return Batch(x, y, dt, mask)


def fit_sequence_normalizer(data: SourceLike, variables: Sequence[str], *, indices: Sequence[int] | None = None,
                            method: str = "gaussian", chunk_size: int = 4096, eps: float = 1e-8) -> Normalizer:
    """Per-channel statistics of ``variables`` on the samples ``indices``, over their valid steps only.

    As :func:`pde_data.fit_normalizer` (one streaming pass, Chan et al.'s merge of float64 moments,
    population std: :class:`pde_data.datasets.normalize.Moments`), but padded steps (``k >= length``) are left out,
    and per-sequence float variables ``(sample,)`` (regression targets) are allowed: all ``variables`` are
    step variables or all are per-sequence ones.

    Args:
        data: a :class:`pde_data.Source` of the sequence layout (or what :func:`pde_data.open_source` takes:
            a path, a Dataset). variables: channels in order (``feature`` expands).
        indices: training samples (default: all). method: ``"gaussian"`` or ``"minmax"``.
        chunk_size: samples read per block. eps: added to the scale.

    Returns:
        A :class:`Normalizer` with ``shift``, ``scale`` ``(channels,)`` float32 (broadcasting over
        ``(batch, [time,] channels)``).
    """
    if method not in METHODS:
        raise ValueError(f"method: expected one of {METHODS}, found {method!r}")
    if chunk_size < 1:
        raise ValueError(f"chunk_size: expected a positive int, found {chunk_size}")
    source = open_source(data)
    ds = source.dataset
    steps = {"step": True, "sequence": False}.get(target_form(ds, variables, "variables"))
    if steps is None:
        raise ValueError(f"variables: expected float variables to normalize, found the label {list(variables)}")
    samples = training_samples(ds.sizes[SAMPLE], indices)
    lengths = ds[LENGTH].values if steps and LENGTH in ds.data_vars else None
    total = None
    for start in range(0, samples.size, chunk_size):
        block = samples[start:start + chunk_size]
        if steps:
            values = source.read(variables, block, dtype=torch.float64)  # (n, time, C)
            if lengths is not None:
                values = values[torch.from_numpy(valid_mask(lengths[block], values.shape[1]))]
        else:
            values = torch.from_numpy(_per_sequence(ds, variables, block))
        moments = Moments.of(values.reshape(-1, values.shape[-1]), 1)
        if not bool(torch.isfinite(moments.mean).all()):
            raise ValueError(f"variables: expected finite training data in {list(variables)}, found NaN or Inf "
                             f"in samples {block[0]} .. {block[-1]}")
        total = moments if total is None else total.merge(moments)
    return total.normalizer(method, eps)
