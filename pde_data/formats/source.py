"""One :class:`Source` per opened data file: its format probed once, its reads, its metadata.

A Source is a file (or a glob of NetCDF shards, or an in-memory ``xarray.Dataset``) opened once in a
process. It knows what the file's format knows: the lazy Dataset in the data model (``dataset``), which
fields HDF5 reads straight into a caller's buffer, the statistics the format ships (``stats()``), and
the file's version (``verify()``). Every read of samples goes through :meth:`Source.read`, in the
torch layouts of :func:`pde_data.core.model.to_tensor`:

=================  ==============================================
variables          ``read(variables, samples, times)``
=================  ==============================================
steady fields      ``(samples, channels, *spatial)``
fields in time     ``(samples, frames, channels, *spatial)``
sequences          ``(samples, frames, channels)``
=================  ==============================================

A Source pickles as its path, format and file stamp: a process that unpickles it (a DataLoader
worker) opens the file itself on first use, and refuses a file that changed since the Source was
opened. The process that opened it never opens the file again.

Example:
    >>> source = open_source("2D_CFD_Rand_M0.1.hdf5")
    >>> source.format
    'pdebench:cfd'
    >>> source.read(["density", "Vx"], [0, 3], slice(0, 5)).shape     # (2, 5, 2, 128, 128)
"""

from __future__ import annotations

import math
import os
import time
from typing import Mapping, Sequence

import numpy as np
import torch
import xarray as xr

from pde_data.core import remote
from pde_data.formats.h5lazy import file_stamp, read_channels
from pde_data.core.fingerprint import Fingerprint, fingerprint
from pde_data.core.model import SAMPLE, TIME, parameter_table, spatial_dims, to_tensor
from pde_data.formats.opener import GLOB_CHARS, Probed, ReadOptions, probe
from pde_data.formats.sweep import file_values
from pde_data.formats.well import Stats

__all__ = ["Source", "SourceLike", "open_source", "sample_runs", "IN_MEMORY"]

#: the format of a Source over an in-memory Dataset
IN_MEMORY = "in-memory"


class Source:
    """An opened data file (or NetCDF shard glob, or in-memory Dataset); made by :func:`open_source`.

    Attributes:
        path: the absolute path (or glob) of the file; ``None`` for an in-memory Dataset.
        format: ``"netcdf"``, ``"pdebench:<layout>"``, ``"the-well"``, ``"neuraloperator-pt"``,
            ``"fno-mat:73"``, ``"fno-mat:5"``, or ``"in-memory"``.
    """

    def __init__(self, path: str | None, probed: Probed, options: ReadOptions = ReadOptions()):
        self.path, self.format, self._stamp, self._options = path, probed.format, probed.stamp, options
        self._probed, self._pid = probed, os.getpid()
        self._storage = remote.options_of(path) if remote.is_url(path) else None  # a URL's, secrets included

    # -- the opened file

    def _opened(self) -> Probed:
        """The probe of this process: the file is opened again only in another process (a worker)."""
        if self.path is not None and (self._probed is None or self._pid != os.getpid()):
            probed = probe(self.path, self._options)
            if (probed.format, probed.stamp) != (self.format, self._stamp):
                probed.dataset.close()
                raise OSError(f"{self.name}: expected the {self.format} file opened first, found it changed "
                              f"since (now {probed.format}, stamp {probed.stamp} vs {self._stamp})")
            self._probed, self._pid = probed, os.getpid()
        return self._probed

    @property
    def dataset(self) -> xr.Dataset:
        """The lazy Dataset in the data model (nothing is read until values are asked for)."""
        return self._opened().dataset

    @property
    def name(self) -> str:
        """The file, for messages (a URL without its credentials; ``"in-memory data"`` for a Dataset)."""
        return remote.display(self.path) if self.path else "in-memory data"

    @property
    def sizes(self) -> Mapping[str, int]:
        return self.dataset.sizes

    @property
    def variables(self) -> list[str]:
        """The data variables, in the Dataset's order."""
        return [str(v) for v in self.dataset.data_vars]

    def parameters(self, names: Sequence[str]) -> np.ndarray:
        """``(sample, len(names))`` float64: every sample's values of the PDE parameters ``names``
        (:func:`pde_data.parameter_table`). A name that is no variable is a value the file stores once for all its
        samples, where it does: as a sweep's file values (:func:`pde_data.formats.sweep.file_values`), its numeric
        root attribute of that name (a set generated with a constant ``beta``), else its name's ``KEY<number>`` token
        (PDEBench's one file per value, ``..._beta0.4.hdf5``; not for a glob).

        Raises:
            ValueError: a name the file has neither per sample nor once (naming the parameters it has).
        """
        ds = self.dataset
        single = self.path is not None and not any(ch in self.path for ch in GLOB_CHARS)
        stored = file_values(self.path if single else "", ds.attrs)
        once = {n: stored[n] for n in names if n not in ds.data_vars and n in stored}
        filled = ds.assign({n: (SAMPLE, np.full(ds.sizes[SAMPLE], value)) for n, value in once.items()})
        return parameter_table(filled, names)

    def stats(self) -> Stats | None:
        """``{variable: {"mean": m, "std": s}}`` that the format ships (The Well's ``stats.yaml``), else None."""
        return self._opened().stats

    def fingerprint(self) -> Fingerprint:
        """:func:`pde_data.core.fingerprint` of the data, with this Source's format (a Dataset's own for in-memory data)."""
        return fingerprint(self.dataset, format=None if self.path is None else self.format)

    def verify(self) -> None:
        """Raise ``OSError`` if the file changed since it was opened (HDF5 reads past the end of a truncated
        file as zeros, so a read alone would not notice); nothing for in-memory data and shard globs. A URL is asked
        again at most every :data:`pde_data.core.remote.RECHECK_SECONDS` (each ask is a request to its server)."""
        if self._stamp is not None and remote.is_url(self.path):
            if time.monotonic() - getattr(self, "_checked", -math.inf) < remote.RECHECK_SECONDS:
                return
            self._checked = time.monotonic()
        if self._stamp is not None:
            now = file_stamp(self.path)
            if now != self._stamp:
                size = 0 if remote.is_url(self.path) else 2  # a URL's stamp: (size, ETag's number)
                change = (f"size {self._stamp[size]} -> {now[size]} bytes" if now[size] != self._stamp[size]
                          else "same size, another version")
                raise OSError(f"the file changed while it was being read ({change})")

    def close(self) -> None:
        """Close the file (a later read opens it again); an in-memory Dataset is its owner's to close."""
        if self.path is not None and self._probed is not None and self._pid == os.getpid():
            self._probed.dataset.close()

    def __enter__(self) -> "Source":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Source({self.name!r}, format={self.format!r})"

    def __getstate__(self) -> dict:
        """The path, format, stamp and read options of a file (it is opened again where unpickled); in-memory
        data whole."""
        state = {"path": self.path, "format": self.format, "_stamp": self._stamp, "_options": self._options,
                 "_pid": None, "_storage": self._storage}
        state["_probed"] = self._probed if self.path is None else None
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        if remote.is_url(self.path):
            remote.register(self.path, state.get("_storage"))  # a worker reads the URL as the opener did

    # -- reads

    def _reads_directly(self, variables: list[str]) -> bool:
        """Whether HDF5 reads ``variables`` straight into :meth:`read`'s tensor (sample by sample), else xarray."""
        probed = self._opened()
        if not variables or not all(v in probed.direct for v in variables):
            return False
        return len({TIME in probed.dataset.variables[v].dims for v in variables}) == 1

    def read(self, variables: Sequence[str], samples: Sequence[int], times: slice | None = None, *,
             dtype: torch.dtype = torch.float32, out: torch.Tensor | Sequence[torch.Tensor] | None = None
             ) -> torch.Tensor | tuple[torch.Tensor, ...]:
        """Samples ``samples`` of ``variables`` as channels, in the layout of :func:`to_tensor`.

        Args:
            variables: the channels, in order (all steady, or all with a ``time`` dim).
            samples: sample indices, any order, repeats allowed (distinct runs of consecutive samples are
                read as one slice each; HDF5 fields sample by sample, each variable straight into its
                channel).
            times: the frames to read, a slice of consecutive frames (``None``: all frames).
            dtype: of the result.
            out: a contiguous CPU tensor of the result's shape to read into; or, for fields in time, a
                sequence of them that split the frames in order (``(x, y)`` of a window: ``(n, m, ...)``
                and ``(n, horizon, ...)``, each frame read once).

        Returns:
            ``out`` (as a tuple when a sequence), or a tensor (sharing memory with an in-memory Dataset where
            xarray's values are views) of ``(len(samples), channels, *spatial)``, ``(len(samples), frames,
            channels, *spatial)`` or, for sequences, ``(len(samples), frames, channels)``.

        Raises:
            ValueError: a variable missing, no sample, or ``out`` of another shape; the reader's errors
                (a NaN in an HDF5 slice, an I/O error) as they are.
        """
        variables, samples = list(variables), np.asarray(samples, dtype=np.int64).reshape(-1)
        ds = self.dataset
        missing = [v for v in variables if v not in ds.data_vars]
        if missing or not variables:
            raise ValueError(f"variables: expected variables of {self.name}; missing {missing or 'all'}, "
                             f"found {list(ds.data_vars)}")
        if samples.size == 0:
            raise ValueError("samples: expected at least one sample index, found none")
        frames = _frames(ds, variables[0], times)
        split = out is not None and not isinstance(out, torch.Tensor)
        if self._reads_directly(variables):
            parts = _parts(out, _shape(ds, variables, samples.size, frames), dtype, frames)
            read_channels([self._probed.direct[v] for v in variables], [p.numpy() for p in parts], samples, frames)
            return tuple(parts) if split else parts[0]
        if split:  # through xarray, then copied into the parts
            parts = _parts(out, _shape(ds, variables, samples.size, frames), dtype, frames)
            values = self.read(variables, samples, times, dtype=dtype)
            for part, piece in zip(parts, values.split([p.shape[1] for p in parts], dim=1)):
                part.copy_(piece)
            return tuple(parts)
        distinct, rows = np.unique(samples, return_inverse=True)
        if np.array_equal(distinct, samples):
            return _read_runs(ds, variables, samples, frames, dtype, out)
        values = _read_runs(ds, variables, distinct, frames, dtype, None)
        out = _into(out, (samples.size, *values.shape[1:]), dtype)
        return torch.index_select(values, 0, torch.as_tensor(rows.reshape(-1)), out=out)


#: what :func:`open_source` takes (and every reader of ``pde_data`` with it)
SourceLike = Source | xr.Dataset | str | os.PathLike


def _frames(ds: xr.Dataset, variable: str, times: slice | None) -> slice | None:
    """``times`` as ``slice(start, stop)`` within the frames of ``variable`` (None for a steady one)."""
    if TIME not in ds.variables[variable].dims:  # a Variable: no DataArray built per read
        if times is not None:
            raise ValueError(f"times: expected None for steady variables (no '{TIME}' dim), found {times}")
        return None
    window = range(ds.sizes[TIME])[times if times is not None else slice(None)]
    if window.step != 1:
        raise ValueError(f"times: expected a slice of consecutive frames, found {times}")
    return slice(window.start, window.stop)


def _shape(ds: xr.Dataset, variables: list[str], n: int, frames: slice | None) -> tuple[int, ...]:
    spatial = tuple(ds.sizes[d] for d in spatial_dims(ds.variables[variables[0]]))
    lead = (n,) if frames is None else (n, frames.stop - frames.start)
    return (*lead, len(variables), *spatial)


def _into(out: torch.Tensor | None, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """``out``, checked to be a contiguous CPU tensor of ``shape``; a new one of ``dtype`` if None."""
    if out is None:
        return torch.empty(shape, dtype=dtype)
    if tuple(out.shape) != shape or not out.is_contiguous() or out.device.type != "cpu":
        raise ValueError(f"out: expected a contiguous CPU tensor of shape {shape}, found {tuple(out.shape)} "
                         f"on {out.device} (contiguous: {out.is_contiguous()})")
    return out


def _parts(out: torch.Tensor | Sequence[torch.Tensor] | None, shape: tuple[int, ...], dtype: torch.dtype,
           frames: slice | None) -> list[torch.Tensor]:
    """``out`` as a list of tensors that split ``shape`` along ``frames`` (axis 1), each checked by
    :func:`_into`; ``[a new tensor of shape]`` if None."""
    if out is None or isinstance(out, torch.Tensor):
        return [_into(out, shape, dtype)]
    counts = [int(part.shape[1]) if part.dim() > 1 else -1 for part in out]
    if frames is None or not counts or sum(counts) != shape[1] or min(counts) < 0:
        raise ValueError(f"out: expected tensors splitting the frames of shape {shape} (fields in time), found "
                         f"shapes {[tuple(part.shape) for part in out]}")
    return [_into(part, (shape[0], n, *shape[2:]), dtype) for part, n in zip(out, counts)]


def sample_runs(samples: Sequence[int]) -> list[tuple[int, int]]:
    """``[(start, stop), ...]``: the sorted, distinct ``samples`` as runs of consecutive indices."""
    values = np.unique(np.asarray(samples, dtype=np.int64))
    if values.size == 0:
        return []
    breaks = np.flatnonzero(np.diff(values) != 1) + 1
    return [(int(run[0]), int(run[-1]) + 1) for run in np.split(values, breaks)]


def _read_runs(ds: xr.Dataset, variables: list[str], samples: np.ndarray, frames: slice | None,
               dtype: torch.dtype, out: torch.Tensor | None) -> torch.Tensor:
    """Sorted, distinct ``samples`` through xarray, one slice read per run of consecutive ones, into ``out``
    if given (else the tensor of one run is :func:`to_tensor`'s own, which may share memory with the Dataset)."""
    sub = xr.Dataset({v: ds.variables[v] for v in variables})  # without coordinates: each read indexes data only
    where = {} if frames is None else {TIME: frames}
    parts = [to_tensor(sub.isel({SAMPLE: slice(a, b), **where}), variables, dtype=dtype)
             for a, b in sample_runs(samples)]
    if out is None:
        return parts[0] if len(parts) == 1 else torch.cat(parts)
    return torch.cat(parts, out=_into(out, (samples.size, *parts[0].shape[1:]), dtype))


def open_source(data: SourceLike, *, layout: str | None = None, variables: Sequence[str] | None = None,
                storage_options: Mapping[str, object] | None = None) -> Source:
    """The :class:`Source` of a file (probed once: :mod:`pde_data.formats.opener`), a NetCDF shard glob
    (``"set-*.nc"``, concatenated along ``sample``) or an in-memory Dataset; a Source is returned as it is. The
    one opener: ``open_source(path).dataset`` is the file's lazy Dataset.

    Args:
        layout, variables: for a PDEBench HDF5 file only, its layout and its channels' names where the file
            does not tell them (:class:`pde_data.formats.opener.ReadOptions`).
        storage_options: for a URL (``https://``, ``s3://``, ...), fsspec's options of its protocol (endpoint,
            region, credentials; :mod:`pde_data.core.remote`); None: those given before in this process, else
            fsspec's defaults and the environment's credentials.

    Example:
        >>> ds = open_source("2D_rdb_NA_NA.h5").dataset        # ds.close() closes the file
        >>> ds = open_source("1D_Burgers_Sols_Nu0.1.hdf5", layout="1d").dataset
        >>> ds = open_source("https://example.org/data/ns.h5", storage_options={"headers": {"X-Token": "..."}})

    Raises:
        FileNotFoundError: the file is missing, or the glob matches nothing.
        ValueError: the file is in no format the probe reads, or is unreadable.
        TypeError: ``data`` is none of these.
    """
    if (layout is not None or variables is not None) and not isinstance(data, (str, os.PathLike)):
        raise ValueError(f"layout, variables: expected a file path to read with them, found {type(data).__name__}")
    if isinstance(data, Source):
        return data
    if isinstance(data, xr.Dataset):
        return Source(None, Probed(IN_MEMORY, data))
    if not isinstance(data, (str, os.PathLike)):
        raise TypeError(f"data: expected a Source, a path or an xarray.Dataset, found {type(data).__name__}")
    path = os.fspath(data)
    if remote.is_url(path):
        remote.register(path, storage_options)
    elif storage_options:
        raise ValueError(f"storage_options: expected a URL to read with them, found the local path {path}")
    else:
        path = os.path.abspath(path)
    options = ReadOptions(layout, None if variables is None else tuple(variables))
    return Source(path, probe(path, options), options)
