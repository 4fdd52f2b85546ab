"""Classification data in the data model: images as field variables, one integer label per sample.

An image set is a Dataset whose image channels are field variables ``(sample, x, y)`` (one variable
per channel, e.g. ``image``, or ``red``/``green``/``blue``) and whose class is an integer variable of
dims ``(sample,)`` (e.g. ``label``), with values ``0 .. n_classes - 1``; its ``n_classes`` attribute
gives the number of classes (else the largest label + 1). Labels are a few bytes per sample and are
read whole; images stream like every other field (:class:`LabelDataset`).

Example:
    >>> ds = xr.Dataset({"image": (("sample", "x", "y"), images), "label": (("sample",), labels)})
    >>> train = LabelDataset(open_source("digits.nc"), ["image"], ["label"], indices=splits["train"])
    >>> batch = train.read_batch([0, 1, 2])   # inputs (3, 1, 8, 8) float32, targets (3,) int64
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch
import xarray as xr

from pde_data.datasets.batch import Batch
from pde_data.datasets.fields import SampleDataset
from pde_data.core.model import SAMPLE
from pde_data.formats.source import SourceLike

__all__ = ["is_label", "read_labels", "n_classes", "LabelDataset"]


def is_label(da: xr.DataArray) -> bool:
    """Whether ``da`` is a label variable: dims ``(sample,)`` and an integer dtype."""
    return tuple(da.dims) == (SAMPLE,) and da.dtype.kind in "iu"


def read_labels(ds: xr.Dataset, name: str, indices: Sequence[int] | None = None) -> np.ndarray:
    """The labels ``(len(indices),)`` int64 of variable ``name`` (all samples if ``indices`` is None).

    Raises:
        ValueError: ``name`` is missing, not a label variable, or holds a negative label.
    """
    if name not in ds.data_vars:
        raise ValueError(f"expected a label variable {name!r}; found variables {list(ds.data_vars)}")
    da = ds[name]
    if not is_label(da):
        raise ValueError(f"{name}: expected integer class labels of dims ({SAMPLE},), found {da.dtype} of dims "
                         f"{tuple(da.dims)}")
    values = np.asarray(da.values if indices is None else da.isel({SAMPLE: np.asarray(indices)}).values, np.int64)
    if values.size and values.min() < 0:
        raise ValueError(f"{name}: expected class labels >= 0, found {values.min()}")
    return values


def n_classes(ds: xr.Dataset, name: str) -> int:
    """The number of classes of label variable ``name``: its ``n_classes`` attribute, else the largest
    label + 1 (checked against the labels either way)."""
    labels = read_labels(ds, name)
    largest = int(labels.max()) + 1 if labels.size else 0
    stated = ds[name].attrs.get("n_classes")
    if stated is None:
        return max(largest, 1)
    if int(stated) < largest:
        raise ValueError(f"{name}: its n_classes attribute is {stated}, but labels reach {largest - 1}")
    return int(stated)


class LabelDataset(SampleDataset):
    """Classification items: the ``inputs`` variables of sample ``i`` (channel-first) → its label.

    Args:
        source: a :class:`pde_data.Source` (or a path, or a Dataset) of the module's layout.
        inputs: the image variables, in channel order. targets: the label variable, one (``()``: the images
            alone, the batches' ``targets`` None).
        indices: the samples of this split (default: all).
        cache: read the split's images into memory once (items identical to reading them from the file).
    """

    def __init__(self, source: SourceLike, inputs: Sequence[str], targets: Sequence[str], *,
                 indices: Sequence[int] | None = None, dtype: torch.dtype = torch.float32, cache: bool = False):
        self.inputs, self.targets = list(inputs), list(targets)
        if len(self.targets) > 1:
            raise ValueError(f"targets: expected one label variable (or none), found {self.targets}")
        super().__init__(source, self.inputs, indices, dtype)
        ds = self.source.dataset
        self._labels = torch.as_tensor(read_labels(ds, self.targets[0], self.indices)) if self.targets else None
        if cache:
            self._cache = (self._read(self.inputs, self.cached_samples),)

    def read_batch(self, items: Sequence[int]) -> Batch:
        """Items ``items`` stacked: images ``(batch, channels, *spatial)`` and labels ``(batch,)`` int64."""
        items = np.asarray(items, dtype=np.int64)
        (x,) = self._gather([self.inputs], self.indices[items])
        labels = None if self._labels is None else self._labels[torch.as_tensor(items)]
        return Batch(x, labels)
