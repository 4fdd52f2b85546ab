"""One opener for every data file: NetCDF (files or shard globs) and PDEBench HDF5, chosen by content.

The reader and ``attrs["source_format"]`` by what the file holds:

- a glob (``*``, ``?`` or ``[``) of NetCDF shards → :func:`pde_data.open`, ``"netcdf"``;
- a NetCDF-3 file (leading bytes ``CDF``) → :func:`pde_data.open`, ``"netcdf"``;
- a NetCDF-4 file (HDF5 with a root ``_NCProperties`` attribute or a root dimension scale)
  → :func:`pde_data.open`, ``"netcdf"``;
- a torch-saved file (zip or legacy format) → neuraloperator's ``.pt`` data set,
  :func:`pde_data.foreign.open_torch_pt`, ``"neuraloperator-pt"``;
- a MATLAB file (v7.3 or v5 header) → an FNO ``.mat`` file, :func:`pde_data.foreign.open_fno_mat`,
  ``"fno-mat:73"`` / ``"fno-mat:5"``;
- an HDF5 file in The Well's format (root ``n_trajectories``, a ``dimensions`` group) →
  :func:`pde_data.well_format.open_well`, ``"the-well"``;
- any other HDF5 file → :func:`pde_data.open_pdebench`, ``"pdebench:<layout>"`` (it detects the
  layout, or says that none fits).

The suffix is never looked at: a NetCDF file named ``x.h5`` opens as NetCDF. Nothing is loaded; the
HDF5 handle used to sniff a file is closed before the file is opened. The Dataset's
``attrs["source_file"]`` is the absolute path (or glob) and ``attrs["source_format"]`` the format.

Example:
    >>> ds = open_data("2D_rdb_NA_NA.h5")
    >>> ds.attrs["source_format"]
    'pdebench:group'
"""

from __future__ import annotations

import os

import h5py
import xarray as xr

from pde_data.io import NETCDF3_MAGIC, check_file
from pde_data.io import open as open_netcdf
from pde_data.foreign import open_fno_mat, open_torch_pt, sniff
from pde_data.pdebench_read import open_pdebench
from pde_data.well_format import is_well, open_well

__all__ = ["open_data"]

_GLOB_CHARS = "*?["


def _is_dimension_scale(obj: h5py.HLObject) -> bool:
    value = obj.attrs.get("CLASS") if isinstance(obj, h5py.Dataset) else None
    if isinstance(value, bytes):
        value = value.decode("ascii", "replace")
    return value == "DIMENSION_SCALE"


def _is_netcdf4(path: str) -> bool:
    """Whether the HDF5 file ``path`` was written by a NetCDF-4 library.

    NetCDF-C and h5netcdf write ``_NCProperties`` on the root group; older writers are recognised by
    their dimension scales. Only the root group is searched: it is all that :func:`pde_data.open` reads,
    and a PDEBench group file may hold thousands of groups.

    Raises:
        ValueError: ``path`` starts like HDF5 but HDF5 cannot read it (e.g. it is truncated).
    """
    try:
        with h5py.File(path, "r") as f:
            if "_NCProperties" in f.attrs:
                return True
            return any(_is_dimension_scale(f[key]) for key in f
                       if f.get(key, getclass=True) is h5py.Dataset)
    except OSError as err:
        raise ValueError(f"{path}: expected a readable HDF5 file, found it unreadable ({err})") from None


def _is_well(path: str) -> bool:
    with h5py.File(path, "r") as f:
        return is_well(f)


def _is_netcdf3(path: str) -> bool:
    with open(path, "rb") as fh:
        return fh.read(len(NETCDF3_MAGIC)) == NETCDF3_MAGIC


#: every format the opener reads, for the one line about a file that starts like none of them
_KNOWN = "a NetCDF, HDF5 (PDEBench, The Well), torch .pt (neuraloperator) or MATLAB .mat (FNO) file"


def open_data(path: str | os.PathLike) -> xr.Dataset:
    """Open a NetCDF file, a NetCDF shard glob or a PDEBench HDF5 file lazily, in the data model.

    Args:
        path: the file, or a glob of NetCDF shards (``"set-*.nc"``, concatenated along ``sample``).

    Returns:
        The lazy Dataset, with ``attrs["source_file"]`` (absolute path or glob) and
        ``attrs["source_format"]`` (``"netcdf"`` or ``"pdebench:<layout>"``).

    Raises:
        FileNotFoundError: the file is missing, or the glob matches nothing.
        ValueError: the file is not NetCDF/HDF5, is unreadable, or is HDF5 in no PDEBench layout.
    """
    text = os.path.abspath(os.fspath(path))
    if any(ch in os.fspath(path) for ch in _GLOB_CHARS):
        ds, fmt = open_netcdf(text), "netcdf"
    else:
        if not os.path.isfile(text):
            raise FileNotFoundError(f"no such file: {text}")
        foreign = sniff(text)
        if foreign is None:
            check_file(text, expected=_KNOWN)
        if foreign == "pt":
            ds, fmt = open_torch_pt(text), "neuraloperator-pt"
        elif foreign in ("mat73", "mat5"):
            ds, fmt = open_fno_mat(text), f"fno-mat:{foreign[3:]}"
        elif _is_netcdf3(text) or _is_netcdf4(text):
            ds, fmt = open_netcdf(text), "netcdf"
        elif _is_well(text):
            ds, fmt = open_well(text), "the-well"
        else:
            ds = open_pdebench(text)
            fmt = f"pdebench:{ds.attrs['pdebench_layout']}"
    ds.attrs.update({"source_file": text, "source_format": fmt})
    return ds
