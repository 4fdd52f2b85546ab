"""NetCDF-4 files for the data model: compressed, chunked per sample, written atomically, opened lazily.

``save`` writes to a temporary file in the target's folder and renames it into place, so an
interrupted write never leaves a file at the target path. :func:`open_netcdf_files` opens a set of shards
(``name-00000.nc``, ...) lazily; :func:`pde_data.open_source` (one opener for every format) uses it for
shard globs.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Iterator, Sequence

import xarray as xr

from pde_data.core.model import SAMPLE, SPATIAL_DIMS, TIME
from pde_data.core.params import ExistsError

__all__ = ["save", "read_netcdf", "atomic_path", "check_output", "check_file", "open_netcdf_files",
           "sample_chunks", "HDF5_MAGIC", "NETCDF3_MAGIC"]

HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"
NETCDF3_MAGIC = b"CDF"


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success rename it to ``path``, else delete it.

    Only a regular file (or nothing) at ``path`` is ever replaced: a folder, device or pipe there is refused.

    Example:
        >>> with atomic_path("out.nc") as tmp:
        ...     ds.to_netcdf(tmp)
    """
    target = Path(path)
    if target.exists() and not target.is_file():
        raise ValueError(f"{target}: expected a regular file (or no file) to write, found "
                         f"{'a folder' if target.is_dir() else 'a special file'}; it is left as it is")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp_path = _temporary_beside(target)
    try:
        yield tmp_path
        with tmp_path.open("rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp_path, target)
    finally:
        tmp_path.unlink(missing_ok=True)


def check_output(path: str | os.PathLike, *, overwrite: bool = False) -> Path:
    """Check an output path before anything is computed for it; returns it.

    Writing is proven, not assumed: the temporary file :func:`atomic_path` will write to is created in the
    folder and removed (permission bits say nothing for root, nor for read-only or virtual file systems).

    Raises:
        FileExistsError: something exists at ``path`` and ``overwrite`` is false.
        ValueError: ``path`` is a folder or a special file (never replaced, even with ``overwrite``), or
            its folder cannot be created or a file cannot be created in it.
    """
    target = Path(path)
    if target.exists() and not target.is_file():
        raise ValueError(f"{target}: expected a regular file (or no file) to write, found "
                         f"{'a folder' if target.is_dir() else 'a special file'}")
    if target.exists() and not overwrite:
        raise ExistsError((), f"{target}: expected a new output file, found an existing one; pass {{overwrite=True}} "
                          "to replace it", mentions=["overwrite"])
    folder = target.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
        _temporary_beside(target).unlink()
    except OSError as exc:
        raise ValueError(f"{folder}: expected a folder this process can write {target.name} into, found it "
                         f"read-only or impossible to create ({exc.strerror or type(exc).__name__})") from None
    return target


def _temporary_beside(target: Path) -> Path:
    """A new empty file ``.<name>.<random>.tmp`` beside ``target``, with the usual permissions (mkstemp
    makes 0600): where :func:`atomic_path` writes."""
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    os.chmod(tmp, 0o666 & ~_umask())
    return Path(tmp)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def sample_chunks(dims: tuple[str, ...], shape: tuple[int, ...]) -> tuple[int, ...] | None:
    """Per-sample chunks of a variable: 1 along ``sample`` (and ``time`` for fields), whole elsewhere.

    A field ``(sample, time, x, y)`` gets ``(1, 1, nx, ny)``, so reading one (sample, frame range)
    touches only those frames. A sequence ``(sample, time, feature)`` (no spatial dim) keeps ``time``
    whole, ``(1, nt, nf)``: a frame of a few numbers is too small to be a chunk of its own.
    ``None`` (the library default) without a ``sample`` dim or with an empty dim.
    """
    if SAMPLE not in dims or 0 in shape:
        return None
    split = {SAMPLE, TIME} if any(d in SPATIAL_DIMS for d in dims) else {SAMPLE}
    return tuple(1 if d in split else int(n) for d, n in zip(dims, shape))


def _encoding(ds: xr.Dataset, complevel: int) -> dict[str, dict]:
    """zlib for every numeric variable; :func:`sample_chunks` for data variables with a ``sample`` dim."""
    encoding = {}
    for name, var in ds.variables.items():
        if var.dtype.kind not in "fiub":
            continue
        encoding[name] = {"zlib": True, "complevel": complevel}
        chunks = sample_chunks(var.dims, var.shape) if name in ds.data_vars else None
        if chunks is not None:
            encoding[name]["chunksizes"] = chunks
    return encoding


def save(ds: xr.Dataset, path: str | os.PathLike, *, complevel: int = 4) -> Path:
    """Write ``ds`` to NetCDF-4 at ``path`` with zlib compression, atomically. Returns the path.

    Data variables with a ``sample`` dim are chunked one sample (and, for fields, one frame) per
    chunk (see :func:`sample_chunks`); other variables keep the library's default chunks.
    """
    if not isinstance(ds, xr.Dataset):
        raise TypeError(f"save: expected an xarray.Dataset, found {type(ds).__name__}")
    encoding = _encoding(ds, complevel)
    with atomic_path(path) as tmp:
        ds.to_netcdf(tmp, engine="netcdf4", format="NETCDF4", encoding=encoding)
    return Path(path)


def check_file(path: str | os.PathLike) -> Path:
    """Return ``path`` as a Path if it exists and starts like NetCDF/HDF5; else raise a clear error.

    Raises:
        FileNotFoundError: the file does not exist.
        ValueError: the file is not NetCDF-3, NetCDF-4 or HDF5 (named with the bytes found).
    """
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"no such file: {p}")
    with p.open("rb") as fh:
        head = fh.read(8)
    if not (head.startswith(HDF5_MAGIC) or head.startswith(NETCDF3_MAGIC)):
        raise ValueError(f"{p}: expected a NetCDF or HDF5 file, found leading bytes {head!r}")
    return p


def open_netcdf_files(files: Sequence[str | os.PathLike]) -> xr.Dataset:
    """NetCDF files concatenated along ``sample`` in the given order, lazily (``xarray.open_mfdataset``, dask-
    backed, each file opened once; its leading bytes are looked at only when one fails to open, to name it)."""
    try:
        return xr.open_mfdataset(list(files), combine="nested", concat_dim="sample", engine="netcdf4",
                                 data_vars="minimal", coords="minimal", compat="override")
    except OSError:
        for f in files:
            check_file(f)  # names the shard that is not NetCDF
        raise


def read_netcdf(path: str | os.PathLike) -> xr.Dataset:
    """One NetCDF file opened lazily by the NetCDF library (its leading bytes unchecked).

    Raises:
        ValueError: the NetCDF library cannot read the file (one line with its reason).
    """
    p = Path(path)
    try:
        return xr.open_dataset(p, engine="netcdf4")
    except OSError as exc:  # netCDF4's "[Errno -51] NetCDF: Unknown file format" and the like
        reason = str(exc).split("NetCDF:")[-1].split(":")[0].strip() or type(exc).__name__
        raise ValueError(f"{p}: expected a readable NetCDF file, found one the NetCDF library cannot read "
                         f"({reason})") from None
