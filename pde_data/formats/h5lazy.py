"""Lazily indexed h5py-backed variables: xarray reads a slice only when it is asked for.

An :class:`H5Source` says where sample ``i`` of a variable lives (row ``i`` of one dataset, or one
dataset per sample group; optionally one trailing channel of it); :func:`lazy_dataset` wraps each in
``xarray``'s ``LazilyIndexedArray`` so ``ds.isel(sample=i).values`` costs one h5py read (:func:`lazy_variable`
joins several files' sources along ``sample``: a sweep, :mod:`pde_data.formats.sweep`), and hands the
sources back so a reader of many slices (:class:`pde_data.Source`) can call :func:`read_channels`
itself, straight into its buffer. Every slice read is checked for NaN. A file has one read handle per
process (:func:`open_file`), opened on first use, so lazy variables pickle into DataLoader workers;
the Datasets holding it count as its holders (:func:`opening`, :func:`release_file`).
"""

from __future__ import annotations

import atexit
import functools
import itertools
import math
import os
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator, Sequence

import h5py
import numpy as np
import xarray as xr
from xarray.backends import BackendArray
from xarray.core import indexing

from pde_data.core import remote
from pde_data.core.io import check_file

__all__ = ["H5Source", "lazy_dataset", "lazy_variable", "read_parts", "read_channels", "open_file", "open_dataset",
           "opening", "release_file", "file_stamp"]

_FILES: dict[tuple, h5py.File] = {}
_HOLDERS: dict[tuple, int] = {}  # open Datasets over each handle: the last one to close closes it
_FILEOBJ: dict[tuple, object] = {}  # a URL's file object under its handle (:func:`_prefetch` asks it for ranges)


def file_stamp(path: str) -> tuple[int, ...]:
    """``(inode, mtime_ns, size)``: tells a file from a later one written to the same path; a URL's
    ``(size, version)`` (:func:`pde_data.core.remote.stamp`)."""
    if remote.is_url(path):
        return remote.stamp(path)
    st = os.stat(path)
    return st.st_ino, st.st_mtime_ns, st.st_size


def open_file(path: str, stamp: tuple[int, ...] = ()) -> h5py.File:
    """One read-only handle per file version and process (datasets survive pickling into workers); a URL's
    through range requests (:func:`pde_data.core.remote.open_binary`)."""
    key = (path, stamp, os.getpid())
    handle = _FILES.get(key)
    if handle is None or not handle.id.valid:
        fileobj = remote.open_binary(path) if remote.is_url(path) else None
        if fileobj is not None:
            _FILEOBJ[key] = fileobj
        handle = _FILES[key] = h5py.File(path if fileobj is None else fileobj, "r")
    return handle


@atexit.register
def _close_remote() -> None:
    """Close the handles of URLs before the interpreter's teardown: h5py reading through a Python file object
    (fsspec's, with its event loop's thread) would otherwise crash once that object is freed first."""
    for key in [k for k in _FILES if remote.is_url(k[0])]:
        handle = _FILES.pop(key)
        if handle.id.valid:
            handle.close()
        _FILEOBJ.pop(key, None)


@contextmanager
def opening(path: str, stamp: tuple[int, ...]) -> Iterator[h5py.File]:
    """This process's handle of ``path``, held for a Dataset the block builds: released again if the block
    raises; on success the caller's Dataset holds it (its ``close`` calls :func:`release_file`).

    Raises:
        ValueError: the file is not HDF5 (naming its leading bytes), or HDF5 cannot read it (it is truncated).
    """
    try:
        handle = open_file(path, stamp)
    except OSError as err:
        check_file(path)  # a file that does not start like HDF5 is named by its leading bytes
        raise ValueError(f"{path}: expected a readable HDF5 file, found it unreadable ({err})") from None
    key = (path, stamp, os.getpid())
    _HOLDERS[key] = _HOLDERS.get(key, 0) + 1
    try:
        yield handle
    except BaseException:
        release_file(path, stamp)
        raise


def release_file(path: str, stamp: tuple[int, ...] = ()) -> None:
    """One holder of the handle of ``path`` is done with it; the last one closes it (a later read opens it again)."""
    key = (path, stamp, os.getpid())
    holders = _HOLDERS.pop(key, 0) - 1
    if holders > 0:
        _HOLDERS[key] = holders
        return
    handle = _FILES.pop(key, None)
    if handle is not None and handle.id.valid:
        handle.close()
    _FILEOBJ.pop(key, None)
    _dataset.cache_clear()


@functools.lru_cache(maxsize=64)
def _dataset(path: str, stamp: tuple[int, ...], pid: int, name: str, chunk_cache: int) -> h5py.Dataset:
    """The dataset ``name`` of the process's handle (cached: not looked up again on every read), with a chunk
    cache of ``chunk_cache`` bytes; 0: HDF5's default for filtered (compressed) chunks, none for plain ones.

    HDF5 reads a plain chunk it may cache into its cache first and copies it on from there; without a
    cache it reads the chunk straight into the caller's buffer (the OS page cache still holds the file),
    which read windows in shuffled order faster in ``bench_data``'s runs on 128² frames.
    """
    handle = open_file(path, stamp)
    dset = handle[name]
    if not chunk_cache and (dset.chunks is None or dset.id.get_create_plist().get_nfilters()):
        return dset
    access = h5py.h5p.create(h5py.h5p.DATASET_ACCESS)
    access.set_chunk_cache(_CHUNK_SLOTS, chunk_cache, 0.75)
    return h5py.Dataset(h5py.h5d.open(handle.id, name.encode(), dapl=access))


#: slots of a dataset's chunk cache of its own size (a prime, about 10x the chunks of 64 KiB it holds)
_CHUNK_SLOTS = 10007


def open_dataset(path: str, stamp: tuple[int, ...], name: str, chunk_cache: int = 0) -> h5py.Dataset:
    """:func:`open_file` ``[name]``, cached per process, with a chunk cache of ``chunk_cache`` bytes (0: see
    :func:`_dataset`)."""
    dset = _dataset(path, stamp, os.getpid(), name, chunk_cache)
    if not dset.id.valid:  # its file was closed: open again
        _dataset.cache_clear()
        dset = _dataset(path, stamp, os.getpid(), name, chunk_cache)
    return dset


_SCRATCH = threading.local()


def _scratch(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """A C-contiguous buffer of this thread, reused from read to read (allocated again when too small)."""
    size = int(np.prod(shape)) * np.dtype(dtype).itemsize
    buf = getattr(_SCRATCH, "buf", None)
    if buf is None or buf.size < size:
        buf = _SCRATCH.buf = np.empty(size, dtype=np.uint8)
    return buf[:size].view(dtype).reshape(shape)


@dataclass(frozen=True)
class H5Source:
    """Where sample ``i`` of one variable lives: ``key`` in group ``groups[i]`` or row ``i`` of ``key``."""

    path: str
    key: str
    shape: tuple[int, ...]  # (sample, *rest) in data-model order
    dtype: np.dtype
    groups: tuple[str, ...] | None = None
    lead: tuple[int, ...] = ()  # fixed indices after the sample axis (Darcy's tensor channel 0)
    channel: int | tuple[int, ...] | None = None  # trailing channel index(es): group data (T, X, Y, C),
    # ns_incom velocity (N, T, X, Y, 2), The Well's vector (..., D) and tensor (..., D, D) components
    swap_xy: bool = False  # the file stores (..., y, x)
    stamp: tuple[int, ...] = ()  # file_stamp() at open time
    axes: tuple[int, ...] | None = None  # the file's axis of each data-model axis (MATLAB: reversed order)
    check_nan: bool = True  # False where the format's own reader lets NaN through (NetCDF)
    chunk_cache: int = 0  # bytes of decompressed chunks kept per dataset and process (0: :func:`_dataset`)


class _H5Array(BackendArray):
    """Lazily indexed h5py-backed array: reads one sample at a time, refuses NaN slices. Its sources (one per
    file of a sweep) are joined along their first axis, ``sample``: their other axes and dtypes are equal."""

    def __init__(self, sources: Sequence[H5Source]):
        self.sources = list(sources)
        self.starts = np.cumsum([0] + [source.shape[0] for source in self.sources])
        self.shape = (int(self.starts[-1]), *self.sources[0].shape[1:])
        self.dtype = self.sources[0].dtype

    def __getitem__(self, key: indexing.ExplicitIndexer) -> np.ndarray:
        return indexing.explicit_indexing_adapter(key, self.shape, indexing.IndexingSupport.OUTER, self._get)

    def _get(self, key: tuple) -> np.ndarray:
        """Outer indexing: the sample axis sample by sample, other axes as one bounding-slice read each."""
        scalar = np.ndim(key[0]) == 0 and not isinstance(key[0], slice)
        samples = range(self.shape[0])[key[0]] if isinstance(key[0], slice) else np.atleast_1d(key[0])
        rest = tuple(_bounding_slice(k) for k in key[1:])
        sizes = tuple(len(range(n)[s]) for n, s in zip(self.shape[1:], rest))
        out = np.empty((len(samples),) + sizes, self.dtype)
        for row, i in enumerate(samples):  # into a view of the row, even where ``out[row]`` is one value
            part = int(np.searchsorted(self.starts[1:-1], i, side="right"))  # the source holding sample i
            read_parts(self.sources[part], [out[row, ...]], int(i - self.starts[part]), rest)
        for axis, k in reversed(list(enumerate(key[1:], start=1))):  # last first: an int drops its axis
            if not isinstance(k, slice):  # an int or an index array, relative to its bounding slice
                out = np.take(out, np.asarray(k) - rest[axis - 1].start, axis=axis)
        return out[0] if scalar else out


def read_parts(src: H5Source, targets: Sequence[np.ndarray], i: int, rest: tuple[slice, ...]) -> None:
    """Sample ``i``'s block ``rest`` (slices of the axes after ``sample``, data-model order) into ``targets``,
    which split it along its first axis, in order.

    h5py reads straight into a lone target, one copy, when it is C-contiguous, of the file's dtype, and
    the file stores the block as it is laid out in memory; otherwise through a temporary block (this
    thread's scratch buffer, reused) copied into each target: HDF5 scatters into strided memory (a channel
    of a ``(frames, channels, ...)`` batch) much slower than a read plus a numpy copy. A file storing
    ``(..., y, x)`` or MATLAB's reversed axes (``src.axes``) is read in its own order and transposed, and a
    channel of a ``(..., channels)`` dataset comes from one contiguous read of every channel, kept for the
    next component (:func:`_all_channels`). The NaN check (unless ``src.check_nan`` is false) is a sum, and
    an elementwise search only when the sum is NaN; the targets are left unwritten when it fails on a
    temporary block.

    Raises:
        ValueError: the block holds a NaN (naming the file, key and sample).
    """
    channel = () if src.channel is None else tuple(np.atleast_1d(src.channel).tolist())
    if src.groups is None:  # one dataset per variable: kept open (with its chunk cache)
        name, lead = src.key, (i,) + src.lead
        dset = open_dataset(src.path, src.stamp, name, src.chunk_cache)
    else:  # one per sample: opened for this read only, so chunk caches do not pile up
        name, lead = f"{src.groups[i]}/{src.key}", ()
        dset = open_file(src.path, src.stamp)[name]
    shape = (sum(t.shape[0] for t in targets), *targets[0].shape[1:]) if targets[0].ndim else ()
    block = targets[0] if len(targets) == 1 else None
    if src.axes is not None:
        block = _permuted_block(src.axes, dset, i, rest)
    elif src.swap_xy:
        file_rest = rest[:-2] + (rest[-1], rest[-2])
        block = np.swapaxes(dset[lead + file_rest + channel], -1, -2)
    elif channel:
        block = _all_channels(src, dset, name, lead + rest)[(Ellipsis, *channel)]
    elif block is not None and block.flags.c_contiguous and block.dtype == dset.dtype:
        if block.size:
            dset.read_direct(block, lead + rest)
    elif math.prod(shape):  # through this thread's scratch (HDF5 also converts dtypes slower than numpy)
        block = _scratch(shape, dset.dtype)
        dset.read_direct(block, lead + rest)
    if src.check_nan and block is not None and _has_nan(block):  # where the values are contiguous, before
        # they are copied on
        raise ValueError(f"{src.path}: key '{name}', sample {i}: expected finite values, found NaN")
    if block is not None and (len(targets) > 1 or block is not targets[0]):
        _copy_split(block, targets)


def _copy_split(block: np.ndarray, targets: Sequence[np.ndarray]) -> None:
    """``block`` into ``targets``, which split it along its first axis (one target: the whole block)."""
    if len(targets) == 1:
        targets[0][...] = block
        return
    start = 0
    for target in targets:
        target[...] = block[start:start + target.shape[0]]
        start += target.shape[0]


def read_channels(sources: Sequence[H5Source], out: np.ndarray | Sequence[np.ndarray], samples: Sequence[int],
                  frames: slice | None = None) -> None:
    """Samples ``samples`` of every source (channel ``c`` from ``sources[c]``) into ``out``, one read each.

    Args:
        sources: one per channel, all of the same shape ``(sample, [time], *spatial)``.
        out: C-contiguous ``(len(samples), frames, channels, *spatial)`` when ``frames`` is given, else
            ``(len(samples), channels, *spatial)``; with ``frames``, also a sequence of such arrays that
            split the frames in order (a window's given frames and its targets, each read once).
        frames: the frames to read (``None`` for steady variables).
    """
    outs = [out] if isinstance(out, np.ndarray) else list(out)
    n_spatial = len(sources[0].shape) - (2 if frames is not None else 1)
    rest = ((frames,) if frames is not None else ()) + (slice(None),) * n_spatial
    if remote.is_url(sources[0].path):
        _prefetch(sources, samples, rest)
    channel_at = (slice(None),) if frames is not None else ()
    for k, sample in enumerate(samples):
        for c, source in enumerate(sources):
            read_parts(source, [part[(k, *channel_at, c, Ellipsis)] for part in outs], int(sample), rest)


#: chunks one prefetch asks HDF5 the place of at most (more: the reads fetch their blocks as they go)
_PREFETCH_CHUNKS = 4096


def _prefetch(sources: Sequence[H5Source], samples: Sequence[int], rest: tuple[slice, ...]) -> None:
    """The byte ranges of every chunk (or contiguous run) the reads of ``samples`` will touch, fetched at once by
    the URL's file object (:meth:`pde_data.core.remote._Retrying.prefetch`): a window's chunks in one round of
    concurrent requests instead of one block after another. Sources stored otherwise than one dataset of the data
    model's axis order (sample groups, MATLAB's reversed axes) are read as they go."""
    open_file(sources[0].path, sources[0].stamp)
    fileobj = _FILEOBJ.get((sources[0].path, sources[0].stamp, os.getpid()))
    if fileobj is None:
        return
    ranges: list[tuple[int, int]] = []
    for source in sources:
        if source.groups is not None or source.axes is not None:
            return
        dset = open_dataset(source.path, source.stamp, source.key, source.chunk_cache)
        for i in samples:
            box = _file_box(source, dset, int(i), rest)
            found = _byte_ranges(dset, box, _PREFETCH_CHUNKS - len(ranges))
            if found is None:
                return
            ranges += found
    if ranges:
        fileobj.prefetch(ranges)


def _file_box(source: H5Source, dset: h5py.Dataset, i: int, rest: tuple[slice, ...]) -> list[tuple[int, int]]:
    """``[start, stop)`` per axis of the file's dataset that a read of sample ``i``'s ``rest`` covers."""
    file_rest = rest[:-2] + (rest[-1], rest[-2]) if source.swap_xy and len(rest) >= 2 else rest
    box = [(i, i + 1)] + [(k, k + 1) for k in source.lead]
    box += [(s.indices(n)[0], s.indices(n)[1]) for s, n in zip(file_rest, dset.shape[len(box):])]
    return box + [(0, n) for n in dset.shape[len(box):]]  # trailing channels: all of them (read together)


def _byte_ranges(dset: h5py.Dataset, box: list[tuple[int, int]], limit: int) -> list[tuple[int, int]] | None:
    """The byte ranges in the file of the chunks of ``dset`` that ``box`` touches (a contiguous dataset: of the
    rows of its last axes the box spans); None where there are more than ``limit`` or HDF5 cannot say."""
    if dset.chunks is None:
        offset = dset.id.get_offset()
        if offset is None:
            return None
        strides = np.cumprod((1,) + dset.shape[:0:-1])[::-1] * dset.dtype.itemsize
        first = sum(a * s for (a, _), s in zip(box, strides))
        last = sum((b - 1) * s for (_, b), s in zip(box, strides)) + dset.dtype.itemsize
        return [(offset + int(first), offset + int(last))]
    grid = [range(a // c, (b - 1) // c + 1) for (a, b), c in zip(box, dset.chunks)]
    if math.prod(len(g) for g in grid) > limit:
        return None
    ranges = []
    for index in itertools.product(*grid):
        info = dset.id.get_chunk_info_by_coord(tuple(k * c for k, c in zip(index, dset.chunks)))
        if info.byte_offset is not None:
            ranges.append((info.byte_offset, info.byte_offset + info.size))
    return ranges


_LAST_BLOCK: list = [None, None]  # (key, block) of the last all-channel read in this process


def _all_channels(src: H5Source, dset: h5py.Dataset, name: str, selection: tuple) -> np.ndarray:
    """``dset[selection]`` with every trailing channel, one contiguous read: a channel alone is a strided
    selection, which HDF5 reads much slower than the whole block. The last block is kept, so the
    next component of the same vector or tensor field (read right after by the datasets) costs nothing."""
    key = (src.path, src.stamp, name, tuple((k.start, k.stop, k.step) if isinstance(k, slice) else k
                                            for k in selection))
    cached_key, block = _LAST_BLOCK
    if cached_key != key:
        block = dset[selection]
        _LAST_BLOCK[:] = [key, block]
    return block


def _permuted_block(axes: tuple[int, ...], dset: h5py.Dataset, i: int, rest: tuple[slice, ...]) -> np.ndarray:
    """Sample ``i``'s block of a dataset whose axes are the permutation ``axes`` of the data model's
    (``axes[k]``: the file's axis of data-model axis ``k``), read in the file's order and transposed."""
    selection: list = [None] * len(axes)
    selection[axes[0]] = i
    for axis, part in zip(axes[1:], rest):
        selection[axis] = part
    kept = sorted(axes[1:])  # the file's axes left after the sample index, in file order
    return np.transpose(dset[tuple(selection)], [kept.index(axis) for axis in axes[1:]])


def _has_nan(block: np.ndarray) -> bool:
    """Whether ``block`` holds a NaN: a NaN makes the sum NaN, so only a NaN sum needs the elementwise search."""
    if block.dtype.kind not in "fc":
        return False
    return bool(np.isnan(block.sum())) and bool(np.isnan(block).any())


def _bounding_slice(k: int | slice | np.ndarray) -> slice:
    if isinstance(k, slice):
        return k
    k = np.asarray(k)
    return slice(int(k.min()), int(k.max()) + 1) if k.size else slice(0, 0)


def lazy_variable(sources: Sequence[H5Source], dims: tuple[str, ...], attrs: dict | None = None) -> xr.Variable:
    """A lazily indexed variable of ``dims`` over ``sources`` joined along ``sample`` (one source: one file's)."""
    return xr.Variable(dims, indexing.LazilyIndexedArray(_H5Array(sources)), attrs)


def lazy_dataset(fields: dict[str, tuple[H5Source, tuple[str, ...]]], coords: dict | None = None,
                 attrs: dict | None = None) -> tuple[xr.Dataset, dict[str, H5Source]]:
    """A Dataset of lazily indexed variables ``{name: (source, dims)}``, and the source of each variable."""
    data = {name: lazy_variable([source], dims) for name, (source, dims) in fields.items()}
    return xr.Dataset(data, coords=coords, attrs=attrs), {name: source for name, (source, _) in fields.items()}
