"""Readers of the field's other files into the data model: neuraloperator's ``.pt`` data sets and the
original FNO ``.mat`` files (MATLAB v7.3 and v5).

- **neuraloperator ``.pt``** (``darcy_train_16.pt`` and the like): a dict with tensors ``x`` (inputs) and
  ``y`` (targets), ``(sample, *spatial)`` or ``(sample, 1, *spatial)``. Read with
  ``torch.load(weights_only=True)`` (never a full unpickle) and memory-mapped where the file is in
  torch's zip format, so pages are read as samples are used. They become the variables ``input`` and
  ``target`` on a unit grid (``x = linspace(0, 1, n)``; neuraloperator's files carry no coordinates).
- **FNO ``.mat``**: ``a`` (the input: the initial vorticity, the Darcy coefficient, the Burgers initial
  state) and ``u`` (the solution), with ``t`` when present; MATLAB's shapes are ``a (N, X[, Y])`` and ``u
  (N, X[, Y][, T])``. ``u`` with one axis more than ``a`` is a trajectory: data-model ``(sample, time, x[,
  y])``. v7.3 files are HDF5: read lazily with h5py, whose axes are MATLAB's reversed (``u`` is stored
  ``(T, Y, X, N)``), so every read is transposed back. MATLAB stores the sample axis fastest, so one
  sample's values lie far apart in the file: reading one sample touches most of its pages (the OS page
  cache then serves the rest). v5 files are read whole by ``scipy.io.loadmat``, refused with a clear
  message when larger than half the free memory.
"""

from __future__ import annotations

import os
from typing import BinaryIO

import h5py
import numpy as np
import torch
import xarray as xr

from pde_data.formats.h5lazy import H5Source, lazy_dataset
from pde_data.core.errors import one_line
from pde_data.core.model import SAMPLE, TIME, X, Y

__all__ = ["TORCH_MAGICS", "MAT73_MAGIC", "MAT5_MAGIC", "HEAD_BYTES", "sniff", "open_torch_pt", "read_mat73",
           "open_mat5"]

TORCH_MAGICS = (b"PK\x03\x04", b"\x80\x02")  # torch's zip format; the legacy pickle-based format
MAT73_MAGIC = b"MATLAB 7.3 MAT-file"
MAT5_MAGIC = b"MATLAB 5.0 MAT-file"


#: how many leading bytes :func:`sniff` looks at
HEAD_BYTES = 128
#: the format :func:`sniff` names for a file's leading bytes, in the order it looks
_FORMATS = ((MAT73_MAGIC, "mat73"), (MAT5_MAGIC, "mat5"), (TORCH_MAGICS, "pt"))


def sniff(head: bytes) -> str | None:
    """``"pt"``, ``"mat73"``, ``"mat5"`` or None, from a file's first :data:`HEAD_BYTES` bytes."""
    return next((name for magic, name in _FORMATS if head.startswith(magic)), None)


def _grid(sizes: tuple[int, ...]) -> dict[str, xr.Variable]:
    return {name: xr.Variable(name, np.linspace(0.0, 1.0, n)) for name, n in zip((X, Y), sizes)}


def _spatial_dims(path: str, name: str, shape: tuple[int, ...]) -> tuple[str, ...]:
    if len(shape) not in (2, 3):
        raise ValueError(f"{path}: '{name}': expected (sample, x) or (sample, x, y), found shape {shape}")
    return (SAMPLE, X, Y)[: len(shape)]


def open_torch_pt(path: str, fh: BinaryIO) -> xr.Dataset:
    """neuraloperator's ``.pt`` data set (module docstring) as a Dataset with ``input`` and ``target``.

    Args:
        path: the file. fh: the file open for reading in binary mode: a file in torch's legacy format is
            read from it; one in the zip format is memory-mapped from ``path`` (the legacy one cannot be).

    Raises:
        ValueError: the file is not a dict of tensors (only tensors load with ``weights_only``), lacks
            ``x`` or ``y``, or their shapes do not fit.
    """
    fh.seek(0)
    zipped = fh.read(len(TORCH_MAGICS[0])) == TORCH_MAGICS[0]
    fh.seek(0)
    try:
        obj = torch.load(path if zipped else fh, map_location="cpu", weights_only=True, mmap=zipped)
    except Exception as exc:  # noqa: BLE001 - whatever torch raises for a non-tensor pickle, say it in one line
        raise ValueError(f"{path}: expected a torch-saved dict of tensors (read with weights_only=True), "
                         f"found a file that does not load that way ({one_line(exc)[:200]})") from None
    if not isinstance(obj, dict) or not all(isinstance(v, torch.Tensor) for v in obj.values()):
        found = type(obj).__name__ if not isinstance(obj, dict) else \
            f"a dict with {sorted((k, type(v).__name__) for k, v in obj.items())}"
        raise ValueError(f"{path}: expected a dict of tensors with keys 'x' and 'y', found {found}")
    missing = [k for k in ("x", "y") if k not in obj]
    if missing:
        raise ValueError(f"{path}: expected keys 'x' and 'y' (neuraloperator's inputs and targets), "
                         f"found keys {sorted(obj)}")
    arrays = {}
    for role, key in (("input", "x"), ("target", "y")):
        values = obj[key]
        if values.ndim in (3, 4) and values.shape[1] == 1:
            values = values[:, 0]  # (sample, 1, *spatial): one channel
        arrays[role] = values.numpy()
    dims = _spatial_dims(path, "x", arrays["input"].shape)
    if arrays["target"].shape[0] != arrays["input"].shape[0] or arrays["target"].shape[1:] != arrays["input"].shape[1:]:
        raise ValueError(f"{path}: 'y': expected the shape of 'x' {tuple(arrays['input'].shape)}, found "
                         f"{tuple(arrays['target'].shape)}")
    data = {role: xr.Variable(dims, values) for role, values in arrays.items()}
    return xr.Dataset(data, coords=_grid(arrays["input"].shape[1:]))


def _roles(path: str, shapes: dict[str, tuple[int, ...]]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Data-model dims of ``a`` and ``u`` from their MATLAB shapes."""
    missing = [k for k in ("a", "u") if k not in shapes]
    if missing:
        raise ValueError(f"{path}: expected the FNO variables 'a' and 'u', found {sorted(shapes)}")
    a, u = shapes["a"], shapes["u"]
    a_dims = _spatial_dims(path, "a", a)
    if u == a:
        return a_dims, a_dims
    if len(u) == len(a) + 1 and u[:-1] == a:
        return a_dims, (SAMPLE, TIME, *a_dims[1:])
    raise ValueError(f"{path}: 'u': expected MATLAB shape {a} (steady) or {a + ('T',)} (a trajectory), found {u}")


def _times(t: np.ndarray | None, n: int) -> np.ndarray:
    if t is not None and np.asarray(t).size == n:
        return np.asarray(t, dtype=np.float64).reshape(n)
    return np.arange(1, n + 1, dtype=np.float64)


def read_mat73(f: h5py.File, path: str, stamp: tuple) -> tuple[xr.Dataset, dict[str, H5Source]]:
    """The MATLAB v7.3 file open as ``f``: the lazy Dataset and the HDF5 source of ``a`` and ``u``."""
    shapes = {k: tuple(reversed(f[k].shape)) for k in f if isinstance(f[k], h5py.Dataset)}
    a_dims, u_dims = _roles(path, shapes)
    t = f["t"][()] if "t" in f else None
    dtypes = {k: f[k].dtype for k in ("a", "u")}
    fields = {}
    for name, dims in (("a", a_dims), ("u", u_dims)):
        matlab = shapes[name]  # (N, X[, Y][, T]) ; on disk reversed
        disk_axis = {k: len(matlab) - 1 - k for k in range(len(matlab))}  # MATLAB axis -> h5py axis
        # data-model axes in MATLAB terms: sample, [time (MATLAB's last)], x[, y]
        order = (0, len(matlab) - 1, *range(1, len(matlab) - 1)) if TIME in dims else tuple(range(len(matlab)))
        shape = tuple(matlab[k] for k in order)
        source = H5Source(path, name, shape, dtypes[name], stamp=stamp, axes=tuple(disk_axis[k] for k in order))
        fields[name] = source, dims
    coords = _grid(shapes["a"][1:])
    if TIME in u_dims:
        coords[TIME] = xr.Variable(TIME, _times(t, shapes["u"][-1]))
    return lazy_dataset(fields, coords, {"matlab_format": "7.3"})


def open_mat5(path: str, fh: BinaryIO) -> xr.Dataset:
    """A MATLAB v5 FNO file, read whole (module docstring) from ``fh``, the file ``path`` open for reading
    in binary mode."""
    from scipy.io import loadmat, whosmat

    try:
        fh.seek(0)
        listing = {name: tuple(shape) for name, shape, _ in whosmat(fh)}
    except Exception as exc:  # noqa: BLE001 - scipy's errors for a broken header, in one line
        raise ValueError(f"{path}: expected a MATLAB v5 file, found one scipy cannot list ({exc})") from None
    a_dims, u_dims = _roles(path, listing)
    size, free = os.fstat(fh.fileno()).st_size, _free_memory()
    if free is not None and size > free / 2:
        raise ValueError(f"{path}: a MATLAB v5 file is read whole; {size / 2**30:.1f} GiB is more than half the "
                         f"free memory ({free / 2**30:.1f} GiB); save it as v7.3 (save -v7.3), which is read lazily")
    fh.seek(0)
    mat = loadmat(fh, variable_names=[k for k in ("a", "u", "t") if k in listing])
    data = {"a": xr.Variable(a_dims, np.asarray(mat["a"])),
            "u": xr.Variable(u_dims, np.moveaxis(np.asarray(mat["u"]), -1, 1) if TIME in u_dims else np.asarray(mat["u"]))}
    coords = _grid(listing["a"][1:])
    if TIME in u_dims:
        coords[TIME] = xr.Variable(TIME, _times(mat.get("t"), listing["u"][-1]))
    return xr.Dataset(data, coords=coords, attrs={"matlab_format": "5"})


def _free_memory() -> int | None:
    """Available memory in bytes (Linux ``MemAvailable``), or None where unknown."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None
