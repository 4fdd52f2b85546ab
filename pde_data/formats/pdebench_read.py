"""Open PDEBench HDF5 files lazily as Datasets of the data model (``docs/specs/data.md``).

=============  =============================================  ====================================
layout         file keys                                      Dataset
=============  =============================================  ====================================
``darcy``      ``nu`` (N,X,Y), ``tensor`` (N,1,X,Y)           ``a``, ``u`` (sample, x, y)
``group``      groups ``0000``... with ``data`` (T,X,Y,C),    one variable per channel
               ``grid/x``, ``grid/y``, ``grid/t``, ``config``  (sample, time, x, y); config numbers
                                                              as (sample,) coordinates
``diff-react`` as ``group``, file axes (T, y, x, C)           ``u``, ``v`` (sample, time, x, y)
``1d``         ``tensor`` (N,T,X), ``t-coordinate`` (T+1,)    ``u`` (sample, time, x)
``cfd``        ``density``, ``pressure``, ``Vx``[, Vy, Vz]     same names (sample, time, x[, y, z])
``ns_incom``   ``velocity`` (N,T,X,Y,2), ``particles``         ``vx``, ``vy``, ``particles``
               (N,T,X,Y,1), ``force`` (N,X,Y,2), ``t`` (N,T)   (sample, time, x, y); ``force_x``,
                                                              ``force_y`` (sample, x, y)
``cno_poisson`` groups ``Sample_0``... with ``input``,        ``f``, ``u`` (sample, x, y);
               ``output`` (X,Y); scalars ``min_inp``,          the four scalars in attrs
               ``max_inp``, ``min_out``, ``max_out``
=============  =============================================  ====================================

Each layout's keys are checked, with errors that name the file, the key and what was expected, and the
layout is told from a file's keys (:func:`detect_layout`). Nothing is read at open time except coordinates
and attributes: every variable is an ``xarray`` lazily indexed array over the h5py file
(:mod:`pde_data.formats.h5lazy`), so ``ds.isel(sample=i).values`` reads sample ``i`` only (one h5py read per
sample), and each slice is checked for NaN when it is read. The ``t-coordinate`` of the single-file layouts
has one entry more than there are frames: ``time`` is its first T entries and the last is kept in
``attrs["t_final"]``.

``ns_incom`` (PDEBench 2D incompressible Navier-Stokes, ``ns_incom_inhom_2d_512-*.h5``) stores no grid:
``x``, ``y`` are *assumed* cell centres ``(i + 0.5) / n`` on [0, 1) (their ``grid`` attribute says so).
``t`` is per sample: when all samples share it, ``time`` is that (time,) vector; when they differ,
``time`` is the data model's irregular-sampling coordinate of dims (sample, time) holding every
sample's times, and ``attrs["time_note"]`` says so (nothing is dropped). The velocity channels and
the force channels are lazy views of one channel each of the file's ``velocity`` / ``force``.

``cno_poisson`` (CNO's ``PoissonData_64x64_IN.h5`` / ``_OUT.h5``) keeps samples in the order of
``i`` in ``Sample_{i}`` (numerically: ``Sample_10`` after ``Sample_9``); if the ``i`` are not
``0..N-1`` they are kept as a (sample,) coordinate ``sample_id``. The file stores no grid: ``x``,
``y`` are *assumed* points ``p / (n - 1)`` on [0, 1], boundaries included, as in
:func:`pde_data.generate.poisson.generate_poisson`.
"""

from __future__ import annotations

import os
import re

import h5py
import numpy as np
import xarray as xr

from pde_data.formats.h5lazy import H5Source, lazy_dataset
from pde_data.core.model import SAMPLE, TIME, X, Y, Z
from pde_data.formats.pdebench_config import parse_config

__all__ = ["read_pdebench", "LAYOUTS", "Lazy", "detect_layout"]

#: a lazy Dataset and the HDF5 source of each of its variables
Lazy = tuple[xr.Dataset, dict[str, H5Source]]

LAYOUTS = ("darcy", "group", "diff-react", "1d", "cfd", "ns_incom", "cno_poisson")
_GROUP_NAMES = {"rdb": ("h",), "diff-react": ("u", "v")}
_CFD_VARS = ("density", "pressure", "Vx", "Vy", "Vz")
_COORD_KEYS = (("x-coordinate", X), ("y-coordinate", Y), ("z-coordinate", Z))
_NS_INCOM_KEYS = ("velocity", "particles", "force", "t")
_CNO_SCALARS = ("min_inp", "max_inp", "min_out", "max_out")
_CNO_SAMPLE = re.compile(r"Sample_(\d+)")


def _dataset(f: h5py.File, path: str, key: str, ndim: int | tuple[int, ...]) -> h5py.Dataset:
    """``f[key]`` if it is a dataset with ``ndim`` axes (or one of several), else a clear error."""
    if key not in f or not isinstance(f[key], h5py.Dataset):
        raise ValueError(f"{path}: expected key '{key}' (a dataset); found keys {sorted(f.keys())}")
    allowed = (ndim,) if isinstance(ndim, int) else ndim
    if f[key].ndim not in allowed:
        expected = " or ".join(map(str, allowed))
        raise ValueError(f"{path}: key '{key}': expected {expected} axes, found shape {f[key].shape}")
    return f[key]


def _expect_shape(path: str, key: str, expected: tuple[int, ...], found: tuple[int, ...], why: str = "") -> None:
    if tuple(found) != tuple(expected):
        why = f" ({why})" if why else ""
        raise ValueError(f"{path}: key '{key}': expected shape {tuple(expected)}{why}, found {tuple(found)}")


def _axis(f: h5py.File, path: str, key: str, size: int) -> np.ndarray:
    values = _dataset(f, path, key, 1)[()]
    _expect_shape(path, key, (size,), values.shape)
    return values


def _coords(f: h5py.File, path: str, sizes: tuple[int, ...]) -> dict[str, xr.Variable]:
    return {dim: xr.Variable(dim, _axis(f, path, key, n), {"grid": "cell centres"})
            for (key, dim), n in zip(_COORD_KEYS, sizes)}


def _time(f: h5py.File, path: str, n_frames: int) -> tuple[dict, dict]:
    """``time`` = first T entries of the (T+1,) ``t-coordinate``; ``t_final`` its last entry."""
    if "t-coordinate" not in f:
        return {}, {}
    t = _axis(f, path, "t-coordinate", n_frames + 1)
    return {TIME: xr.Variable(TIME, t[:-1])}, {"t_final": float(t[-1])}


def _read_darcy(f: h5py.File, path: str, stamp: tuple) -> Lazy:
    nu = _dataset(f, path, "nu", 3)
    tensor = _dataset(f, path, "tensor", 4)
    _expect_shape(path, "tensor", (nu.shape[0], 1) + nu.shape[1:], tensor.shape, "from 'nu'")
    dims = (SAMPLE, X, Y)
    fields = {"a": (H5Source(path, "nu", nu.shape, nu.dtype, stamp=stamp), dims),
              "u": (H5Source(path, "tensor", nu.shape, tensor.dtype, lead=(0,), stamp=stamp), dims)}
    attrs = {"beta": float(f.attrs["beta"])} if "beta" in f.attrs else {}
    return lazy_dataset(fields, _coords(f, path, nu.shape[1:]), attrs)


def _read_single(f: h5py.File, path: str, stamp: tuple, names: tuple[str, ...], keys: tuple[str, ...],
                 ndims: tuple[int, ...]) -> Lazy:
    """The 1D (``tensor`` → ``u``) and CFD (one key per variable) single-file layouts."""
    first = _dataset(f, path, keys[0], ndims)  # (N, T, X[, Y, Z])
    fields = {}
    for name, key in zip(names, keys):
        arr = _dataset(f, path, key, first.ndim)
        _expect_shape(path, key, first.shape, arr.shape)
        dims = (SAMPLE, TIME) + (X, Y, Z)[: first.ndim - 2]
        fields[name] = (H5Source(path, key, first.shape, arr.dtype, stamp=stamp), dims)
    time, attrs = _time(f, path, first.shape[1])
    attrs.update({k: float(f.attrs[k]) for k in ("eta", "zeta", "M") if k in f.attrs})
    return lazy_dataset(fields, {**_coords(f, path, first.shape[2:]), **time}, attrs)


def _read_ns_incom(f: h5py.File, path: str, stamp: tuple) -> Lazy:
    """``velocity`` (N,T,X,Y,2) → ``vx``, ``vy``; ``particles`` (N,T,X,Y,1); ``force`` (N,X,Y,2); ``t`` (N,T)."""
    velocity = _dataset(f, path, "velocity", 5)
    n, nt, nx, ny, nc = velocity.shape
    if nc != 2:
        raise ValueError(f"{path}: key 'velocity': expected shape (N, T, X, Y, 2), found {velocity.shape}")
    particles = _dataset(f, path, "particles", 5)
    _expect_shape(path, "particles", (n, nt, nx, ny, 1), particles.shape, "from 'velocity'")
    force = _dataset(f, path, "force", 4)
    _expect_shape(path, "force", (n, nx, ny, 2), force.shape, "from 'velocity'")
    t = _dataset(f, path, "t", 2)[()]
    _expect_shape(path, "t", (n, nt), t.shape, "from 'velocity'")

    def var(key, arr, shape, dims, channel):
        return H5Source(path, key, shape, arr.dtype, channel=channel, stamp=stamp), dims

    timed, steady = (SAMPLE, TIME, X, Y), (SAMPLE, X, Y)
    fields = {"vx": var("velocity", velocity, (n, nt, nx, ny), timed, 0),
            "vy": var("velocity", velocity, (n, nt, nx, ny), timed, 1),
            "particles": var("particles", particles, (n, nt, nx, ny), timed, 0),
            "force_x": var("force", force, (n, nx, ny), steady, 0),
            "force_y": var("force", force, (n, nx, ny), steady, 1)}
    grid = {"grid": "cell centres (i + 0.5) / n on [0, 1), assumed: the file has no grid"}
    coords = {X: xr.Variable(X, (np.arange(nx) + 0.5) / nx, grid), Y: xr.Variable(Y, (np.arange(ny) + 0.5) / ny, grid)}
    attrs = {}
    if (t == t[:1]).all():
        coords[TIME] = xr.Variable(TIME, t[0])
    else:
        coords[TIME] = xr.Variable((SAMPLE, TIME), t)
        attrs["time_note"] = "the file's 't' differs between samples: 'time' has dims (sample, time)"
    return lazy_dataset(fields, coords, attrs)


def _cno_samples(f: h5py.File) -> list[tuple[int, str]]:
    """``(i, "Sample_i")`` for every ``Sample_{i}`` group, by ``i`` numerically."""
    found = ((_CNO_SAMPLE.fullmatch(k), k) for k in f.keys())
    return sorted((int(m.group(1)), k) for m, k in found if m and isinstance(f[k], h5py.Group))


def _read_cno_poisson(f: h5py.File, path: str, stamp: tuple) -> Lazy:
    """Groups ``Sample_{i}`` with ``input`` → ``f`` and ``output`` → ``u`` (X, Y); scalars into attrs."""
    samples = _cno_samples(f)
    if not samples:
        raise ValueError(f"{path}: expected per-sample groups 'Sample_0', ...; found keys {sorted(f.keys())}")
    first = samples[0][1]
    shape = _dataset(f[first], f"{path}:{first}", "input", 2).shape
    for _, g in samples:
        for key in ("input", "output"):
            found = _dataset(f[g], f"{path}:{g}", key, 2).shape
            _expect_shape(path, f"{g}/{key}", shape, found, f"as '{first}/input'")
    attrs = {}
    for key in _CNO_SCALARS:
        value = _dataset(f, path, key, (0, 1))
        if value.size != 1:
            raise ValueError(f"{path}: key '{key}': expected a scalar, found shape {value.shape}")
        attrs[key] = float(value[()].item() if value.ndim == 0 else value[0])
    groups = tuple(g for _, g in samples)
    full = (len(groups),) + shape
    dims = (SAMPLE, X, Y)
    fields = {name: (H5Source(path, key, full, f[first][key].dtype, groups, stamp=stamp), dims)
              for name, key in (("f", "input"), ("u", "output"))}
    grid = {"grid": "points p / (n - 1) on [0, 1], boundaries included, assumed: the file has no grid"}
    coords = {X: xr.Variable(X, np.arange(shape[0]) / (shape[0] - 1), grid),
              Y: xr.Variable(Y, np.arange(shape[1]) / (shape[1] - 1), grid)}
    ids = np.array([i for i, _ in samples])
    if not np.array_equal(ids, np.arange(len(ids))):
        coords["sample_id"] = xr.Variable(SAMPLE, ids)
    return lazy_dataset(fields, coords, attrs)


def _config_coords(f: h5py.File, groups: list[str]) -> dict[str, xr.Variable]:
    """Numbers found in every group's ``config`` become (sample,) coordinates (``sim.`` dropped)."""
    configs = [parse_config(str(f[g].attrs.get("config", ""))) for g in groups]
    keys = [k for k, v in configs[0].items() if isinstance(v, (int, float))
            and all(isinstance(c.get(k), (int, float)) for c in configs)]
    names = {k: k.removeprefix("sim.").replace(".", "_") for k in keys}
    return {names[k]: xr.Variable(SAMPLE, np.array([c[k] for c in configs])) for k in keys}


def _read_group(f: h5py.File, path: str, stamp: tuple, names: tuple[str, ...] | None, swap_xy: bool) -> Lazy:
    groups = sorted(k for k in f.keys() if isinstance(f[k], h5py.Group))
    if not groups:
        raise ValueError(f"{path}: expected per-sample groups '0000', ...; found keys {sorted(f.keys())}")
    shape = _dataset(f[groups[0]], f"{path}:{groups[0]}", "data", (3, 4, 5)).shape  # (T, X[, Y, Z], C)
    for g in groups:
        found = _dataset(f[g], f"{path}:{g}", "data", len(shape)).shape
        _expect_shape(path, f"{g}/data", shape, found, f"as '{groups[0]}'")
    spatial = shape[1:-1][::-1] if swap_xy else shape[1:-1]
    names = names or _default_names(f, path, shape[-1])
    if len(names) != shape[-1]:
        raise ValueError(f"{path}: key '{groups[0]}/data': expected {len(names)} channels {names}, found {shape[-1]}")
    grid = f[groups[0]]
    coords = {dim: xr.Variable(dim, _axis(grid, f"{path}:{groups[0]}", f"grid/{dim}", n), {"grid": "cell centres"})
              for dim, n in zip((X, Y, Z), spatial)}
    coords[TIME] = xr.Variable(TIME, _axis(grid, f"{path}:{groups[0]}", "grid/t", shape[0]))
    coords.update(_config_coords(f, groups))
    dims = (SAMPLE, TIME) + (X, Y, Z)[: len(spatial)]
    full = (len(groups), shape[0]) + spatial
    dtype = f[groups[0]]["data"].dtype
    fields = {name: (H5Source(path, "data", full, dtype, tuple(groups), channel=c, swap_xy=swap_xy, stamp=stamp),
                     dims) for c, name in enumerate(names)}
    return lazy_dataset(fields, coords)


def _default_names(f: h5py.File, path: str, n_channels: int) -> tuple[str, ...]:
    if "variables" in f.attrs:
        return tuple(str(f.attrs["variables"]).split(","))
    for tag, names in _GROUP_NAMES.items():
        if tag in os.path.basename(path) and len(names) == n_channels:
            return names
    return tuple(f"c{i}" for i in range(n_channels))


def detect_layout(f: h5py.File, path: str) -> str:
    """The layout of the PDEBench file open as ``f`` from its keys (``diff-react`` from its name too)."""
    keys = set(f.keys())
    if _cno_samples(f):  # before "group": CNO's Sample_* groups sit beside scalar datasets
        return "cno_poisson"
    if keys & {"velocity", "particles"}:  # then a missing 'force' / 't' is named by the reader
        return "ns_incom"
    if {"nu", "tensor"} <= keys:
        return "darcy"
    if "density" in keys:
        return "cfd"
    if "tensor" in keys:
        return "1d"
    if keys and all(isinstance(f[k], h5py.Group) for k in keys):
        return "diff-react" if "diff-react" in os.path.basename(path) else "group"
    raise ValueError(f"{path}: expected PDEBench keys ('nu'+'tensor', 'tensor', 'density', "
                     f"{'+'.join(_NS_INCOM_KEYS)}, 'Sample_0'... groups, or per-sample groups); "
                     f"found keys {sorted(keys)}")


def read_pdebench(f: h5py.File, path: str, stamp: tuple, *, layout: str | None = None,
                  variables: tuple[str, ...] | None = None) -> Lazy:
    """The PDEBench file open as ``f`` (:func:`pde_data.formats.h5lazy.opening`) as a lazy Dataset with
    ``attrs["pdebench_layout"]``, and the HDF5 source of each variable: read in ``layout`` (one of
    :data:`LAYOUTS`; detected from the keys if None), ``variables`` as in
    :class:`pde_data.formats.opener.ReadOptions`."""
    layout = layout or detect_layout(f, path)
    if layout not in LAYOUTS:
        raise ValueError(f"layout: expected one of {LAYOUTS}, found {layout!r}")
    if layout == "darcy":
        ds, sources = _read_darcy(f, path, stamp)
    elif layout == "1d":
        ds, sources = _read_single(f, path, stamp, tuple(variables or ("u",)), ("tensor",), (3,))
    elif layout == "cfd":
        names = _CFD_VARS[:3] + tuple(k for k in _CFD_VARS[3:] if k in f)
        ds, sources = _read_single(f, path, stamp, names, names, (3, 4, 5))
    elif layout == "ns_incom":
        ds, sources = _read_ns_incom(f, path, stamp)
    elif layout == "cno_poisson":
        ds, sources = _read_cno_poisson(f, path, stamp)
    else:
        ds, sources = _read_group(f, path, stamp, tuple(variables) if variables else None,
                                  swap_xy=layout == "diff-react")
    ds.attrs["pdebench_layout"] = layout
    return ds, sources
