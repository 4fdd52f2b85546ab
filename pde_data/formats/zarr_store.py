"""Generated sets written as one Zarr v3 store, sample by sample, at a local path or a URL (``s3://``, any fsspec
protocol that writes); read back by the opener (:mod:`pde_data.formats.opener`, ``"zarr"``).

Each variable with a ``sample`` dim is one Zarr array chunked one sample per chunk (writers of different samples
never share a chunk); a variable in time has its frames in chunks of about :data:`CHUNK_BYTES` (all of a sample's
frames where they fit, so a window reads one or two chunks per variable), compressed by :data:`CODEC`; the variables
without it (coordinates such as ``x``, ``time``) are written whole when the store is made (:func:`create`). The
metadata is consolidated into the root ``zarr.json``, so a reader over HTTP needs no listing. zarr-python's own
cost per chunk, more than the bytes, bounds its reads: a window read from a chunk per frame was several times slower
than from a sample's frames in one chunk (``bench_data --remote`` reads a store of this layout).

An object store has no rename, so a store is written in place: :func:`create` marks it :data:`INCOMPLETE` (a root
attribute the opener refuses) and :func:`finish` removes the mark once every sample is written. Writers of
disjoint sample ranges (:func:`write_region`, one Dask task each) fill the same store; :func:`digest` hashes a
range's chunk files (or the whole store), so a resumed run keeps the ranges already written.

Example:
    >>> with ZarrWriter("ns.zarr", like=first_chunk, n_samples=1000) as writer:
    ...     writer.write(0, first_chunk)             # samples 0.. of the set, in any order of chunks
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import warnings
from typing import Sequence

import numpy as np
import xarray as xr

from pde_data.core import remote
from pde_data.core.model import SAMPLE, TIME, sample_variables

__all__ = ["ZarrWriter", "CODEC", "CHUNK_BYTES", "INCOMPLETE", "MANIFEST_ATTR", "create", "write_region", "finish",
           "remove", "state", "root_attrs", "digest", "region_digests", "filesystem"]

#: the compressor of every array: Blosc with LZ4 (level 5) over byte-shuffled values, fast to decompress
CODEC = {"name": "blosc", "cname": "lz4", "clevel": 5, "shuffle": "shuffle"}
#: the bytes a chunk of a variable in time holds at most (whole frames; at least one)
CHUNK_BYTES = 4 << 20
#: the root attribute of a store still being written (or left so by a run that stopped)
INCOMPLETE = "circuitop_incomplete"
#: the root attribute holding a sharded store's manifest (:class:`pde_data.formats.manifest.Manifest`'s JSON)
MANIFEST_ATTR = "circuitop_manifest"


def filesystem(path: str):
    """``(fs, root)``: the fsspec file system of ``path`` (a URL's, with its storage options, or the local one) and
    the store's root in it."""
    if remote.is_url(path):
        fs = remote.filesystem(path)
        return fs, fs._strip_protocol(path.rstrip("/"))  # as its listings name files (``bucket/key``)
    import fsspec

    return fsspec.filesystem("file"), os.path.abspath(path)


def _options(path: str) -> dict | None:
    return remote.options_of(path) if remote.is_url(path) else None


def state(path: str) -> str:
    """``"none"`` (nothing at ``path``), ``"store"`` (a Zarr store) or ``"other"`` (a file or folder of another
    kind, never to be replaced)."""
    fs, root = filesystem(path)
    if fs.exists(f"{root}/zarr.json"):
        return "store"
    return "other" if fs.exists(root) else "none"


def root_attrs(path: str) -> dict:
    """The root attributes of the store at ``path``."""
    import zarr

    return dict(zarr.open_group(str(path), mode="r", storage_options=_options(str(path))).attrs)


def create(path: str, like: xr.Dataset, n_samples: int, *, attrs: dict) -> list[str]:
    """Make the store of ``n_samples`` samples shaped like ``like`` (a Dataset with a ``sample`` dim) at ``path``,
    replacing a store there, marked :data:`INCOMPLETE`; returns the variables written per sample."""
    import dask.array as da
    import zarr

    per_sample = sample_variables(like)
    template = like.drop_vars([str(k) for k, v in like.variables.items() if SAMPLE in v.dims])
    encoding = {}
    for name in per_sample:
        v = like[name]
        chunks = _chunks(v)
        template[name] = (v.dims, da.zeros((n_samples, *v.shape[1:]), chunks=chunks, dtype=v.dtype), v.attrs)
        encoding[name] = {"chunks": chunks, "compressors": [zarr.codecs.BloscCodec(
            cname=CODEC["cname"], clevel=CODEC["clevel"], shuffle=CODEC["shuffle"])]}
    template.attrs.update({**attrs, INCOMPLETE: "being written by circuitop generate"})
    with _quiet():
        template.to_zarr(str(path), mode="w", compute=False, zarr_format=3, consolidated=True, encoding=encoding,
                         storage_options=_options(str(path)))
    return per_sample


def _chunks(v: xr.DataArray) -> tuple[int, ...]:
    """One sample; of a ``time`` dim the frames that fit :data:`CHUNK_BYTES` (at least one); the rest whole."""
    frame = v.dtype.itemsize * int(np.prod([n for d, n in zip(v.dims, v.shape) if d not in (SAMPLE, TIME)]))
    per_chunk = max(1, CHUNK_BYTES // max(frame, 1))
    return tuple(1 if d == SAMPLE else min(n, per_chunk) if d == TIME else n for d, n in zip(v.dims, v.shape))


def write_region(path: str, row: int, ds: xr.Dataset, variables: list[str]) -> None:
    """Samples ``row, row + 1, ...`` of the store: ``ds``'s ``sample`` dim, in the store's ``variables`` (only their
    chunks are written; the metadata is left as :func:`create` made it)."""
    part = ds[variables].drop_vars([c for c in ds[variables].coords if SAMPLE not in ds[c].dims])
    with _quiet():
        part.to_zarr(str(path), region={SAMPLE: slice(row, row + ds.sizes[SAMPLE])}, zarr_format=3,
                     consolidated=False, storage_options=_options(str(path)))


def finish(path: str, attrs: dict | None = None) -> None:
    """Mark the store complete: ``attrs`` added to its root attributes, :data:`INCOMPLETE` removed, the metadata
    consolidated again."""
    import zarr

    group = zarr.open_group(str(path), mode="r+", storage_options=_options(str(path)))
    group.attrs.update(attrs or {})
    group.attrs.pop(INCOMPLETE, None)
    with _quiet():
        zarr.consolidate_metadata(group.store)


@contextlib.contextmanager
def _quiet():
    """Without zarr's warnings about what we chose: consolidated metadata (outside the v3 spec; readers over HTTP
    cannot list), and the records of a sharded store's writers kept inside it (no Zarr node)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Consolidated metadata", category=UserWarning)
        warnings.filterwarnings("ignore", "Object at .* is not recognized", category=UserWarning)
        yield


def remove(path: str) -> None:
    """Remove the store at ``path`` (the caller checked that it is one, :func:`state`)."""
    fs, root = filesystem(path)
    if fs.exists(root):
        fs.rm(root, recursive=True)


def digest(path: str, samples: range | None = None) -> tuple[int, str]:
    """``(bytes, sha256)`` of the store's files in name order (each name and content hashed), or with ``samples``
    of the chunk files of those samples only (what one writer of a region wrote)."""
    if samples is None:
        fs, root = filesystem(path)
        return _hashed(fs, root, _listed(fs, root))
    return region_digests(path, [samples])[0]


def region_digests(path: str, regions: Sequence[range]) -> list[tuple[int, str]]:
    """:func:`digest` of the chunk files of each sample range of ``regions``, the store listed once."""
    fs, root = filesystem(path)
    names, chunk = _listed(fs, root), re.compile(r"[^/]+/c/(\d+)(/|$)")
    samples = [(n, int(m.group(1))) for n in names if (m := chunk.match(n))]
    return [_hashed(fs, root, [n for n, i in samples if i in region]) for region in regions]


def _listed(fs, root: str) -> list[str]:
    return sorted(name[len(root) + 1:] for name in fs.find(root))


def _hashed(fs, root: str, names: list[str]) -> tuple[int, str]:
    sha, total = hashlib.sha256(), 0
    for name in names:
        sha.update(name.encode())
        data = fs.cat_file(f"{root}/{name}")
        sha.update(data)
        total += len(data)
    return total, sha.hexdigest()


class ZarrWriter:
    """A new Zarr v3 store of ``n_samples`` samples shaped like ``like``, filled by :meth:`write` and marked complete
    by :meth:`close` (a context manager: an error removes the store). What is at ``path`` already is replaced only if
    it is a Zarr store (anything else raises ``ValueError``)."""

    def __init__(self, path: str | os.PathLike, like: xr.Dataset, n_samples: int, *, attrs: dict | None = None):
        self.path = str(path)
        if state(self.path) == "other":  # only a store is ever replaced
            fs, root = filesystem(self.path)
            raise ValueError(f"{remote.display(self.path)}: expected a Zarr store (or nothing) to write, found "
                             f"{'a folder that is no store' if fs.isdir(root) else 'a file'}; it is left as it is")
        self.variables = create(self.path, like, n_samples, attrs=attrs or dict(like.attrs))

    def write(self, row: int, ds: xr.Dataset) -> None:
        """Samples ``row, row + 1, ...`` of the store: ``ds``'s ``sample`` dim."""
        write_region(self.path, row, ds, self.variables)

    def close(self) -> None:
        finish(self.path)

    def __enter__(self) -> "ZarrWriter":
        return self

    def __exit__(self, exc_type, *exc) -> None:
        if exc_type is None:
            self.close()
        else:
            remove(self.path)
