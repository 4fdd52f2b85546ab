"""Torch datasets over (possibly lazy) Datasets of the data model: steady pairs and time windows.

Each item is read from the underlying Dataset when it is asked for (a lazy PDEBench or NetCDF file is
never loaded whole) and converted through :func:`pde_data.model.to_tensor` only. Splits are explicit
seeded index arrays (:func:`split_indices`); normalizers (:mod:`pde_data.normalize`) are fitted on the
training indices and applied per item.

==================  ======================================  =========================================
dataset             item ``x``                              item ``y``
==================  ======================================  =========================================
``PairDataset``     ``(in_channels, *spatial)``             ``(out_channels, *spatial)``
``WindowDataset``   ``(m * channels, *spatial)`` (frames     ``(channels, *spatial)`` (``horizon`` 1) or
                    stacked in time order, channel index    ``(horizon, channels, *spatial)``
                    ``frame * channels + c``) or
                    ``(m, channels, *spatial)`` if not
                    ``stack``
==================  ======================================  =========================================

Example:
    >>> splits = split_indices(ds.sizes["sample"], sizes=(800, 100, 100), seed=0)
    >>> norm = fit_normalizer(ds, ["a"], indices=splits["train"])
    >>> train = PairDataset(ds, ["a"], ["u"], indices=splits["train"], input_normalizer=norm)
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch
import xarray as xr
from torch.utils.data import Dataset

from pde_data.model import SAMPLE, TIME, to_tensor
from pde_data.normalize import Normalizer

__all__ = ["split_indices", "PairDataset", "WindowDataset"]


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


def _encode(t: torch.Tensor, normalizer: Normalizer | None) -> torch.Tensor:
    return t if normalizer is None else normalizer.encode(t)


class PairDataset(Dataset):
    """Steady pairs: ``inputs`` variables of sample ``i`` → ``outputs`` variables of the same sample.

    Args:
        ds: Dataset with dims ``(sample, *spatial)`` (e.g. Darcy ``a`` → ``u``, order benchmark ``input`` → ``target``).
        inputs, outputs: variable names, in channel order.
        indices: the samples of this split (default: all).
        input_normalizer, output_normalizer: applied per item (fitted on the training split).
    """

    def __init__(self, ds: xr.Dataset, inputs: Sequence[str], outputs: Sequence[str], *,
                 indices: Sequence[int] | None = None, input_normalizer: Normalizer | None = None,
                 output_normalizer: Normalizer | None = None, dtype: torch.dtype = torch.float32):
        for name in (*inputs, *outputs):
            if name not in ds.data_vars:
                raise ValueError(f"PairDataset: expected variable '{name}'; found {list(ds.data_vars)}")
        self.ds, self.inputs, self.outputs = ds, list(inputs), list(outputs)
        self.indices = _indices(ds, indices)
        self.input_normalizer, self.output_normalizer, self.dtype = input_normalizer, output_normalizer, dtype

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        sample = self.ds.isel({SAMPLE: [int(self.indices[k])]})
        x = to_tensor(sample, self.inputs, dtype=self.dtype)[0]
        y = to_tensor(sample, self.outputs, dtype=self.dtype)[0]
        return _encode(x, self.input_normalizer), _encode(y, self.output_normalizer)


class WindowDataset(Dataset):
    """Time windows for autoregressive training: ``m`` given frames → the next ``horizon`` frame(s).

    Windows start at ``t0 = 0, stride, 2·stride, ...`` while ``t0 + m + horizon <= T``, for every sample
    of ``indices`` (PDEBench's ``initial_step`` is ``m``).

    Args:
        ds: Dataset with dims ``(sample, time, *spatial)``.
        variables: the variables (channels), in order; inputs and targets use the same ones.
        m: number of given frames (e.g. 1, 3, 5, 10).
        indices: the samples of this split. normalizer: per-channel, applied to every frame.
        horizon: frames predicted per window. stride: step between window starts.
        stack: stack the ``m`` frames along channels (``(m·C, *spatial)``) or keep ``(m, C, *spatial)``.
    """

    def __init__(self, ds: xr.Dataset, variables: Sequence[str], *, m: int, indices: Sequence[int] | None = None,
                 normalizer: Normalizer | None = None, horizon: int = 1, stride: int = 1, stack: bool = True,
                 dtype: torch.dtype = torch.float32):
        missing = [v for v in variables if v not in ds.data_vars or TIME not in ds[v].dims]
        if missing:
            raise ValueError(f"WindowDataset: expected variables with a '{TIME}' dim; not found/without time: {missing}")
        n_time = ds.sizes[TIME]
        if m < 1 or horizon < 1 or stride < 1 or m + horizon > n_time:
            raise ValueError(f"WindowDataset: expected m >= 1, horizon >= 1, stride >= 1 and m + horizon <= "
                             f"{n_time} frames; found m={m}, horizon={horizon}, stride={stride}")
        self.ds, self.variables, self.m, self.horizon = ds, list(variables), m, horizon
        self.normalizer, self.stack, self.dtype = normalizer, stack, dtype
        starts = np.arange(0, n_time - m - horizon + 1, stride)
        samples = _indices(ds, indices)
        self.windows = np.stack([np.repeat(samples, starts.size), np.tile(starts, samples.size)], axis=1)

    def __len__(self) -> int:
        return len(self.windows)

    def __getitem__(self, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        sample, t0 = (int(v) for v in self.windows[k])
        block = self.ds[self.variables].isel({SAMPLE: [sample], TIME: slice(t0, t0 + self.m + self.horizon)})
        frames = _encode(to_tensor(block, self.variables, dtype=self.dtype)[0], self.normalizer)
        x, y = frames[: self.m], frames[self.m:]
        if self.stack:
            x = x.reshape(-1, *x.shape[2:])
        return x, (y[0] if self.horizon == 1 else y)
