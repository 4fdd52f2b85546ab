"""Write predictions to NetCDF-4 batch by batch, with the data's coordinates, atomically.

:class:`PredictionWriter` creates the file's dims, the coordinates that do not involve ``sample`` and
one compressed variable per predicted field up front (chunks of one sample, and one frame for fields
with space and time, as :func:`pde_data.save` writes them), then writes each batch into its sample
range, so memory stays bounded by one batch. The file is written under a temporary name beside the
target and renamed into place only when the ``with`` block ends without error and every sample was
written; otherwise nothing is left at the target and an existing file there is kept.

The file always has a ``sample`` coordinate saying which samples of the source each row is
(``sample_ids`` given to :meth:`PredictionWriter.write`, else the batch's ``sample`` coordinate, else
the row positions).

Example:
    >>> like = truth[["u"]].isel(sample=[0])               # dims, coords and attrs of one sample
    >>> with PredictionWriter("pred.nc", like, ["u"], n_samples=len(test)) as out:
    ...     for start, ids, batch in batches:              # batch: Dataset (sample, time, x, y)
    ...         out.write(start, batch, sample_ids=ids)
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Sequence

import netCDF4
import numpy as np
import xarray as xr

from pde_data.core.io import atomic_path, sample_chunks
from pde_data.core.model import SAMPLE

__all__ = ["PredictionWriter"]


def _static_coords(like: xr.Dataset, attrs: dict) -> xr.Dataset:
    """The coordinates of ``like`` that do not involve ``sample``, loaded, without the source's encoding."""
    coords = {str(k): xr.Variable(c.dims, c.values, c.attrs) for k, c in like.coords.items() if SAMPLE not in c.dims}
    return xr.Dataset(coords=coords, attrs=attrs)


class PredictionWriter:
    """A context manager writing ``n_samples`` samples of ``variables`` to NetCDF-4, batch by batch.

    Args:
        path: the file to write (its folder is created if needed).
        like: a (lazy) template Dataset with the variables' dims, coords and attrs (e.g. one sample
            of the truth); its ``sample`` length does not matter.
        variables: the data variables to write, each with a ``sample`` dim in ``like``.
        n_samples: the number of samples the file will hold.
        complevel: zlib compression level (1-9).
        attrs: global attributes of the file (e.g. the model and checkpoint that made it).

    Raises:
        ValueError: a variable is missing from ``like`` or has no ``sample`` dim, or ``n_samples < 1``.
    """

    def __init__(self, path: str | os.PathLike, like: xr.Dataset, variables: Sequence[str], n_samples: int,
                 *, complevel: int = 4, attrs: dict | None = None):
        missing = [v for v in variables if v not in like.data_vars]
        if missing or not variables:
            raise ValueError(f"variables: expected data variables of `like` {list(like.data_vars)}; "
                             f"found {list(variables)} (missing {missing})")
        no_sample = [v for v in variables if SAMPLE not in like[v].dims]
        if no_sample:
            raise ValueError(f"variables: expected a '{SAMPLE}' dim in each; without it: {no_sample}")
        if n_samples < 1:
            raise ValueError(f"n_samples: expected at least 1, found {n_samples}")
        self.path, self.variables, self.n_samples = Path(path), list(variables), int(n_samples)
        self._like, self._complevel, self._attrs = like, complevel, dict(attrs or {})
        self._sample_coords = [str(k) for k, c in like.coords.items() if SAMPLE in c.dims and k != SAMPLE]
        self._written = np.zeros(self.n_samples, dtype=bool)
        self._nc: netCDF4.Dataset | None = None
        self._stack: contextlib.ExitStack | None = None

    def __enter__(self) -> "PredictionWriter":
        with contextlib.ExitStack() as stack:
            tmp = stack.enter_context(atomic_path(self.path))
            _static_coords(self._like, self._attrs).to_netcdf(tmp, engine="netcdf4", format="NETCDF4")
            self._nc = netCDF4.Dataset(tmp, "a")
            stack.callback(self._nc.close)
            self._nc.set_auto_maskandscale(False)
            self._define()
            self._stack = stack.pop_all()
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        stack, self._stack, self._nc = self._stack, None, None
        message = self._incomplete() if exc_type is None else None
        if message is not None:
            error = ValueError(message)
            stack.__exit__(ValueError, error, None)  # closes and deletes the temporary file
            raise error
        return bool(stack.__exit__(exc_type, exc, tb))

    def _incomplete(self) -> str | None:
        missing = np.flatnonzero(~self._written)
        if missing.size == 0:
            return None
        return (f"{self.path}: expected all {self.n_samples} samples written; {missing.size} missing "
                f"(first {int(missing[0])}); the file was not written")

    def _size(self, dim: str) -> int:
        return self.n_samples if dim == SAMPLE else int(self._like.sizes[dim])

    def _define(self) -> None:
        """Create the dims, the ``sample`` coordinate, the sample-dependent coordinates and the variables."""
        nc = self._nc
        names = self.variables + self._sample_coords
        for dim in dict.fromkeys(d for v in names for d in self._like[v].dims):
            if dim not in nc.dimensions:
                nc.createDimension(dim, self._size(dim))
        if SAMPLE not in nc.dimensions:
            nc.createDimension(SAMPLE, self.n_samples)
        ids = self._like.coords.get(SAMPLE)
        dtype = ids.dtype if ids is not None and ids.dtype.kind in "iu" else np.dtype("int64")
        self._create(SAMPLE, (SAMPLE,), dtype, {} if ids is None else dict(ids.attrs))
        for name in self._sample_coords:
            self._create(name, self._like.coords[name].dims, self._like.coords[name].dtype,
                         dict(self._like.coords[name].attrs))
        for name in self.variables:
            attrs = dict(self._like[name].attrs)
            listed = [str(c) for c in self._like[name].coords if c not in self._like[name].dims]
            if listed:
                attrs["coordinates"] = " ".join(listed)
            self._create(name, self._like[name].dims, self._like[name].dtype, attrs)

    def _create(self, name: str, dims: Sequence[str], dtype: np.dtype, attrs: dict) -> None:
        dtype = np.dtype(dtype).newbyteorder("=")  # h5py reports '<f4'; the written arrays are native
        if dtype.kind not in "fiub":
            raise ValueError(f"{name}: expected a numeric dtype for a sample-dependent variable, found {dtype}")
        shape = [self._size(d) for d in dims]
        fill = np.nan if dtype.kind == "f" else None
        var = self._nc.createVariable(name, dtype, tuple(dims), zlib=True, complevel=self._complevel,
                                      chunksizes=sample_chunks(tuple(dims), tuple(shape)), fill_value=fill)
        var.setncatts(attrs)

    def write(self, start: int, batch: xr.Dataset, sample_ids: Sequence[int] | None = None) -> None:
        """Write ``batch`` as samples ``[start, start + len(batch.sample))`` of the file.

        Args:
            start: the first row of the file this batch fills.
            batch: a Dataset with every variable (and sample-dependent coordinate of ``like``), dims as
                in ``like`` in any order, e.g. ``(batch, time, x, y)`` along ``sample``.
            sample_ids: the batch's sample indices in the source (default: the batch's ``sample``
                coordinate, else the rows ``start, start + 1, ...``).
        """
        if self._nc is None:
            raise RuntimeError("PredictionWriter.write: expected to be called inside its `with` block")
        n = int(batch.sizes.get(SAMPLE, 0))
        if n < 1 or start < 0 or start + n > self.n_samples:
            raise ValueError(f"write: expected samples [start, start + {n}) within [0, {self.n_samples}) "
                             f"and at least one sample; found start={start}, {n} samples")
        for name in self.variables + self._sample_coords:
            self._write_values(name, start, self._batch_array(batch, name))
        self._write_values(SAMPLE, start, self._sample_ids(batch, start, n, sample_ids))
        self._written[start:start + n] = True

    def _batch_array(self, ds: xr.Dataset, name: str) -> xr.DataArray:
        dims = self._like[name].dims
        if name not in ds.variables:
            raise ValueError(f"write: expected '{name}' in the batch; found {sorted(map(str, ds.variables))}")
        da = ds[name]
        if set(da.dims) != set(dims) or any(da.sizes[d] != self._like.sizes[d] for d in dims if d != SAMPLE):
            raise ValueError(f"write: '{name}' expected dims {dict(self._like[name].sizes)} apart from "
                             f"'{SAMPLE}'; found {dict(da.sizes)}")
        return da.transpose(*dims)

    def _sample_ids(self, batch: xr.Dataset, start: int, n: int, sample_ids) -> xr.DataArray:
        if sample_ids is not None:
            ids = np.asarray(sample_ids)
        elif SAMPLE in batch.coords:
            ids = batch.coords[SAMPLE].values
        else:
            ids = np.arange(start, start + n)
        if ids.shape != (n,) or ids.dtype.kind not in "iu":
            raise ValueError(f"sample_ids: expected {n} integers, found shape {ids.shape} of {ids.dtype}")
        return xr.DataArray(ids, dims=(SAMPLE,))

    def _write_values(self, name: str, start: int, da: xr.DataArray) -> None:
        var = self._nc.variables[name]
        where = tuple(slice(start, start + da.sizes[SAMPLE]) if d == SAMPLE else slice(None) for d in da.dims)
        var[where] = np.asarray(da.values, dtype=var.dtype)
