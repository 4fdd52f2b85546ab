"""A sweep: PDEBench files that differ in a PDE parameter, opened as one lazy Dataset along ``sample``.

PDEBench stores one parameter value per file (``1D_Advection_Sols_beta0.4.hdf5``, ``ReacDiff_Nu0.5_Rho1.0.hdf5``,
``2D_CFD_Rand_M0.1_Eta0.01_Zeta0.01_periodic_128_Train.hdf5``). A glob of such files (:func:`pde_data.open_source`,
format ``"pdebench-sweep:<layout>"``) or a list of them (:func:`open_sweep`) opens as the files' samples in the
given (name) order, each parameter a float64 variable of dims ``(sample,)`` marked ``attrs["role"] = "parameter"``
(:data:`pde_data.core.model.PARAMETER`), each file's samples carrying its value.

A file's value of a key is its numeric scalar root attribute of that name (matched without regard to case: an
``eta`` attribute gives the ``Eta`` of the name), else the token of its name: the stem split on ``_``, a token of
letters followed by a number is KEY=VALUE (``beta0.4``: ``beta`` = 0.4; ``Zeta1e-08``: ``Zeta`` = 1e-08), the key
as written. The parameters are the keys that every file has and whose values differ between the files.

Nothing is read at open time but each file's coordinates and attributes: a variable is one lazily indexed array
over the files' HDF5 sources (:func:`pde_data.formats.h5lazy.lazy_variable`), so a read of some samples reads those
samples of their files only.

Example:
    >>> ds = open_source("1D_Advection_Sols_beta*.hdf5").dataset
    >>> ds["beta"].values            # (sample,): 0.1 for the first file's samples, ...
"""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import xarray as xr

from pde_data.core.model import PARAMETER, ROLE, SAMPLE
from pde_data.formats.h5lazy import file_stamp, lazy_variable, opening, release_file
from pde_data.formats.pdebench_read import Lazy, read_pdebench

__all__ = ["open_sweep", "name_values", "file_values", "sweep_parameters", "stack_files"]

#: a name token ``KEY=VALUE``: letters, then a number (``beta0.4``, ``Nu1e-3``, ``M1``)
_TOKEN = re.compile(r"([A-Za-z]+)([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)")


def name_values(path: str | os.PathLike) -> dict[str, float]:
    """``{key: value}`` of the KEY=VALUE tokens of a file's name (``"ReacDiff_Nu0.5_Rho1.0.hdf5"``: Nu, Rho)."""
    tokens = (_TOKEN.fullmatch(token) for token in Path(path).stem.split("_"))
    return {m.group(1): float(m.group(2)) for m in tokens if m}


def _numeric_attrs(attrs: Mapping) -> dict[str, float]:
    """The attributes that are one number (not a flag, not text)."""
    found = {}
    for key, value in attrs.items():
        value = np.asarray(value)
        if value.size == 1 and value.dtype.kind in "iuf":
            found[str(key)] = float(value.reshape(-1)[0])
    return found


def file_values(path: str, attrs: Mapping) -> dict[str, float]:
    """A file's values: its name's tokens, each replaced by the numeric attribute of its name (any case)
    where there is one, and the other numeric attributes (``path`` ``""``: the attributes alone)."""
    values = name_values(path)
    by_lower = {key.lower(): key for key in values}
    for key, value in _numeric_attrs(attrs).items():
        values[by_lower.get(key.lower(), key)] = value
    return values


def sweep_parameters(files: Sequence[str], attrs: Sequence[Mapping]) -> dict[str, np.ndarray]:
    """``{key: (file,) float64}``: the keys of every file whose values differ between the files, each file's value.

    Args:
        files: the files' paths; attrs: each file's root attributes.

    Raises:
        ValueError: no key differs between the files.
    """
    values = [file_values(str(path), a) for path, a in zip(files, attrs)]
    common = [key for key in values[0] if all(key in v for v in values[1:])]
    found = {key: np.array([v[key] for v in values], dtype=np.float64) for key in common}
    parameters = {key: v for key, v in found.items() if len(set(v.tolist())) > 1}
    if not parameters:
        same = ", ".join(f"{k}={v[0]:g}" for k, v in found.items())
        raise ValueError(f"{len(files)} files ({Path(files[0]).name}, ...): a sweep needs a value per file from "
                         f"the files' attributes or names like 'beta0.4', expected one that differs between them, "
                         f"found {f'the same {same} in every file' if same else 'none'}")
    return parameters


def _difference(a: xr.Dataset, b: xr.Dataset) -> str | None:
    """What tells ``b`` from ``a`` beyond the number of samples (layout, variables, dims, shapes, dtypes, grid)."""
    if a.attrs.get("pdebench_layout") != b.attrs.get("pdebench_layout"):
        return f"layout {a.attrs.get('pdebench_layout')} vs {b.attrs.get('pdebench_layout')}"
    for what, names_a, names_b in (("variables", list(a.data_vars), list(b.data_vars)),
                                   ("coordinates", list(a.coords), list(b.coords))):
        if names_a != names_b:
            return f"{what} {[str(n) for n in names_a]} vs {[str(n) for n in names_b]}"
    for name, va in a.variables.items():
        vb = b.variables[name]
        if va.dims != vb.dims or va.dtype != vb.dtype or _beyond_samples(va) != _beyond_samples(vb):
            return f"'{name}' {va.dtype} {dict(va.sizes)} vs {vb.dtype} {dict(vb.sizes)}"
        if SAMPLE not in va.dims and name not in a.data_vars and not np.array_equal(va.values, vb.values):
            return f"coordinate '{name}' values differ"
    return None


def _beyond_samples(var: xr.Variable) -> dict[str, int]:
    return {dim: n for dim, n in var.sizes.items() if dim != SAMPLE}


def stack_files(files: Sequence[str], opened: Sequence[Lazy], parameters: Mapping[str, np.ndarray]) -> xr.Dataset:
    """The files' lazy Datasets and their variables' sources (:func:`read_pdebench`'s) joined along ``sample`` in
    order, with ``parameters`` (``{key: (file,)}``) as ``(sample,)`` parameter variables; the attributes of the first,
    less those named as a parameter.

    Raises:
        ValueError: two files differ beyond their number of samples (naming both and the difference), or a
            parameter is named as a variable.
    """
    datasets = [ds for ds, _ in opened]
    first = datasets[0]
    unstacked = [str(name) for name, var in first.data_vars.items() if var.dims[:1] != (SAMPLE,)]
    if unstacked:
        raise ValueError(f"{files[0]}: expected variables of dims ({SAMPLE}, ...), found {unstacked} without "
                         f"'{SAMPLE}' first")
    for path, ds in zip(files[1:], datasets[1:]):
        difference = _difference(first, ds)
        if difference:
            raise ValueError(f"{files[0]} and {path}: expected the same variables and shapes but for the number "
                             f"of samples, found {difference}")
    taken = [key for key in parameters if key in first.variables]
    if taken:
        raise ValueError(f"parameters: expected names that are no variable of the files, found {taken} among "
                         f"{[str(n) for n in first.variables]}")
    data = {name: lazy_variable([sources[name] for _, sources in opened], var.dims, var.attrs)
            for name, var in first.data_vars.items()}
    coords = {name: xr.Variable.concat([ds.variables[name] for ds in datasets], SAMPLE) if SAMPLE in var.dims
              else var for name, var in first.coords.items()}
    counts = [ds.sizes[SAMPLE] for ds in datasets]
    for key, values in parameters.items():
        data[key] = xr.Variable(SAMPLE, np.repeat(np.asarray(values, dtype=np.float64), counts), {ROLE: PARAMETER})
    lowered = {key.lower() for key in parameters}
    attrs = {k: v for k, v in first.attrs.items() if str(k).lower() not in lowered}
    return xr.Dataset(data, coords=coords, attrs=attrs)


def open_sweep(files: Sequence[str | os.PathLike]) -> xr.Dataset:
    """PDEBench files (:func:`pde_data.formats.pdebench_read.read_pdebench`, layouts detected) as one lazy Dataset
    along ``sample``, in the order given, with the parameters of :func:`sweep_parameters`; closing it releases
    every file.

    Args:
        files: two or more PDEBench HDF5 files of the same layout, variables and shapes but for their samples.

    Raises:
        ValueError: a file is not PDEBench's, the files differ beyond their samples, or no parameter differs.
    """
    paths = [os.path.abspath(os.fspath(path)) for path in files]
    if len(paths) < 2:
        raise ValueError(f"files: expected two or more PDEBench files of a sweep, found {len(paths)}")
    opened: list[Lazy] = []
    attrs = []
    try:
        for path in paths:
            stamp = file_stamp(path)
            with opening(path, stamp) as f:
                ds, sources = read_pdebench(f, path, stamp)
                ds.set_close(functools.partial(release_file, path, stamp))
                attrs.append(dict(f.attrs))
            opened.append((ds, sources))
        ds = stack_files(paths, opened, sweep_parameters(paths, attrs))
    except BaseException:
        _close_all(opened)
        raise
    ds.set_close(functools.partial(_close_all, opened))
    return ds


def _close_all(opened: Sequence[Lazy]) -> None:
    for ds, _ in opened:
        ds.close()
