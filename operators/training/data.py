"""Adapters from data files to what the trainer needs: seeded splits, fitted normalizers and
in-memory tensors, built on ``pde_data``'s datasets (this module adds no data logic of its own).

A run's data is described by a plain dict (stored in checkpoints so ``evaluate`` can rebuild it):

- steady: ``{"kind": "steady", "inputs": ["a"], "targets": ["u"], "sizes": [ntr, nva, nte], "seed": 0}``
- windows: ``{"kind": "window", "variables": ["vorticity"], "m": 10, "horizon": 1, ...}``

Window items are kept unstacked: inputs ``(m, channels, *spatial)``, targets ``(horizon, channels, *spatial)``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

import torch
import xarray as xr
from torch.utils.data import DataLoader, Dataset

import pde_data
from pde_data.model import SAMPLE, TIME

__all__ = ["open_data", "describe_data", "make_splits", "materialize", "normalizers_from_state"]

_PDEBENCH_SUFFIXES = (".h5", ".hdf5", ".hdf")


def open_data(path: str | os.PathLike) -> xr.Dataset:
    """Open a NetCDF file of the data model, a shard glob, or a PDEBench HDF5 file (lazily)."""
    text = os.fspath(path)
    if Path(text).suffix.lower() in _PDEBENCH_SUFFIXES:
        return pde_data.open_pdebench(text)
    return pde_data.open(text)


def _default_sizes(n: int) -> list[int]:
    n_val = max(1, n // 10)
    return [n - 2 * n_val, n_val, n_val]


def describe_data(ds: xr.Dataset, *, inputs: Sequence[str] | None = None, targets: Sequence[str] | None = None,
                  window: int | None = None, horizon: int = 1, sizes: Sequence[int] | None = None,
                  seed: int = 0, normalize: str | None = "gaussian") -> dict:
    """Validate the choice of variables against ``ds`` and return the run's data description.

    Steady (``window`` None): ``inputs`` → ``targets`` (defaults: the first variable → the others).
    Time-dependent (``window = m``): ``m`` frames of ``inputs`` (default: every variable with time)
    → the next ``horizon`` frames of the same variables.
    """
    names = list(ds.data_vars)
    sizes = list(sizes) if sizes is not None else _default_sizes(ds.sizes[SAMPLE])
    common = {"sizes": [int(s) for s in sizes], "seed": int(seed), "normalize": normalize}
    if window is not None:
        variables = list(inputs) if inputs else [v for v in names if TIME in ds[v].dims]
        if targets and list(targets) != variables:
            raise ValueError(f"--target: time-dependent runs predict their input variables {variables}, found {list(targets)}")
        if not variables:
            raise ValueError(f"--window needs variables with a '{TIME}' dim; found {names} without one")
        return {"kind": "window", "variables": variables, "m": int(window), "horizon": int(horizon), **common}
    inputs = list(inputs) if inputs else names[:1]
    targets = list(targets) if targets else [v for v in names if v not in inputs]
    missing = [v for v in inputs + targets if v not in names]
    if missing or not targets:
        raise ValueError(f"expected input/target variables among {names}; missing {missing or 'a target'}")
    timed = [v for v in inputs + targets if TIME in ds[v].dims]
    if timed:
        raise ValueError(f"variables {timed} have a '{TIME}' dim: pass --window M for time-dependent data")
    return {"kind": "steady", "inputs": inputs, "targets": targets, **common}


def _fit(ds: xr.Dataset, variables: list[str], indices, kind: str | None):
    return None if kind is None else pde_data.fit_normalizer(ds, variables, indices=indices, kind=kind)


def make_splits(ds: xr.Dataset, info: dict, normalizers: dict | None = None) -> tuple[dict[str, Dataset], dict]:
    """``({"train", "val", "test"} → Dataset, normalizers)``; normalizers are fitted on train unless given.

    ``normalizers`` maps ``"input"``/``"output"`` to :class:`pde_data.Normalizer` or ``None``.
    """
    splits = pde_data.split_indices(ds.sizes[SAMPLE], sizes=info["sizes"], seed=info["seed"])
    if info["kind"] == "window":
        if normalizers is None:
            norm = _fit(ds, info["variables"], splits["train"], info["normalize"])
            normalizers = {"input": norm, "output": norm}
        sets = {k: pde_data.WindowDataset(ds, info["variables"], m=info["m"], horizon=info["horizon"], indices=idx,
                                          normalizer=normalizers["output"], stack=False) for k, idx in splits.items()}
        return sets, normalizers
    if normalizers is None:
        normalizers = {"input": _fit(ds, info["inputs"], splits["train"], info["normalize"]),
                       "output": _fit(ds, info["targets"], splits["train"], info["normalize"])}
    sets = {k: pde_data.PairDataset(ds, info["inputs"], info["targets"], indices=idx,
                                    input_normalizer=normalizers["input"], output_normalizer=normalizers["output"])
            for k, idx in splits.items()}
    return sets, normalizers


def materialize(dataset: Dataset, *, batch_size: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    """All items of ``dataset`` as two stacked tensors ``(n, ...)`` (read once, in order).

    Window targets of horizon 1 get their time axis back: ``(n, 1, channels, *spatial)``.
    """
    if len(dataset) == 0:
        raise ValueError("dataset: expected at least one item, found an empty split")
    xs, ys = [], []
    for x, y in DataLoader(dataset, batch_size=batch_size, shuffle=False):
        xs.append(x)
        ys.append(y)
    x, y = torch.cat(xs), torch.cat(ys)
    if isinstance(dataset, pde_data.WindowDataset) and y.ndim == x.ndim - 1:
        y = y.unsqueeze(1)
    return x, y


def normalizers_from_state(state: dict) -> dict:
    """Inverse of ``{k: n.state_dict()}`` (``None`` stays ``None``)."""
    return {k: (None if v is None else pde_data.Normalizer.from_state_dict(v)) for k, v in state.items()}
