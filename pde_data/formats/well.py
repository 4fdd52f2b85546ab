"""The Well's HDF5 format (Ohana et al. 2024; ``docs/data_format.md`` of PolymathicAI/the_well), read
lazily into the data model and written for small files.

One file holds ``n_trajectories`` trajectories of one simulation setting:

- root attributes ``dataset_name``, ``grid_type``, ``n_spatial_dims``, ``n_trajectories`` and
  ``simulation_parameters`` (names, each also an attribute of its own);
- ``dimensions``: attribute ``spatial_dims`` (e.g. ``["x", "y"]``), the dataset ``time (T)`` and one
  coordinate dataset per spatial dim, each with ``sample_varying`` / ``time_varying`` attributes;
- ``boundary_conditions``: one group per boundary (``bc_type``, ``associated_dims``, ``mask``, ...);
- ``scalars``: attribute ``field_names``, one dataset per scalar;
- ``t0_fields`` / ``t1_fields`` / ``t2_fields``: scalar, vector and tensor fields, attribute
  ``field_names``; datasets ``(trajectory, time, *spatial)`` plus ``(D,)`` for vectors and ``(D, D)``
  for tensors (D = ``n_spatial_dims``), with ``dim_varying``, ``sample_varying``, ``time_varying``.

In the data model the trajectories are ``sample``, the spatial dims become ``x, y[, z]`` in order (their
names in the file are kept in ``attrs["well_spatial_dims"]``), and every component of a vector or tensor
field is a variable of its own, named by component: ``velocity_x``, ``velocity_y``; ``stress_xx``,
``stress_xy``, ... Each read is one slice of one dataset (:mod:`pde_data.formats.h5lazy`). Fields that do not
vary over samples, time or a spatial dim, and the boundary conditions, are not variables: their names are
listed in ``attrs`` (``well_constant_fields``, ``well_boundaries``; the scalars' in ``well_scalars``, the
simulation parameters each as an attribute). Each simulation parameter that is a number, then each scalar that is
a number or one per trajectory ``(n_trajectories,)``, is also a PDE parameter: a float64 variable of dims
``(sample,)`` marked ``attrs["role"] = "parameter"`` (:data:`pde_data.core.model.PARAMETER`), unless its name is
taken by a variable or coordinate already.
The optional ``stats.yaml`` beside the file (The Well's per-field ``mean`` and ``std``) is read by
variable (component) name into :meth:`pde_data.Source.stats`, and is used for normalization when present.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import h5py
import numpy as np
import xarray as xr

from pde_data.formats.h5lazy import H5Source, lazy_dataset
from pde_data.core.io import atomic_path, check_output
from pde_data.core.model import PARAMETER, ROLE, SAMPLE, TIME, X, Y, Z

__all__ = ["FIELD_GROUPS", "Stats", "is_well", "read_well", "write_well"]

#: ``{variable: {"mean": m, "std": s}}``: statistics shipped with a file, by variable (component) name
Stats = dict[str, dict[str, float]]

FIELD_GROUPS = ("t0_fields", "t1_fields", "t2_fields")
_MODEL_DIMS = (X, Y, Z)


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _names(attr) -> list[str]:
    return [_text(v) for v in np.atleast_1d(attr)] if attr is not None else []


def is_well(f: h5py.File) -> bool:
    """Whether an open HDF5 file is in The Well's format (its root attributes and ``dimensions`` group)."""
    return "dimensions" in f and "n_trajectories" in f.attrs and "n_spatial_dims" in f.attrs


def read_well(f: h5py.File, path: str, stamp: tuple) -> tuple[xr.Dataset, dict[str, H5Source], Stats | None]:
    """The Well's file open as ``f``: the lazy Dataset, the HDF5 source of each variable, and the
    statistics of ``stats.yaml`` beside it (None without one)."""
    missing = [g for g in FIELD_GROUPS if g not in f]
    if missing:
        raise ValueError(f"{path}: expected The Well's groups {', '.join(FIELD_GROUPS)}, found none of "
                         f"{', '.join(missing)} (groups: {sorted(f)})")
    spatial = _names(f["dimensions"].attrs.get("spatial_dims"))
    n_dims = int(f.attrs["n_spatial_dims"])
    if len(spatial) != n_dims or n_dims > 3:
        raise ValueError(f"{path}: dimensions: expected {n_dims} spatial dims (at most 3), found {spatial}")
    coords = {model: xr.Variable(model, np.asarray(f["dimensions"][name][()], dtype=np.float64))
              for model, name in zip(_MODEL_DIMS, spatial)}
    sizes = tuple(coords[model].size for model in _MODEL_DIMS[:n_dims])
    time = np.asarray(f["dimensions"]["time"][()], dtype=np.float64).reshape(-1)
    n_samples = int(f.attrs["n_trajectories"])
    fields, constant = {}, []
    for rank, group in enumerate(FIELD_GROUPS):
        for name in _names(f[group].attrs.get("field_names")):
            dset = f[group][name]
            if not _varies(dset, n_dims):
                constant.append(name)
                continue
            fields.update(_field(path, stamp, name, dset, rank, spatial, (n_samples, time.size, *sizes)))
    if not fields:
        raise ValueError(f"{path}: expected at least one field varying over samples, time and space, "
                         f"found only constant ones {constant}")
    attrs = {"well_dataset_name": _text(f.attrs.get("dataset_name", "")), "well_spatial_dims": spatial,
             "well_grid_type": _text(f.attrs.get("grid_type", "cartesian")),
             "well_constant_fields": constant, "well_boundaries": sorted(f.get("boundary_conditions", {})),
             "well_scalars": _names(f["scalars"].attrs.get("field_names")) if "scalars" in f else []}
    for param in _names(f.attrs.get("simulation_parameters")):
        attrs[param] = f.attrs[param].item() if hasattr(f.attrs[param], "item") else f.attrs[param]
    ds, sources = lazy_dataset(fields, {**coords, TIME: xr.Variable(TIME, time)}, attrs)
    for name, values in _parameters(f, n_samples).items():
        if name not in ds.variables:
            ds[name] = xr.Variable(SAMPLE, values, {ROLE: PARAMETER})
    return ds, sources, _stats(Path(path).with_name("stats.yaml"), list(fields), spatial) or None


def _parameters(f: h5py.File, n_samples: int) -> dict[str, np.ndarray]:
    """``{name: (sample,) float64}``: the simulation parameters (root attributes), then the ``scalars/`` constant
    in time, that are one number, or one per trajectory; the first of a name kept."""
    candidates = [(name, f.attrs.get(name)) for name in _names(f.attrs.get("simulation_parameters"))]
    if "scalars" in f:
        scalars = f["scalars"]
        candidates += [(name, scalars[name][()]) for name in _names(scalars.attrs.get("field_names"))
                       if isinstance(scalars.get(name), h5py.Dataset)
                       and not bool(scalars[name].attrs.get("time_varying", False))]
    found: dict[str, np.ndarray] = {}
    for name, value in candidates:
        value = np.asarray(value)
        if name in found or value.dtype.kind not in "iuf" or value.shape not in ((), (1,), (n_samples,)):
            continue
        found[name] = np.broadcast_to(value.astype(np.float64).reshape(-1), (n_samples,)).copy()
    return found


def _varies(dset: h5py.Dataset, n_dims: int) -> bool:
    dim_varying = np.atleast_1d(dset.attrs.get("dim_varying", [True] * n_dims))
    return bool(dset.attrs.get("sample_varying", True)) and bool(dset.attrs.get("time_varying", True)) \
        and bool(np.all(dim_varying))


def _field(path, stamp, name, dset, rank, spatial, expected) -> dict[str, tuple[H5Source, tuple[str, ...]]]:
    """One variable per component of a rank-``rank`` field ``(trajectory, time, *spatial, [D[, D]])``."""
    n_dims = len(spatial)
    tail = dset.shape[len(expected):]
    allowed = {0: [()], 1: [(n_dims,)], 2: [(n_dims, n_dims), (n_dims * n_dims,)]}[rank]
    if tuple(dset.shape[:len(expected)]) != expected or tuple(tail) not in allowed:
        want = " or ".join(str(expected + a) for a in allowed)
        raise ValueError(f"{path}: {FIELD_GROUPS[rank]}/{name}: expected shape {want}, found {dset.shape}")
    dims = (SAMPLE, TIME, *_MODEL_DIMS[:n_dims])
    out = {}
    for component, label in _components(name, rank, spatial):
        channel = component if len(tail) == len(component) else (component[0] * n_dims + component[1],)
        source = H5Source(path, dset.name.lstrip("/"), expected, dset.dtype, stamp=stamp,
                          channel=channel or None)
        out[label] = source, dims
    return out


def _components(name: str, rank: int, spatial: list[str]) -> list[tuple[tuple[int, ...], str]]:
    """``(component index, variable name)`` of every component of a rank-``rank`` field, row-major:
    ``density``; ``velocity_x``, ``velocity_y``; ``stress_xx``, ``stress_xy``, ..."""
    return [(c, name + ("_" + "".join(spatial[k] for k in c) if c else ""))
            for c in itertools.product(range(len(spatial)), repeat=rank)]


def _stats(path: Path, variables: list[str], spatial: list[str]) -> Stats:
    """``{variable: {"mean", "std"}}`` from The Well's ``stats.yaml`` (per field; vector and tensor entries
    are lists, one per component), for the variables present; {} without the file."""
    if not path.is_file():
        return {}
    import yaml

    raw = yaml.safe_load(path.read_text()) or {}
    stats: Stats = {}
    for key in ("mean", "std"):
        for field, value in (raw.get(key) or {}).items():
            flat = np.asarray(value, dtype=np.float64).reshape(-1)
            if flat.size == 1 and field in variables:
                stats.setdefault(field, {})[key] = float(flat[0])
                continue
            rank = 1 if flat.size == len(spatial) else 2
            for (_, label), v in zip(_components(field, rank, spatial), flat):
                if label in variables:
                    stats.setdefault(label, {})[key] = float(v)
    return {k: v for k, v in stats.items() if {"mean", "std"} <= set(v)}


def write_well(path: str | Path, *, fields: dict[str, np.ndarray], time: np.ndarray, coords: dict[str, np.ndarray],
               dataset_name: str = "circuitop", parameters: dict[str, float] | None = None,
               scalars: dict[str, float | np.ndarray] | None = None, stats: dict[str, dict[str, object]] | None = None,
               overwrite: bool = False) -> Path:
    """Write a small file in The Well's format (atomically), for tests and examples.

    Args:
        fields: ``{name: (trajectory, time, *spatial[, D[, D]])}``; the rank (0, 1 or 2) follows from the
            trailing axes beyond the spatial ones.
        time: ``(time,)``; coords: ``{spatial dim name: values}`` in axis order.
        parameters: simulation parameters (root attributes, listed in ``simulation_parameters``).
        scalars: ``{name: a number, or (trajectory,)}``, the ``scalars`` group (``sample_varying`` by their shape).
        stats: ``{"mean": {field: value or list}, "std": {...}}``, written as ``stats.yaml`` beside the file.
        overwrite: replace an existing file (and ``stats.yaml``); without it they are refused.

    Raises:
        FileExistsError: the file, or ``stats.yaml`` when ``stats`` is given, exists and not ``overwrite``.
    """
    path = check_output(path, overwrite=overwrite)
    if stats is not None:
        check_output(path.with_name("stats.yaml"), overwrite=overwrite)
    spatial = list(coords)
    n_dims = len(spatial)
    n_samples = next(iter(fields.values())).shape[0]
    groups: dict[str, list[str]] = {g: [] for g in FIELD_GROUPS}
    for name, values in fields.items():
        groups[FIELD_GROUPS[values.ndim - 2 - n_dims]].append(name)
    with atomic_path(path) as tmp, h5py.File(tmp, "w") as f:
        f.attrs.update({"dataset_name": dataset_name, "grid_type": "cartesian", "n_spatial_dims": n_dims,
                        "n_trajectories": n_samples, "simulation_parameters": list(parameters or {})})
        for key, value in (parameters or {}).items():
            f.attrs[key] = value
        dims = f.create_group("dimensions")
        dims.attrs["spatial_dims"] = spatial
        dims.create_dataset("time", data=np.asarray(time, dtype=np.float32)).attrs["sample_varying"] = False
        for name, values in coords.items():
            d = dims.create_dataset(name, data=np.asarray(values, dtype=np.float32))
            d.attrs.update({"sample_varying": False, "time_varying": False})
        f.create_group("boundary_conditions")
        _write_scalars(f.create_group("scalars"), scalars or {})
        for group, names in groups.items():
            g = f.create_group(group)
            g.attrs["field_names"] = names
            for name in names:
                d = g.create_dataset(name, data=np.asarray(fields[name], dtype=np.float32))
                d.attrs.update({"dim_varying": [True] * n_dims, "sample_varying": True, "time_varying": True})
                if group == "t2_fields":
                    d.attrs.update({"symmetric": False, "antisymmetric": False})
    if stats is not None:
        import yaml

        plain = {k: {f: np.asarray(v).tolist() for f, v in d.items()} for k, d in stats.items()}
        with atomic_path(path.with_name("stats.yaml")) as tmp:
            tmp.write_text(yaml.safe_dump(plain))
    return path


def _write_scalars(group: h5py.Group, scalars: dict[str, float | np.ndarray]) -> None:
    """The ``scalars`` group: ``field_names`` and one dataset per scalar, constant in time."""
    group.attrs["field_names"] = list(scalars)
    for name, value in scalars.items():
        d = group.create_dataset(name, data=np.asarray(value, dtype=np.float64))
        d.attrs.update({"sample_varying": d.ndim > 0, "time_varying": False})
