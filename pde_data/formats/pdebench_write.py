"""Write Datasets of the data model in PDEBench's HDF5 layouts (the inverse of reading them with :func:`pde_data.open_source`).

Tests and demos use small files written here that look exactly like the real ones: same keys, axis
orders, ``t-coordinate`` of T+1 entries and per-sample ``config`` YAML. Samples are copied one at a
time (a lazy Dataset is never loaded whole) into a temporary file renamed into place at the end.
Per-sample datasets are uncompressed and chunked one sample (and one frame) per chunk, e.g. ``tensor``
(N, T, X) in chunks (1, 1, X) and a group's ``data`` (T, X, Y, C) in (1, X, Y, C), so a reader of one
(sample, frame range) touches only those chunks.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import h5py
import numpy as np
import xarray as xr

from pde_data.core.io import atomic_path
from pde_data.core.model import SAMPLE, TIME, X, Y, Z, check_dims
from pde_data.formats.pdebench_config import format_config
from pde_data.formats.pdebench_read import LAYOUTS, _CFD_VARS, _COORD_KEYS

__all__ = ["write_pdebench", "PdebenchGroupWriter", "GROUP_LAYOUTS"]

_LAYOUT_ALIASES = {"rdb": "group", "ns": "group"}
#: the layouts with one HDF5 group per sample (written sample by sample by :class:`PdebenchGroupWriter`)
GROUP_LAYOUTS = ("group", "rdb", "ns", "diff-react")


def _axis(ds: xr.Dataset, dim: str, dtype: np.dtype) -> np.ndarray:
    values = ds[dim].values if dim in ds.coords else np.arange(ds.sizes[dim], dtype=np.float64)
    return np.asarray(values, dtype=dtype)


def _time_with_final(ds: xr.Dataset, dtype: np.dtype) -> np.ndarray:
    """The (T+1,) ``t-coordinate``: ``time`` plus ``attrs['t_final']`` (or one more step)."""
    t = _axis(ds, TIME, np.float64)
    final = ds.attrs.get("t_final", t[-1] + (t[-1] - t[-2] if t.size > 1 else 1.0))
    return np.append(t, final).astype(dtype)


def _chunks(shape: tuple[int, ...], n_lead: int) -> tuple[int, ...] | None:
    """One chunk per sample (and per frame): 1 along the first ``n_lead`` axes, whole along the rest.

    A streaming reader of one (sample, frame range) then touches only those chunks. ``None``
    (contiguous) when an axis is empty, since HDF5 chunks must have positive sizes.
    """
    if 0 in shape:
        return None
    return (1,) * n_lead + tuple(shape[n_lead:])


def _create(f: h5py.File | h5py.Group, key: str, shape: tuple[int, ...], dtype: np.dtype,
            n_lead: int) -> h5py.Dataset:
    """An uncompressed dataset chunked by :func:`_chunks` (PDEBench files are uncompressed)."""
    return f.create_dataset(key, shape, dtype, chunks=_chunks(shape, n_lead))


def _copy_samples(dset: h5py.Dataset, da: xr.DataArray, order: tuple[str, ...], lead: tuple = ()) -> None:
    for i in range(da.sizes[SAMPLE]):
        dset[(i,) + lead] = da.isel({SAMPLE: i}).transpose(*order).values


def _write_darcy(f: h5py.File, ds: xr.Dataset, dtype: np.dtype) -> None:
    _require(ds, "darcy", {"a": (SAMPLE, X, Y), "u": (SAMPLE, X, Y)})
    n, nx, ny = ds.sizes[SAMPLE], ds.sizes[X], ds.sizes[Y]
    _copy_samples(_create(f, "nu", (n, nx, ny), dtype, 1), ds["a"], (X, Y))
    _copy_samples(_create(f, "tensor", (n, 1, nx, ny), dtype, 2), ds["u"], (X, Y), lead=(0,))
    f.create_dataset("x-coordinate", data=_axis(ds, X, dtype))
    f.create_dataset("y-coordinate", data=_axis(ds, Y, dtype))
    f.attrs["beta"] = float(ds.attrs.get("beta", 1.0))


def _write_single(f: h5py.File, ds: xr.Dataset, keys: dict[str, str], dtype: np.dtype) -> None:
    """``1d`` (one variable → ``tensor``) and ``cfd`` (each variable under its own name)."""
    first = ds[next(iter(keys))]
    spatial = tuple(d for d in (X, Y, Z) if d in first.dims)
    order = (TIME,) + spatial
    for name, key in keys.items():
        check_dims(ds[name], (SAMPLE,) + order, name=name)
        shape = (ds.sizes[SAMPLE],) + tuple(ds.sizes[d] for d in order)
        _copy_samples(_create(f, key, shape, dtype, 2), ds[name], order)
    for key, dim in _COORD_KEYS:
        if dim in spatial:
            f.create_dataset(key, data=_axis(ds, dim, dtype))
    f.create_dataset("t-coordinate", data=_time_with_final(ds, dtype))
    for key in ("eta", "zeta", "M"):
        if key in ds.attrs:
            f.attrs[key] = float(ds.attrs[key])


def _per_sample(ds: xr.Dataset) -> list[str]:
    """Variables and coordinates with dims exactly ``(sample,)`` (they go into ``config``)."""
    return [k for k, v in ds.variables.items() if v.dims == (SAMPLE,) and k != SAMPLE]


def _write_group(f: h5py.File, ds: xr.Dataset, names: list[str], swap_xy: bool, dtype: np.dtype,
                 first: int = 0) -> None:
    """Each sample ``i`` of ``ds`` as the group ``f"{first + i:04d}"``."""
    spatial = tuple(d for d in (X, Y, Z) if d in ds[names[0]].dims)
    for name in names:
        check_dims(ds[name], (SAMPLE, TIME) + spatial, name=name)
    file_spatial = spatial[:-2] + spatial[::-1][:2] if swap_xy else spatial
    order = (TIME,) + file_spatial
    shape = tuple(ds.sizes[d] for d in order) + (len(names),)
    params = _per_sample(ds)
    grids = {dim: _axis(ds, dim, dtype) for dim in spatial}
    t = _axis(ds, TIME, dtype)
    f.attrs["variables"] = ",".join(names)
    for i in range(ds.sizes[SAMPLE]):
        sample = ds.isel({SAMPLE: i})
        group = f.create_group(f"{first + i:04d}")
        data = np.stack([sample[n].transpose(*order).values for n in names], axis=-1)
        group.create_dataset("data", data=data.astype(dtype), shape=shape, chunks=_chunks(shape, 1))
        for dim, values in grids.items():
            group.create_dataset(f"grid/{dim}", data=values)
        group.create_dataset("grid/t", data=t)
        group.attrs["config"] = format_config({k: sample[k].item() for k in params})


class PdebenchGroupWriter:
    """A context manager writing a group layout (``group``, ``rdb``, ``ns``, ``diff-react``) chunk by chunk, so
    memory stays bounded by one chunk: :meth:`write` adds a chunk's samples as the next groups. The file is
    written under a temporary name and renamed into place when the ``with`` block ends without error.

    Example:
        >>> with PdebenchGroupWriter("ns.h5", layout="ns") as out:
        ...     for chunk in chunks:                     # Datasets (sample, time, x, y)
        ...         out.write(chunk)
    """

    def __init__(self, path: str | os.PathLike, *, layout: str, variables: list[str] | None = None,
                 dtype: np.dtype = np.float32):
        if layout not in GROUP_LAYOUTS:
            raise ValueError(f"layout: expected one of {GROUP_LAYOUTS}, found {layout!r}")
        self.path, self._layout, self._variables, self._dtype = Path(path), layout, variables, dtype
        self._written = 0
        self._stack: contextlib.ExitStack | None = None
        self._file: h5py.File | None = None

    def __enter__(self) -> "PdebenchGroupWriter":
        with contextlib.ExitStack() as stack:
            self._file = stack.enter_context(h5py.File(stack.enter_context(atomic_path(self.path)), "w"))
            self._stack = stack.pop_all()
        return self

    def __exit__(self, *exc) -> bool:
        stack, self._stack, self._file = self._stack, None, None
        return bool(stack.__exit__(*exc))

    def write(self, ds: xr.Dataset) -> None:
        """Append ``ds``'s samples as the next groups."""
        names = self._variables or [k for k, v in ds.data_vars.items() if TIME in v.dims]
        _write_group(self._file, ds, names, self._layout == "diff-react", self._dtype, first=self._written)
        self._written += ds.sizes[SAMPLE]


def _require(ds: xr.Dataset, layout: str, names: dict[str, tuple[str, ...]]) -> None:
    missing = [n for n in names if n not in ds.data_vars]
    if missing:
        raise ValueError(f"write_pdebench(layout='{layout}'): expected variables {list(names)}; "
                         f"missing {missing}, found {list(ds.data_vars)}")
    for name, dims in names.items():
        check_dims(ds[name], dims, name=name)


def _write_ns_incom(f: h5py.File, ds: xr.Dataset, dtype: np.dtype) -> None:
    """``velocity`` (N,T,X,Y,2) from ``vx``, ``vy``; ``particles`` (N,T,X,Y,1); ``force`` (N,X,Y,2); ``t`` (N,T)."""
    timed, steady = (SAMPLE, TIME, X, Y), (SAMPLE, X, Y)
    _require(ds, "ns_incom", {"vx": timed, "vy": timed, "particles": timed, "force_x": steady, "force_y": steady})
    n, nt, nx, ny = (ds.sizes[d] for d in timed)
    velocity = _create(f, "velocity", (n, nt, nx, ny, 2), dtype, 2)
    particles = _create(f, "particles", (n, nt, nx, ny, 1), dtype, 2)
    force = _create(f, "force", (n, nx, ny, 2), dtype, 1)
    for i in range(n):
        sample = ds.isel({SAMPLE: i})
        velocity[i] = np.stack([sample[v].transpose(*timed[1:]).values for v in ("vx", "vy")], axis=-1)
        particles[i] = sample["particles"].transpose(*timed[1:]).values[..., None]
        force[i] = np.stack([sample[v].transpose(*steady[1:]).values for v in ("force_x", "force_y")], axis=-1)
    if TIME in ds.coords and ds[TIME].ndim == 2:  # per-sample times (sample, time)
        t = ds[TIME].transpose(SAMPLE, TIME).values
    else:
        t = np.broadcast_to(_axis(ds, TIME, np.float64), (n, nt))
    f.create_dataset("t", data=np.asarray(t, dtype=dtype))


def _write_cno_poisson(f: h5py.File, ds: xr.Dataset, dtype: np.dtype) -> None:
    """Groups ``Sample_{i}`` with ``input`` (``f``) and ``output`` (``u``); scalars from attrs (or the data)."""
    _require(ds, "cno_poisson", {"f": (SAMPLE, X, Y), "u": (SAMPLE, X, Y)})
    ids = ds["sample_id"].values if "sample_id" in ds.coords else np.arange(ds.sizes[SAMPLE])
    low, high = dict.fromkeys("fu", np.inf), dict.fromkeys("fu", -np.inf)
    for i, sample_id in enumerate(ids):
        group = f.create_group(f"Sample_{int(sample_id)}")
        for name, key in (("f", "input"), ("u", "output")):
            values = ds[name].isel({SAMPLE: i}).transpose(X, Y).values
            group.create_dataset(key, data=values.astype(dtype))
            low[name], high[name] = min(low[name], float(values.min())), max(high[name], float(values.max()))
    scalars = {"min_inp": low["f"], "max_inp": high["f"], "min_out": low["u"], "max_out": high["u"]}
    for key, value in scalars.items():
        f.create_dataset(key, data=np.asarray(ds.attrs.get(key, value), dtype=dtype))


def write_pdebench(ds: xr.Dataset, path: str | os.PathLike, *, layout: str,
                   variables: list[str] | None = None, dtype: np.dtype = np.float32) -> Path:
    """Write ``ds`` to ``path`` in a PDEBench layout, atomically. Returns the path.

    Args:
        ds: ``darcy``: ``a``, ``u`` (sample, x, y). ``group``/``rdb``/``ns``/``diff-react``: variables
            (sample, time, x, y) become the channels of ``data`` (T, X, Y, C) (``diff-react``: (T, Y, X, C));
            (sample,) variables/coordinates go into each group's ``config`` under ``sim``.
            ``1d``: one variable (sample, time, x). ``cfd``: ``density``, ``pressure``, ``Vx``[, ``Vy``, ``Vz``].
            ``ns_incom``: ``vx``, ``vy``, ``particles`` (sample, time, x, y) and ``force_x``, ``force_y``
            (sample, x, y); ``time`` (time,) or (sample, time) becomes ``t`` (N, T); no grid is stored.
            ``cno_poisson``: ``f`` → ``Sample_{i}/input``, ``u`` → ``Sample_{i}/output`` (``i`` from a
            ``sample_id`` coordinate if present); ``min_inp``... from attrs, else the data's min/max.
        layout: one of ``darcy, group, rdb, ns, diff-react, 1d, cfd, ns_incom, cno_poisson``.
        variables: the variables to write for ``group``/``1d`` (default: all with a ``time`` dim).
        dtype: stored dtype (PDEBench files are float32).
    """
    layout = _LAYOUT_ALIASES.get(layout, layout)
    if layout not in LAYOUTS:
        raise ValueError(f"layout: expected one of {LAYOUTS + tuple(_LAYOUT_ALIASES)}, found {layout!r}")
    names = list(variables) if variables is not None else [k for k, v in ds.data_vars.items() if TIME in v.dims]
    missing = [n for n in names if n not in ds.data_vars]
    if missing or (layout in ("group", "diff-react", "1d") and not names):
        raise ValueError(f"write_pdebench: expected variables {names or '(with a time dim)'}; "
                         f"missing {missing}, found {list(ds.data_vars)}")
    with atomic_path(path) as tmp, h5py.File(tmp, "w") as f:
        if layout == "darcy":
            _write_darcy(f, ds, dtype)
        elif layout == "1d":
            if len(names) != 1:
                raise ValueError(f"write_pdebench(layout='1d'): expected one variable, found {names}")
            _write_single(f, ds, {names[0]: "tensor"}, dtype)
        elif layout == "cfd":
            keys = [k for k in _CFD_VARS if k in ds.data_vars]
            if not {"density", "pressure", "Vx"} <= set(keys):
                raise ValueError(f"write_pdebench(layout='cfd'): expected density, pressure, Vx; found {list(ds.data_vars)}")
            _write_single(f, ds, {k: k for k in keys}, dtype)
        elif layout == "ns_incom":
            _write_ns_incom(f, ds, dtype)
        elif layout == "cno_poisson":
            _write_cno_poisson(f, ds, dtype)
        else:
            _write_group(f, ds, names, layout == "diff-react", dtype)
    return Path(path)
