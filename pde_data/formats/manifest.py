"""A generated set in a folder of NetCDF shards, described by ``manifest.json``: what made it, which samples each
shard holds, each shard's size and sha256, and the set's statistics.

``DIR/manifest.json`` (written atomically, after every shard) records the generator and its every parameter
(as plain JSON, :class:`pde_data.generate.registry.GenerationSpec`'s ``to_json``), the package versions, and per shard its sample range, file
name, bytes, sha256 and each variable's moments (count, mean, M2, min, max). The shards' moments merge with
Chan's formula (:meth:`pde_data.core.moments.Moments.merge`) into the set's statistics, from which a run
normalizes without another pass over the data.

Opening a manifest folder (:func:`open_manifest`, and so :func:`pde_data.open_source` and every command) checks
each shard's size against the manifest and its samples and variables against the shard's range, and names the
first shard that disagrees in one line. :func:`pde_data.formats.verification.verify_set` also checks every
sha256 (once, then it keeps a stamp). The writing side (:func:`moments_of`, :func:`shard_name`,
:func:`write_manifest`) serves :mod:`pde_data.generate.sharded`: this module reads the generator as plain
JSON and imports no generator.

Example:
    >>> m = read_manifest("ns_set")                 # Manifest: m.generator, m.shards, m.statistics
    >>> ds = open_manifest("ns_set")                # one lazy Dataset over every shard
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping

import numpy as np
import torch
import xarray as xr

from pde_data.core.io import atomic_path, open_netcdf_files
from pde_data.core.model import SAMPLE
from pde_data.core.moments import Moments

__all__ = ["MANIFEST", "FORMAT", "ShardRecord", "Manifest", "is_manifest_folder", "read_manifest", "open_manifest",
           "sha256_of", "ManifestError", "moments_of", "moments_json", "shard_name", "write_manifest"]

MANIFEST = "manifest.json"
#: the manifest's ``format`` field
FORMAT = "circuitop-generated-set"


class ManifestError(ValueError):
    """A manifest folder whose files disagree with its manifest (the message names the shard and how)."""


@dataclass(frozen=True)
class ShardRecord:
    """One shard: its ``index`` among ``count``, samples ``[start, stop)``, ``file`` (name in the folder),
    ``bytes``, ``sha256``, per data variable its moments ``{"count", "mean", "m2", "min", "max"}``, and each PDE
    parameter's value per sample (a sweep's: ``{"beta": [...]}``, in sample order; none without parameters)."""

    index: int
    count: int
    start: int
    stop: int
    file: str
    bytes: int
    sha256: str
    moments: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    parameters: Mapping[str, list[float]] = field(default_factory=dict)

    def to_json(self) -> dict:
        found = {"index": self.index, "count": self.count, "start": self.start, "stop": self.stop, "file": self.file,
                 "bytes": self.bytes, "sha256": self.sha256, "moments": {k: dict(v) for k, v in self.moments.items()}}
        return {**found, "parameters": {k: list(v) for k, v in self.parameters.items()}} if self.parameters else found

    @classmethod
    def from_json(cls, d: Mapping) -> "ShardRecord":
        return cls(int(d["index"]), int(d["count"]), int(d["start"]), int(d["stop"]), str(d["file"]),
                   int(d["bytes"]), str(d["sha256"]), {k: dict(v) for k, v in d.get("moments", {}).items()},
                   {k: [float(x) for x in v] for k, v in d.get("parameters", {}).items()})


@dataclass(frozen=True)
class Manifest:
    """A complete generated set: its ``generator`` (plain JSON: ``name``, ``n``, ``seed`` and every parameter in
    ``params``; :meth:`pde_data.generate.registry.GenerationSpec.from_json` reads it), its ``shards`` in sample
    order, the ``versions`` that made it."""

    generator: Mapping[str, object]
    shards: tuple[ShardRecord, ...]
    versions: Mapping[str, str | None] = field(default_factory=dict)

    @property
    def statistics(self) -> dict[str, dict[str, float]]:
        """Per variable over the whole set: ``count``, ``mean``, ``m2``, ``std`` (population), ``min``, ``max``
        — the shards' moments merged with Chan's formula in shard order."""
        out = {}
        for name in self.shards[0].moments if self.shards else ():
            m = _merged(s.moments[name] for s in self.shards)
            out[name] = {"count": m.count, "mean": float(m.mean[0]), "m2": float(m.m2[0]),
                         "std": float((m.m2[0] / m.count).sqrt()), "min": float(m.low[0]), "max": float(m.high[0])}
        return out

    @property
    def n_samples(self) -> int:
        return int(self.generator["n"])

    @property
    def generator_name(self) -> str:
        """The generator that made the set (``name``; ``kind`` in manifests written before 2026-11-28)."""
        return str(self.generator.get("name", self.generator.get("kind")))

    @property
    def bytes(self) -> int:
        return sum(s.bytes for s in self.shards)

    def to_json(self) -> dict:
        return {"format": FORMAT, "version": 1, "generator": dict(self.generator),
                "versions": dict(self.versions), "n_samples": self.n_samples, "bytes": self.bytes,
                "shards": [s.to_json() for s in self.shards], "statistics": self.statistics}

    @classmethod
    def from_json(cls, d: Mapping) -> "Manifest":
        return cls(dict(d["generator"]), tuple(ShardRecord.from_json(s) for s in d["shards"]),
                   dict(d.get("versions", {})))


def _merged(moments: Iterable[Mapping[str, float]]) -> Moments:
    total = None
    for m in moments:
        one = Moments(int(m["count"]), *(torch.tensor([float(m[k])], dtype=torch.float64)
                                         for k in ("mean", "m2", "min", "max")))
        total = one if total is None else total.merge(one)
    return total


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


def sha256_of(path: str | os.PathLike) -> str:
    """The file's sha256, read in chunks (``hashlib.file_digest``: one 256 KiB buffer, never the whole file)."""
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def is_manifest_folder(path: str | os.PathLike) -> bool:
    return Path(path).is_dir() and (Path(path) / MANIFEST).is_file()


def read_manifest(folder: str | os.PathLike) -> Manifest:
    """The :class:`Manifest` of ``folder``.

    Raises:
        FileNotFoundError: the folder has no ``manifest.json``.
        ManifestError: the manifest is not one this package writes.
    """
    path = Path(folder) / MANIFEST
    if not path.is_file():
        raise FileNotFoundError(f"{folder}: expected a generated set's {MANIFEST}, found none")
    try:
        data = json.loads(path.read_text())
        if data.get("format") != FORMAT:
            raise ManifestError(f"{path}: expected format {FORMAT!r}, found {data.get('format')!r}")
        return Manifest.from_json(data)
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise ManifestError(f"{path}: expected a manifest written by circuitop generate, found an unreadable "
                            f"one ({type(exc).__name__}: {exc})") from None


def _check_sizes(folder: Path, manifest: Manifest) -> None:
    """Every shard is there with its recorded bytes, and the shards cover ``[0, n)`` in order."""
    expected = 0
    for s in manifest.shards:
        if s.start != expected:
            raise ManifestError(f"{folder / MANIFEST}: expected shard {s.index} to start at sample {expected}, "
                                f"found {s.start}")
        expected = s.stop
        path = folder / s.file
        if not path.is_file():
            raise ManifestError(f"{path}: expected shard {s.index} of the manifest (samples {s.start}-{s.stop - 1}), "
                                "found no such file; re-run the generate command to complete the set")
        size = path.stat().st_size
        if size != s.bytes:
            raise ManifestError(f"{path}: expected {s.bytes} bytes as the manifest records, found {size}; "
                                "the shard is corrupt or foreign (re-run the generate command to regenerate it)")
    if expected != manifest.n_samples:
        raise ManifestError(f"{folder / MANIFEST}: expected shards covering {manifest.n_samples} samples, found {expected}")


def _check_samples(path: Path, shard: ShardRecord, ds: xr.Dataset, variables: list[str]) -> None:
    ids = ds[SAMPLE].values if SAMPLE in ds.coords else None
    if ids is None or not np.array_equal(ids, np.arange(shard.start, shard.stop)):
        found = "none" if ids is None else f"{len(ids)} samples from {ids[0] if len(ids) else '-'}"
        raise ManifestError(f"{path}: expected samples {shard.start}-{shard.stop - 1} as the manifest records, "
                            f"found {found}; the shard is foreign (re-run the generate command to regenerate it)")
    if sorted(map(str, ds.data_vars)) != variables:
        raise ManifestError(f"{path}: expected variables {variables} as the other shards, found "
                            f"{sorted(map(str, ds.data_vars))}; the shard is foreign")


def open_manifest(folder: str | os.PathLike) -> tuple[xr.Dataset, Manifest]:
    """The lazy Dataset over every shard of ``folder`` (concatenated along ``sample``) and its manifest, after
    checking each shard's bytes, samples and variables (not its sha256: :func:`pde_data.formats.verification.verify_set`).

    Raises:
        ManifestError: a shard is missing, has other bytes, samples or variables than the manifest says.
    """
    folder = Path(folder)
    manifest = read_manifest(folder)
    _check_sizes(folder, manifest)
    files = [folder / s.file for s in manifest.shards]
    ds = open_netcdf_files(files)
    try:
        offsets = np.cumsum([0] + [s.stop - s.start for s in manifest.shards])
        variables = sorted(map(str, ds.data_vars))
        for s, a, b in zip(manifest.shards, offsets[:-1], offsets[1:]):
            _check_samples(folder / s.file, s, ds.isel({SAMPLE: slice(int(a), int(b))}), variables)
    except Exception:
        ds.close()
        raise
    return ds, manifest
