"""The format probe behind :func:`pde_data.open_source`: what a file holds, decided once, and its reader.

The format by what the file holds, never by its suffix (a NetCDF file named ``x.h5`` opens as NetCDF):

- a Zarr v3 store (a folder, or a URL's prefix, with a ``zarr.json``) → xarray's Zarr backend, ``"zarr"``;
- a folder with a ``manifest.json`` (a generated set's shards) → :func:`pde_data.formats.manifest.open_manifest`,
  ``"manifest"``, with the manifest's statistics;
- a glob (``*``, ``?`` or ``[``), its files in name order: NetCDF shards (any files but PDEBench's) →
  :func:`pde_data.core.io.open_netcdf_files`, ``"netcdf"``; two or more PDEBench files → one sweep with a
  parameter per sample (:func:`pde_data.formats.sweep.open_sweep`), ``"pdebench-sweep:<layout>"``; one
  PDEBench file → that file as below; PDEBench files mixed with others are refused;
- an HDF5 file, told by the HDF5 library opening it:

  - NetCDF-4 (a root ``_NCProperties`` attribute or a root dimension scale) → xarray's ``h5netcdf``
    reader on the HDF5 handle, ``"netcdf"``; fields that xarray decodes as they are stored (floats
    without scale, offset or a fill value other than NaN) are also read straight from HDF5;
  - MATLAB v7.3 (the v7.3 header in the HDF5 user block) → an FNO ``.mat`` file, ``"fno-mat:73"``;
  - The Well's format (root ``n_trajectories``, a ``dimensions`` group) → ``"the-well"``;
  - any other → PDEBench, ``"pdebench:<layout>"`` (the layout is detected, or none fits);

- any other file, by its leading bytes: a NetCDF-3 file (``CDF``) → the NetCDF library, ``"netcdf"``; a
  torch-saved file (zip or legacy format) → neuraloperator's ``.pt`` data set,
  :func:`pde_data.formats.foreign.open_torch_pt`, ``"neuraloperator-pt"``; a MATLAB v5 file → ``"fno-mat:5"``.

Nothing is loaded. An HDF5 file is opened once in a process: the handle that tells its format reads its
data (and its user block), and closing the Dataset releases it. Only a file that HDF5 cannot open is
opened again, to read its leading bytes.

Example:
    >>> probe("2D_rdb_NA_NA.h5").format
    'pdebench:group'
"""

from __future__ import annotations

import dataclasses
import functools
import glob
import os
import warnings
from dataclasses import dataclass, field

import h5py
import numpy as np
import xarray as xr

from pde_data.formats.h5lazy import H5Source, file_stamp, open_file, opening, release_file
from pde_data.formats.foreign import HEAD_BYTES, open_mat5, open_torch_pt, read_mat73, sniff
from pde_data.formats.manifest import MANIFEST, Manifest, is_manifest_folder, open_manifest
from pde_data.core import remote
from pde_data.core.errors import one_line
from pde_data.core.io import HDF5_MAGIC, NETCDF3_MAGIC, open_netcdf_files, read_netcdf
from pde_data.core.model import field_order, spatial_dims
from pde_data.formats.pdebench_read import read_pdebench
from pde_data.formats.sweep import open_sweep
from pde_data.formats.well import Stats, is_well, read_well
from pde_data.formats.zarr_store import INCOMPLETE, MANIFEST_ATTR

__all__ = ["Probed", "ReadOptions", "probe", "GLOB_CHARS", "ZARR_METADATA", "NETCDF_CHUNK_CACHE"]

GLOB_CHARS = "*?["
#: the file that makes a folder (or a URL's prefix) a Zarr v3 store
ZARR_METADATA = "zarr.json"
#: the chunk cache NetCDF-C gives each variable (64 MiB): overlapping windows decompress a chunk once
NETCDF_CHUNK_CACHE = 64 << 20

#: every format the probe reads, for the one line about a file that starts like none of them
_KNOWN = "a NetCDF, HDF5 (PDEBench, The Well), torch .pt (neuraloperator) or MATLAB .mat (FNO) file"


@dataclass(frozen=True)
class ReadOptions:
    """How to read a PDEBench HDF5 file whose layout the probe cannot tell: ``layout`` (one of
    :data:`pde_data.formats.pdebench_read.LAYOUTS`; inferred from the keys if None) and ``variables`` (names for a
    group file's channels; the file's ``variables`` attribute if None). Other formats take none of them."""

    layout: str | None = None
    variables: tuple[str, ...] | None = None

    def __bool__(self) -> bool:
        return self.layout is not None or self.variables is not None


@dataclass(frozen=True)
class Probed:
    """An opened file: its format, the lazy Dataset, what HDF5 reads straight into a caller's buffer
    (``direct``: the source of each field stored in the data model's dim order), the statistics the
    format ships (The Well's ``stats.yaml``) and the file's stamp (``None`` for a glob)."""

    format: str
    dataset: xr.Dataset
    direct: dict[str, H5Source] = field(default_factory=dict)
    stats: Stats | None = None
    stamp: tuple[int, ...] | None = None


def probe(path: str, options: ReadOptions = ReadOptions()) -> Probed:
    """Open the file (or generated set's folder, or glob of NetCDF shards or PDEBench files) ``path`` lazily with
    the reader its content calls for.

    Raises:
        FileNotFoundError: the file is missing, or the glob matches nothing.
        ValueError: the file is in none of the formats, is unreadable, or is HDF5 in no PDEBench layout; or
            ``options`` given for a file that is not PDEBench's; a glob's PDEBench files mixed with others, or
            differing beyond their samples, or in no parameter.
    """
    if remote.is_url(path):
        return _probe_url(path, options)
    if options and (os.path.isdir(path) or any(ch in path for ch in GLOB_CHARS)):
        raise ValueError(f"{path}: expected a PDEBench HDF5 file for {options}, found a folder or glob")
    if os.path.isfile(os.path.join(path, ZARR_METADATA)):
        return _probe_zarr(path)
    if os.path.isdir(path):
        if not is_manifest_folder(path):
            raise ValueError(f"{path}: expected a data file or a generated set's folder (with {MANIFEST}), "
                             "found a folder without one")
        ds, manifest = open_manifest(path)
        return Probed("manifest", ds, stats=manifest.statistics)
    if any(ch in path for ch in GLOB_CHARS):
        return _probe_glob(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no such file: {path}")
    stamp = file_stamp(path)
    try:
        open_file(path, stamp)  # the one open of an HDF5 file: NetCDF-4, The Well, PDEBench, MATLAB v7.3
    except OSError as err:
        if options:
            raise ValueError(f"{path}: expected a PDEBench HDF5 file for {options}, found a file HDF5 cannot "
                             "open") from None
        return _probe_bytes(path, stamp, err)
    return _probe_hdf5(path, stamp, options)


def _probe_url(url: str, options: ReadOptions) -> Probed:
    """A file behind a URL, read by range requests: an HDF5 file (NetCDF-4, PDEBench, The Well) as a local one;
    others (NetCDF-3, ``.pt``, MATLAB v5, which their readers would read whole) named in one line."""
    if remote.exists(f"{url.rstrip('/')}/{ZARR_METADATA}"):
        return _probe_zarr(url)
    stamp = file_stamp(url)
    try:
        open_file(url, stamp)
    except remote.RemoteError:
        raise
    except OSError:
        raise ValueError(f"{remote.display(url)}: expected an HDF5 or NetCDF-4 file at a URL (others are read "
                         "whole: download it first), found a file HDF5 cannot open") from None
    return _probe_hdf5(url, stamp, options)


def _probe_zarr(path: str) -> Probed:
    """A Zarr (v3) store, a local folder or a URL: each variable read lazily by xarray's Zarr backend, chunk by chunk
    (``cache=False``: a read keeps nothing of the variable beyond what it returns); ``"zarr"``."""
    url = remote.is_url(path)
    try:
        with warnings.catch_warnings():  # zarr's note that consolidated metadata is outside the v3 spec
            warnings.filterwarnings("ignore", "Consolidated metadata", category=UserWarning)
            ds = xr.open_dataset(path, engine="zarr", chunks=None, cache=False, consolidated=None,
                                 storage_options=remote.options_of(path) if url else None)
    except Exception as exc:  # noqa: BLE001 - zarr raises its own errors for a store it cannot read
        raise ValueError(f"{remote.display(path)}: expected a Zarr store in the data model, found one zarr cannot "
                         f"read ({one_line(exc)})") from None
    if INCOMPLETE in ds.attrs:
        raise ValueError(f"{remote.display(path)}: expected a complete Zarr store, found one whose writing did not "
                         "finish (run the generate command that made it again: a sharded store resumes)")
    manifest = ds.attrs.pop(MANIFEST_ATTR, None)  # a sharded store's: the set's statistics, without a pass
    return Probed("zarr", ds, stats=None if manifest is None else Manifest.from_json(manifest).statistics)


def _probe_hdf5(path: str, stamp: tuple, options: ReadOptions) -> Probed:
    """The HDF5 file ``path`` whose handle :func:`open_file` holds, read by its format."""
    with opening(path, stamp) as f:  # holds the handle just opened for the Dataset
        fmt, ds, direct, stats = _read_hdf5(f, path, stamp, options)
    if fmt != "netcdf":  # a NetCDF Dataset closes its xarray store too (:func:`_netcdf4`)
        ds.set_close(functools.partial(release_file, path, stamp))
    return Probed(fmt, ds, _in_field_order(ds, direct), stats, stamp)


def _probe_bytes(path: str, stamp: tuple, hdf5_error: OSError) -> Probed:
    """A file HDF5 cannot open, by its leading bytes: NetCDF-3, torch ``.pt`` or MATLAB v5 (the handle
    that read them reads a v5 or legacy ``.pt`` file whole), else one line naming them."""
    with open(path, "rb") as fh:
        head = fh.read(HEAD_BYTES)
        found = sniff(head)
        if found == "pt":
            return Probed("neuraloperator-pt", open_torch_pt(path, fh), stamp=stamp)
        if found == "mat5":
            return Probed("fno-mat:5", open_mat5(path, fh), stamp=stamp)
    if head.startswith(NETCDF3_MAGIC):
        return Probed("netcdf", read_netcdf(path), stamp=stamp)
    if head.startswith(HDF5_MAGIC) or found == "mat73":
        raise ValueError(f"{path}: expected a readable HDF5 file, found it unreadable ({hdf5_error})")
    raise ValueError(f"{path}: expected {_KNOWN}, found leading bytes {head[:8]!r}")


def _probe_glob(pattern: str) -> Probed:
    """The files that ``pattern`` matches, in name order: PDEBench files as a sweep (one alone as itself), any
    others as NetCDF shards; the stamp ``None`` (the glob is no file)."""
    files = sorted(glob.glob(pattern))
    if not files:
        raise FileNotFoundError(f"no files match {pattern}")
    formats = [_glob_format(path) for path in files]
    if "pdebench" not in formats:
        return Probed("netcdf", open_netcdf_files(files))
    other = next((k for k in range(len(files)) if formats[k] != "pdebench"), None)
    if other is not None:
        first = formats.index("pdebench")
        raise ValueError(f"{pattern}: expected files of one format (PDEBench HDF5 files or NetCDF shards), found "
                         f"{files[first]} (PDEBench) and {files[other]} ({formats[other]})")
    if len(files) == 1:
        return dataclasses.replace(probe(files[0]), stamp=None)
    ds = open_sweep(files)
    return Probed(f"pdebench-sweep:{ds.attrs['pdebench_layout']}", ds)


def _glob_format(path: str) -> str:
    """``"pdebench"`` for a PDEBench HDF5 file, else its format (``"netcdf"``, ``"the-well"``, ``"fno-mat:73"``),
    or ``"not HDF5"``; the handle that tells is released again (closed unless a Dataset holds it)."""
    stamp = file_stamp(path)
    try:
        with opening(path, stamp) as f:
            found = _hdf5_format(f) or "pdebench"
    except ValueError:  # not HDF5 (NetCDF-3, or another file the NetCDF reader names) or unreadable
        return "not HDF5"
    release_file(path, stamp)
    return found


def _hdf5_format(f: h5py.File) -> str | None:
    """The format of the open HDF5 file ``f`` if it is not PDEBench's: ``"fno-mat:73"``, ``"netcdf"``, ``"the-well"``."""
    return "fno-mat:73" if sniff(_user_block(f)) == "mat73" else "netcdf" if _is_netcdf4(f) else \
        "the-well" if is_well(f) else None


def _user_block(f: h5py.File) -> bytes:
    """The first :data:`HEAD_BYTES` bytes of the open HDF5 file ``f``'s user block (MATLAB's v7.3 header),
    read through its handle; empty without a user block."""
    if not f.userblock_size:
        return b""
    return os.pread(f.id.get_vfd_handle(), min(HEAD_BYTES, f.userblock_size), 0)


def _read_hdf5(f: h5py.File, path: str, stamp: tuple, options: ReadOptions) -> tuple:
    """``(format, Dataset, direct sources, stats)`` of the HDF5 file open as ``f``."""
    other = _hdf5_format(f)
    if other and options:
        raise ValueError(f"{path}: expected a PDEBench HDF5 file for {options}, found a {other} file (it takes no "
                         "layout or variables)")
    if other == "fno-mat:73":
        return ("fno-mat:73", *read_mat73(f, path, stamp), None)
    if other == "netcdf":
        ds = _netcdf4(path, stamp)
        return "netcdf", ds, _stored_as_decoded(f, ds, path, stamp), None
    if other == "the-well":
        return ("the-well", *read_well(f, path, stamp))
    ds, direct = read_pdebench(f, path, stamp, layout=options.layout, variables=options.variables)
    return f"pdebench:{ds.attrs['pdebench_layout']}", ds, direct, None


def _in_field_order(ds: xr.Dataset, direct: dict[str, H5Source]) -> dict[str, H5Source]:
    """The sources of the fields whose dims are the data model's torch order (what HDF5 reads in place)."""
    return {name: src for name, src in direct.items() if _field_ordered(ds[name])}


def _field_ordered(da: xr.DataArray) -> bool:
    try:
        return bool(spatial_dims(da)) and da.dims == field_order(da)
    except ValueError:  # dims beyond (sample, time, space): not a field
        return False


def _is_dimension_scale(obj: h5py.HLObject) -> bool:
    value = obj.attrs.get("CLASS") if isinstance(obj, h5py.Dataset) else None
    if isinstance(value, bytes):
        value = value.decode("ascii", "replace")
    return value == "DIMENSION_SCALE"


def _is_netcdf4(f: h5py.File) -> bool:
    """Whether the open HDF5 file ``f`` was written by a NetCDF-4 library.

    NetCDF-C and h5netcdf write ``_NCProperties`` on the root group; older writers are recognised by
    their dimension scales. Only the root group is searched: it is all that the NetCDF reader reads,
    and a PDEBench group file may hold thousands of groups.
    """
    if "_NCProperties" in f.attrs:
        return True
    return any(_is_dimension_scale(f[key]) for key in f if f.get(key, getclass=True) is h5py.Dataset)


def _stored_as_decoded(f: h5py.File, ds: xr.Dataset, path: str, stamp: tuple) -> dict[str, H5Source]:
    """The sources of the NetCDF-4 variables whose values xarray's decoding leaves as stored: float data
    with no ``scale_factor``, ``add_offset`` or ``missing_value``, and no ``_FillValue`` other than NaN
    (masking NaN with NaN changes nothing). As xarray does, their reads let NaN through; as the NetCDF
    library does, each keeps :data:`NETCDF_CHUNK_CACHE` bytes of decompressed chunks."""
    direct = {}
    for name in map(str, ds.data_vars):
        dset = f.get(name)
        if not isinstance(dset, h5py.Dataset) or dset.dtype.kind != "f" or ds[name].dtype != dset.dtype \
                or ds[name].shape != dset.shape:  # h5netcdf pads a variable shorter along an unlimited dim
            continue
        fill = dset.attrs.get("_FillValue")
        if {"scale_factor", "add_offset", "missing_value"} & set(dset.attrs) or not (fill is None or np.isnan(fill)):
            continue
        direct[name] = H5Source(path, name, dset.shape, dset.dtype, stamp=stamp, check_nan=False,
                                chunk_cache=NETCDF_CHUNK_CACHE)
    return direct


def _netcdf_root(path: str, stamp: tuple):
    """The NetCDF-4 reader (``h5netcdf``) over this process's HDF5 handle of ``path`` (no second open)."""
    import h5netcdf

    return h5netcdf.File(open_file(path, stamp), "r", decode_vlen_strings=True)


def _netcdf4(path: str, stamp: tuple) -> xr.Dataset:
    """A NetCDF-4 file read by xarray over the handle that probed it; closing it releases the handle.

    The file manager reopens through :func:`_netcdf_root`, so the Dataset pickles (a process that
    unpickles it opens its own handle) and reads again after ``close`` as xarray's own readers do.
    """
    store = xr.backends.H5NetCDFStore(xr.backends.CachingFileManager(_netcdf_root, path, stamp))
    try:
        ds = xr.open_dataset(store)
    except (OSError, ValueError) as exc:
        store.close()
        raise ValueError(f"{path}: expected a readable NetCDF file, found one xarray cannot read "
                         f"({one_line(exc)})") from None
    ds.set_close(functools.partial(_close_netcdf4, store, path, stamp))
    return ds


def _close_netcdf4(store, path: str, stamp: tuple) -> None:
    store.close()
    release_file(path, stamp)
