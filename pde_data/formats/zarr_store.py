"""Generated sets written as one Zarr v3 store, sample by sample (:class:`ZarrWriter`); read back by the opener
(:mod:`pde_data.formats.opener`, ``"zarr"``), locally or at a URL.

Each variable with a ``sample`` dim is one Zarr array chunked one sample per chunk, one frame of it where the variable
has a ``time`` dim (so a window reads its frames alone, and writers of different samples never share a chunk), as
PDEBench's HDF5 files are chunked, compressed by :data:`CODEC`; the variables without it
(coordinates such as ``x``, ``time``) are written whole when the store is made. The metadata is consolidated into
the root ``zarr.json``, so a reader over HTTP needs no listing. The store is made under a temporary name beside
its path and renamed into place once every sample is written: a store under its name is complete.

Example:
    >>> with ZarrWriter("ns.zarr", like=first_chunk, n_samples=1000) as writer:
    ...     writer.write(0, first_chunk)             # samples 0.. of the set, in any order of chunks
"""

from __future__ import annotations

import hashlib
import os
import shutil
import warnings
from pathlib import Path

import xarray as xr

from pde_data.core.model import SAMPLE, TIME

__all__ = ["ZarrWriter", "CODEC", "store_digest"]

#: the compressor of every array: Zstandard, level 3 (Zarr v3's own ``zstd`` codec)
CODEC = {"name": "zstd", "level": 3}


class ZarrWriter:
    """A Zarr v3 store of ``n_samples`` samples shaped like ``like`` (a Dataset with a ``sample`` dim), filled by
    :meth:`write` and put in place by :meth:`close` (a context manager: an error leaves no store). What is at
    ``path`` already is replaced only if it is a Zarr store (a folder or file of another kind raises ``ValueError``)."""

    def __init__(self, path: str | os.PathLike, like: xr.Dataset, n_samples: int, *, attrs: dict | None = None):
        import dask.array as da
        import zarr

        self.path = Path(path)
        if self.path.exists() and not (self.path / "zarr.json").is_file():  # only a store is ever replaced
            raise ValueError(f"{self.path}: expected a Zarr store (or nothing) to write, found "
                             f"{'a folder that is no store' if self.path.is_dir() else 'a file'}; it is left as it is")
        self.tmp = self.path.with_name(f".{self.path.name}.tmp-{os.getpid()}")
        shutil.rmtree(self.tmp, ignore_errors=True)
        per_sample = [str(k) for k, v in like.data_vars.items() if SAMPLE in v.dims]
        template = like.drop_vars([str(k) for k, v in like.variables.items() if SAMPLE in v.dims])
        encoding = {}
        for name in per_sample:
            v = like[name]
            shape = (n_samples, *v.shape[1:])
            chunks = (1, *(1 if d == TIME else n for d, n in zip(v.dims[1:], v.shape[1:])))
            template[name] = (v.dims, da.zeros(shape, chunks=chunks, dtype=v.dtype), v.attrs)
            encoding[name] = {"chunks": chunks, "compressors": [zarr.codecs.ZstdCodec(level=CODEC["level"])]}
        template.attrs.update(attrs or like.attrs)
        with warnings.catch_warnings():  # consolidated metadata is our choice (readers over HTTP cannot list)
            warnings.filterwarnings("ignore", "Consolidated metadata", category=UserWarning)
            template.to_zarr(self.tmp, mode="w", compute=False, zarr_format=3, consolidated=True, encoding=encoding)
        self.variables = per_sample

    def write(self, row: int, ds: xr.Dataset) -> None:
        """Samples ``row, row + 1, ...`` of the store: ``ds``'s ``sample`` dim, in the store's variables."""
        part = ds[self.variables].drop_vars([c for c in ds[self.variables].coords if SAMPLE not in ds[c].dims])
        part.to_zarr(self.tmp, region={SAMPLE: slice(row, row + ds.sizes[SAMPLE])}, zarr_format=3)

    def close(self) -> None:
        """Put the store in place (an earlier store at the path is replaced: the caller checked it may be)."""
        if self.path.exists():
            shutil.rmtree(self.path)
        os.replace(self.tmp, self.path)

    def __enter__(self) -> "ZarrWriter":
        return self

    def __exit__(self, exc_type, *exc) -> None:
        if exc_type is None:
            self.close()
        else:
            shutil.rmtree(self.tmp, ignore_errors=True)


def store_digest(path: str | os.PathLike) -> tuple[int, str]:
    """``(bytes, sha256)`` of a store: its files in name order, each name and content hashed in chunks."""
    digest, total = hashlib.sha256(), 0
    root = Path(path)
    for file in sorted(p for p in root.rglob("*") if p.is_file()):
        digest.update(str(file.relative_to(root)).encode())
        with open(file, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 18), b""):
                digest.update(block)
                total += len(block)
    return total, digest.hexdigest()
