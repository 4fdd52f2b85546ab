"""The writing side of a generated set's ``manifest.json`` (the reading side: :mod:`pde_data.formats.manifest`):
the shards' names, each shard's moments, the package versions, and the atomic write."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import torch
import xarray as xr

from pde_data.core.io import atomic_path
from pde_data.core.moments import Moments
from pde_data.formats.manifest import MANIFEST, Manifest

__all__ = ["moments_of", "moments_json", "shard_name", "write_manifest"]


def moments_of(ds: xr.Dataset) -> dict[str, Moments]:
    """Each numeric data variable's :class:`Moments` over its finite values (one channel; NaN pads of unequal
    sequences left out), in float64."""
    out = {}
    for name, v in ds.data_vars.items():
        if v.dtype.kind in "fiu":
            values = np.asarray(v.values, dtype=np.float64).ravel()
            out[str(name)] = Moments.of(torch.from_numpy(values[np.isfinite(values)]).reshape(1, -1), 0)
    return out


def moments_json(m: Moments) -> dict[str, float]:
    """``{"count", "mean", "m2", "min", "max"}`` of one-channel moments (floats round-trip JSON exactly)."""
    return {"count": m.count, "mean": float(m.mean[0]), "m2": float(m.m2[0]), "min": float(m.low[0]),
            "max": float(m.high[0])}


def shard_name(index: int, count: int) -> str:
    """``shard-00003-of-00008.nc``."""
    return f"shard-{index:05d}-of-{count:05d}.nc"


def write_manifest(folder: str | os.PathLike, manifest: Manifest) -> Path:
    """Write ``folder/manifest.json`` atomically; returns its path."""
    path = Path(folder) / MANIFEST
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(manifest.to_json(), indent=1) + "\n")
    return path
