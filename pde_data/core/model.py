"""The xarray data model and the one adapter between xarray objects and torch tensors.

Everything the toolkit generates or reads is an ``xarray.Dataset`` (see ``docs/specs/data.md``):

============  ==========================================  ===============================
family        xarray dims                                 torch layout
============  ==========================================  ===============================
field         ``(sample, [time], x[, y[, z]])``           ``(batch, channels, x, y)`` or
                                                          ``(batch, time, channels, x, y)``
sequence      ``(sample, time[, feature])``               ``(batch, time, channels)``
============  ==========================================  ===============================

A Dataset's data variables become channels in the order given (or in the Dataset's own order); a
DataArray is one channel (or ``feature`` channels for sequences). Irregular sampling is a ``time``
coordinate of dims ``(sample, time)``; :func:`time_steps` turns it into step sizes ``(batch, time)``.

Sequences of unequal lengths are padded to a common ``time`` size; an integer variable ``length`` of
dims ``(sample,)`` gives each sample's number of valid steps (:func:`valid_mask`). Steps at and beyond
it are padding: values 0, and the time coordinate keeps increasing strictly with the sample's last step
size (:func:`padded_time`), so :func:`time_steps` holds. Without ``length`` every step is valid.
Sequence targets: per sequence, a float variable ``(sample,)`` (regression, e.g. ``rul``) or an integer
label ``(sample,)`` with attribute ``n_classes`` (:mod:`pde_data.datasets.labels`); per step, a float variable
``(sample, time)`` (0 on padding, like the inputs).

This is the only module that reshapes between xarray and torch; everything else calls it.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch
import xarray as xr

__all__ = ["SAMPLE", "TIME", "X", "Y", "Z", "S", "FEATURE", "SPATIAL_DIMS", "spatial_dims", "field_order", "family_of",
           "check_dims", "describe_time", "to_tensor", "from_tensor", "time_steps", "LENGTH", "ROLE", "TARGET",
           "PARAMETER", "parameters_of", "parameter_table", "valid_mask", "padded_time", "sample_variables"]

SAMPLE = "sample"
TIME = "time"
X, Y, Z = "x", "y", "z"
S = "s"  # the 1D order benchmark's periodic coordinate
FEATURE = "feature"
#: Each sequence's number of valid steps, an integer variable of dims ``(sample,)`` (see the module docstring).
LENGTH = "length"
#: ``attrs[ROLE] == TARGET`` marks a variable as a target, never chosen as an input by default (e.g. the
#: remaining useful life at each step of a degradation set, which would give the answer away)
ROLE, TARGET = "role", "target"
#: ``attrs[ROLE] == PARAMETER`` marks a PDE parameter of each sample (e.g. a sweep's viscosity): a number per sample,
#: dims ``(sample,)``, or ``(sample, time)`` where it varies per step; never a default input or target
PARAMETER = "parameter"
#: Spatial dims in their canonical order ("ij" indexing: x before y). ``s`` is a 1D spatial axis.
SPATIAL_DIMS = (S, X, Y, Z)

XrObj = xr.Dataset | xr.DataArray


def spatial_dims(obj: XrObj) -> tuple[str, ...]:
    """The spatial dims of ``obj`` in canonical order, e.g. ``("x", "y")``."""
    return tuple(d for d in SPATIAL_DIMS if d in obj.dims)


def sample_variables(ds: xr.Dataset) -> list[str]:
    """The data variables of ``ds`` with a ``sample`` dim (what a writer of samples writes), in its order."""
    return [str(k) for k, v in ds.data_vars.items() if SAMPLE in v.dims]


def parameters_of(ds: xr.Dataset) -> tuple[str, ...]:
    """The variables of ``ds`` marked as PDE parameters (``attrs[ROLE] == PARAMETER``), in the Dataset's order.

    Raises:
        ValueError: a marked variable is not a number per sample (dims ``(sample,)`` or ``(sample, time)``).
    """
    names = tuple(name for name, da in ds.data_vars.items() if da.attrs.get(ROLE) == PARAMETER)
    for name in names:
        da = ds[name]
        if da.dims not in ((SAMPLE,), (SAMPLE, TIME)) or not np.issubdtype(da.dtype, np.number):
            raise ValueError(f"parameter '{name}': expected a number per sample, dims ({SAMPLE},) or ({SAMPLE}, "
                             f"{TIME}), found {da.dtype} of dims {da.dims}")
    return names


def parameter_table(ds: xr.Dataset, names: Sequence[str]) -> np.ndarray:
    """``(sample, len(names))`` float64: every sample's values of the per-sample parameters ``names``, in order.

    Raises:
        ValueError: a name is not a finite number per sample (dims ``(sample,)``), naming the parameters there are.
    """
    for name in names:
        da = ds.data_vars.get(name)
        if da is None or da.dims != (SAMPLE,) or not np.issubdtype(da.dtype, np.number):
            found = "no such variable" if da is None else f"{da.dtype} of dims {da.dims}"
            raise ValueError(f"parameter '{name}': expected a number per sample, dims ({SAMPLE},), among the "
                             f"parameters {list(parameters_of(ds))}; found {found}")
    table = np.stack([np.asarray(ds[name].values, dtype=np.float64) for name in names], axis=-1) if names else \
        np.zeros((ds.sizes[SAMPLE], 0))
    bad = np.argwhere(~np.isfinite(table))
    if bad.size:
        raise ValueError(f"parameter '{names[bad[0, 1]]}': expected a finite number per sample, found "
                         f"{table[tuple(bad[0])]} at sample {bad[0, 0]}")
    return table


def family_of(obj: XrObj) -> str:
    """``"field"`` if ``obj`` has spatial dims, ``"sequence"`` if it has ``time`` but no space.

    Raises:
        ValueError: if ``obj`` lacks the ``sample`` dim or is neither a field nor a sequence.
    """
    dims = tuple(obj.dims)
    if SAMPLE not in dims:
        raise ValueError(f"expected a '{SAMPLE}' dim in the data model; found dims {dims}")
    if spatial_dims(obj):
        return "field"
    if TIME in dims:
        return "sequence"
    raise ValueError(f"expected field dims (sample, [time], x[, y]) or sequence dims (sample, time[, feature]); "
                     f"found dims {dims}")


def check_dims(obj: XrObj, expected: Sequence[str], *, name: str = "data") -> None:
    """Raise ``ValueError`` naming ``name`` unless ``obj`` has exactly the dims ``expected`` (any order)."""
    found = tuple(obj.dims)
    if set(found) != set(expected):
        raise ValueError(f"{name}: expected dims {tuple(expected)}, found {found}")


def _channels(obj: XrObj, variables: Sequence[str] | None) -> list[xr.DataArray]:
    if isinstance(obj, xr.DataArray):
        return [obj]
    names = list(variables) if variables is not None else list(obj.data_vars)
    missing = [v for v in names if v not in obj.data_vars]
    if missing:
        raise ValueError(f"expected variables {names}; missing {missing}, found {list(obj.data_vars)}")
    if not names:
        raise ValueError("expected at least one data variable; the Dataset has none")
    return [obj[v] for v in names]


def field_order(da: xr.DataArray) -> tuple[str, ...]:
    """A field variable's dims in the torch layout's order: ``(sample, [time], *spatial)``."""
    lead = (SAMPLE, TIME) if TIME in da.dims else (SAMPLE,)
    order = lead + spatial_dims(da)
    extra = set(da.dims) - set(order)
    if extra:
        raise ValueError(f"field variable '{da.name}': unexpected dims {sorted(extra)} in {da.dims}")
    return order


def _sequence_order(da: xr.DataArray) -> tuple[str, ...]:
    order = (SAMPLE, TIME) + ((FEATURE,) if FEATURE in da.dims else ())
    if set(da.dims) != set(order):
        raise ValueError(f"sequence variable '{da.name}': expected dims (sample, time[, feature]), found {da.dims}")
    return order


def to_tensor(obj: XrObj, variables: Sequence[str] | None = None, *, dtype: torch.dtype = torch.float32,
              device: torch.device | str | None = None) -> torch.Tensor:
    """Convert a data-model object to its torch layout.

    Args:
        obj: a Dataset (its data variables become channels) or a DataArray (one channel; for
            sequences a ``feature`` dim supplies the channels).
        variables: data variables to use, in channel order (default: all, in Dataset order).

    Returns:
        fields ``(batch, channels, *spatial)`` or ``(batch, time, channels, *spatial)``;
        sequences ``(batch, time, channels)``.

    Example:
        >>> ds = xr.Dataset({"a": (("sample", "x", "y"), np.zeros((2, 8, 8)))})
        >>> to_tensor(ds).shape
        torch.Size([2, 1, 8, 8])
    """
    family = family_of(obj)
    arrays = []
    for da in _channels(obj, variables):
        if family == "field":
            values = da.variable.transpose(*field_order(da)).values  # the Variable: no coordinates to carry
            arrays.append(np.expand_dims(values, 2 if TIME in da.dims else 1))
        else:
            values = da.variable.transpose(*_sequence_order(da)).values
            arrays.append(values if values.ndim == 3 else values[..., None])
    channel_axis = 2 if (family == "field" and TIME in obj.dims) or family == "sequence" else 1
    data = np.concatenate(arrays, axis=channel_axis) if len(arrays) > 1 else arrays[0]
    return torch.as_tensor(np.ascontiguousarray(data), dtype=dtype, device=device)


def from_tensor(tensor: torch.Tensor, like: XrObj, variables: Sequence[str] | None = None) -> XrObj:
    """Inverse of :func:`to_tensor`: wrap ``tensor`` with the dims, coords and attrs of ``like``.

    ``tensor`` must have the shape ``to_tensor(like, variables)`` would give, except that the batch
    size may differ from ``like``'s ``sample`` size only if ``like`` has no ``sample`` coordinate.
    Returns the same type as ``like`` (a Dataset with the same variables, or a DataArray).
    """
    family = family_of(like)
    values = tensor.detach().cpu().numpy()
    if isinstance(like, xr.DataArray):
        return _wrap_channel(values, like, 0, family, len(_channels(like, None)))
    names = list(variables) if variables is not None else list(like.data_vars)
    out = {name: _wrap_channel(values, like[name], i, family, len(names)) for i, name in enumerate(names)}
    return xr.Dataset(out, coords=like.coords, attrs=like.attrs)


def _wrap_channel(values: np.ndarray, da: xr.DataArray, index: int, family: str, n: int) -> xr.DataArray:
    if family == "field":
        order = field_order(da)
        axis = 2 if TIME in da.dims else 1
        if values.shape[axis] != n:
            raise ValueError(f"tensor: expected {n} channels on axis {axis}, found shape {values.shape}")
        data = np.take(values, index, axis=axis)
    else:
        order = _sequence_order(da)
        data = values if FEATURE in da.dims else values[..., index]
    expected = tuple(da.sizes[d] for d in order)
    if data.shape[1:] != expected[1:]:
        raise ValueError(f"tensor: expected shape (batch, ...) matching {expected}, found {data.shape}")
    coords = {k: v for k, v in da.coords.items() if set(v.dims) <= set(order)}
    return xr.DataArray(data, dims=order, coords=coords, attrs=da.attrs, name=da.name)


def describe_time(obj: XrObj, *, max_samples: int = 1024) -> str:
    """How a sequence set's steps are timed, in words: the ``time`` coordinate's dims and whether its steps are
    regular (their size) or irregular (their range, over the first ``max_samples`` samples), or that without
    one every step counts as 1 (what :func:`time_steps` and the sequence datasets use as Δt)."""
    if TIME not in obj.coords:
        return f"no '{TIME}' coordinate: every step counts as dt = 1"
    t = obj.coords[TIME]
    head = t.isel({SAMPLE: slice(0, max_samples)}) if SAMPLE in t.dims else t
    dt = np.diff(np.asarray(head.values, dtype=np.float64), axis=-1)
    where = f"the '{TIME}' coordinate {tuple(t.dims)} gives dt"
    if dt.size == 0 or np.allclose(dt, dt.flat[0], rtol=1e-6, atol=0):
        return f"{where}: regular steps" + (f" of {dt.flat[0]:.4g}" if dt.size else "")
    seen = f", over the first {max_samples} samples" if SAMPLE in t.dims and t.sizes[SAMPLE] > max_samples else ""
    return f"{where}: irregular steps, {dt.min():.4g} .. {dt.max():.4g}{seen}"


def time_steps(obj: XrObj, *, origin: float | None = None, dtype: torch.dtype = torch.float32,
               device: torch.device | str | None = None) -> torch.Tensor:
    """Step sizes ``(batch, time)`` from the ``time`` coordinate (shared ``(time,)`` or ``(sample, time)``).

    ``dt[:, k] = t[:, k] - t[:, k-1]`` for k >= 1. The first step is ``t[:, 0] - origin`` when
    ``origin`` is given, else ``t[:, 1] - t[:, 0]`` (1.0 for a length-1 sequence).

    Raises:
        ValueError: if there is no ``time`` coordinate or a step is not positive.
    """
    if TIME not in obj.coords:
        raise ValueError(f"expected a '{TIME}' coordinate to derive step sizes; found coords {list(obj.coords)}")
    t = obj.coords[TIME]
    n_batch = obj.sizes[SAMPLE]
    values = t.transpose(SAMPLE, TIME).values if t.ndim == 2 else np.broadcast_to(t.values, (n_batch, t.size))
    values = np.asarray(values, dtype=np.float64)
    if origin is not None:
        first = values[:, :1] - origin
    elif values.shape[1] > 1:
        first = values[:, 1:2] - values[:, :1]
    else:
        first = np.ones((n_batch, 1))
    dt = np.concatenate([first, np.diff(values, axis=1)], axis=1)
    if not np.all(dt > 0):
        bad = np.argwhere(~(dt > 0))[0]
        raise ValueError(f"time coordinate must increase strictly; step {tuple(bad)} is {dt[tuple(bad)]}")
    return torch.as_tensor(dt, dtype=dtype, device=device)


def valid_mask(obj: xr.Dataset | np.ndarray | Sequence[int], n_time: int | None = None) -> np.ndarray:
    """``(sample, time)`` bool, True on each sequence's valid steps (``k < length``), False on padding.

    Args:
        obj: a Dataset (its ``length`` variable; every step valid without one) or lengths ``(sample,)``.
        n_time: number of steps; taken from the Dataset's ``time`` dim when ``obj`` is a Dataset.

    Raises:
        ValueError: lengths outside ``[1, n_time]``, or lengths given without ``n_time``.
    """
    if isinstance(obj, xr.Dataset):
        n_time = obj.sizes[TIME]
        if LENGTH not in obj.data_vars:
            return np.ones((obj.sizes[SAMPLE], n_time), dtype=bool)
        obj = obj[LENGTH].values
    if n_time is None:
        raise ValueError("n_time: expected the number of time steps when lengths are given, found None")
    lengths = np.asarray(obj)
    if lengths.ndim != 1 or lengths.dtype.kind not in "iu":
        raise ValueError(f"{LENGTH}: expected integer lengths of dims ({SAMPLE},), found {lengths.dtype} of shape "
                         f"{lengths.shape}")
    if lengths.size and (lengths.min() < 1 or lengths.max() > n_time):
        raise ValueError(f"{LENGTH}: expected lengths in [1, {n_time}], found {lengths.min()} .. {lengths.max()}")
    return np.arange(n_time) < lengths[:, None]


def padded_time(time: np.ndarray, length: np.ndarray) -> np.ndarray:
    """Times ``(sample, time)`` whose steps at and beyond ``length`` continue the sample's last step size.

    ``t[i, k] = t[i, L-1] + (k - L + 1) · (t[i, L-1] - t[i, L-2])`` for ``k >= L = length[i]`` (step 1.0
    when ``L == 1``), so times that increase strictly on the valid steps do so through the padding too.

    Args:
        time: ``(sample, time)`` times, valid before ``length`` (anything after).
        length: ``(sample,)`` numbers of valid steps, in ``[1, time.shape[1]]``.
    """
    time = np.asarray(time, dtype=np.float64)
    mask = valid_mask(length, time.shape[1])
    last = np.asarray(length) - 1
    rows = np.arange(time.shape[0])
    end = time[rows, last]
    step = np.where(last > 0, end - time[rows, np.maximum(last - 1, 0)], 1.0)
    beyond = np.arange(time.shape[1]) - last[:, None]
    return np.where(mask, time, end[:, None] + beyond * step[:, None])
