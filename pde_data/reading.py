"""Reading samples of a (lazy) Dataset in file order, and opening a file once per process.

:func:`read_samples` reads the given samples (and a time range) of some variables as one tensor, one
slice read per run of consecutive samples, so reads follow the file's per-sample chunks instead of
asking xarray for a scattered index list. :class:`SourceHandle` holds either an in-memory Dataset or
a path that every process (each DataLoader worker) opens for itself on first use: an open file handle
is never pickled into a worker.

Example:
    >>> frames = read_samples(ds, ["u"], [3, 4, 9], time=slice(0, 11))   # (3, 11, 1, x, y)
"""

from __future__ import annotations

import os
from typing import Sequence

import numpy as np
import torch
import xarray as xr

from pde_data._h5lazy import H5SOURCE, H5Source, file_stamp, read_into
from pde_data.model import SAMPLE, TIME, field_order, spatial_dims, to_tensor

__all__ = ["read_samples", "sample_runs", "direct_sources", "read_channels_into", "SourceHandle", "DataReadError",
           "ReadFailure", "one_line"]


class DataReadError(RuntimeError):
    """Reading a sample of a data file failed (truncated file, I/O error, NaN where the reader checks)."""


def sample_runs(samples: Sequence[int]) -> list[tuple[int, int]]:
    """``[(start, stop), ...]``: the sorted, distinct ``samples`` as runs of consecutive indices."""
    values = np.unique(np.asarray(samples, dtype=np.int64))
    if values.size == 0:
        return []
    breaks = np.flatnonzero(np.diff(values) != 1) + 1
    return [(int(run[0]), int(run[-1]) + 1) for run in np.split(values, breaks)]


def read_samples(ds: xr.Dataset, variables: Sequence[str], samples: Sequence[int], *,
                 time: slice | None = None, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Samples ``samples`` (sorted, distinct) of ``variables`` in the torch layout of :func:`to_tensor`.

    Args:
        ds: a (lazy) Dataset of the data model.
        variables: the channels, in order.
        samples: sample indices, sorted and distinct (one slice read per run of consecutive ones).
        time: frames to read (``None``: all, or none for steady variables).

    Returns:
        ``(len(samples), channels, *spatial)`` or ``(len(samples), time, channels, *spatial)``.
    """
    sub = xr.Dataset({v: ds.variables[v] for v in variables})  # without coordinates: each read indexes data only
    where = {} if time is None else {TIME: time}
    parts = [to_tensor(sub.isel({SAMPLE: slice(a, b), **where}), variables, dtype=dtype)
             for a, b in sample_runs(samples)]
    if not parts:
        raise ValueError("samples: expected at least one sample index, found none")
    return parts[0] if len(parts) == 1 else torch.cat(parts)


def direct_sources(ds: xr.Dataset, variables: Sequence[str]) -> list[H5Source] | None:
    """The HDF5 source of each of ``variables`` when every one is a lazily read PDEBench field stored in
    the data model's dim order, so :func:`read_channels_into` can read it straight into a caller's
    buffer (one copy, no xarray indexing); ``None`` otherwise (NetCDF files, in-memory data)."""
    sources = []
    for name in variables:
        da = ds[name]
        source = da.encoding.get(H5SOURCE)
        if source is None or not spatial_dims(da) or da.dims != field_order(da):
            return None
        sources.append(source)
    return sources


def read_channels_into(sources: Sequence[H5Source], out: np.ndarray, where: tuple, sample: int,
                       time: slice | None = None) -> None:
    """Sample ``sample`` of every source (channel ``c`` from ``sources[c]``) into ``out[where]``.

    Args:
        out: a C-contiguous array; ``out[where]`` is ``(frames, channels, *spatial)`` when ``time`` is
            given, else ``(channels, *spatial)`` (any strides).
        time: the frames to read (``None`` for steady variables).
    """
    n_spatial = len(sources[0].shape) - (2 if time is not None else 1)
    rest = ((time,) if time is not None else ()) + (slice(None),) * n_spatial
    channel_at = (slice(None),) if time is not None else ()
    for c, source in enumerate(sources):
        read_into(source, out, where + channel_at + (c,), sample, rest)


class SourceHandle:
    """An in-memory Dataset, or a file path opened lazily once per process (see the module docstring).

    Args:
        source: an ``xarray.Dataset``, or the path (or shard glob) of a file :func:`pde_data.open_data` reads.
    """

    def __init__(self, source: xr.Dataset | str | os.PathLike):
        self._stamp = None
        if isinstance(source, xr.Dataset):
            self.path, self._ds, self._pid = None, source, None
        else:
            self.path, self._ds, self._pid = os.fspath(source), None, None

    @property
    def ds(self) -> xr.Dataset:
        """The Dataset, opened in this process if it is a file not opened here yet."""
        if self.path is not None and (self._ds is None or self._pid != os.getpid()):
            from pde_data.opener import open_data  # opener imports the readers; this module stays light

            self._stamp = _stamp(self.path)
            self._ds, self._pid = open_data(self.path), os.getpid()
        return self._ds

    def verify(self) -> None:
        """Raise ``OSError`` if the file changed since this process opened it (HDF5 reads past the end of
        a truncated file as zeros, so a read alone would not notice)."""
        if self.path is not None and self._ds is not None:
            now = _stamp(self.path)
            if now != self._stamp:
                raise OSError(f"the file changed while it was being read (size {self._stamp[2]} -> {now[2]} bytes)")

    @property
    def name(self) -> str:
        """The file the data comes from (``source_file`` of an opened file, or ``"in-memory data"``)."""
        return self.path or str(self._ds.attrs.get("source_file", "in-memory data"))

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        if self.path is not None:  # a worker opens its own handle
            state["_ds"], state["_pid"] = None, None
        return state


def _stamp(path: str) -> tuple[int, int, int]:
    """:func:`file_stamp` ``(inode, mtime_ns, size)`` of a file; ``(0, 0, 0)`` for a shard glob (not checked)."""
    return file_stamp(path) if os.path.isfile(path) else (0, 0, 0)


class ReadFailure:
    """A read error passed back from a DataLoader worker as a value (its message is one line naming
    the file and sample), so the main process raises :class:`DataReadError` with that line alone."""

    def __init__(self, message: str):
        self.message = message

    def raise_error(self) -> None:
        raise DataReadError(self.message)


def one_line(exc: BaseException) -> str:
    """The first line of an exception's message (its type name if it has none)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
