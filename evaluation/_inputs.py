"""Input conversion and validation shared by every metric.

Metrics take ``pred`` and ``true`` as numpy arrays, torch tensors or xarray objects with the sample
axis first, and compute in torch: a tensor stays where it is (same device, same graph, so the relative
errors can serve as training losses); numpy and xarray inputs become float64 CPU tensors, and their
results come back as Python floats (or numpy arrays for ``reduce="none"``). xarray objects go through
:func:`pde_data.core.model.to_tensor`, so fields arrive as ``(batch, [time], channels, *spatial)``.
"""

from __future__ import annotations

import contextlib
import contextvars
from dataclasses import dataclass
from typing import Iterator

import numpy as np
import torch
import xarray as xr

from pde_data import model

__all__ = ["Pair", "as_pair", "finish", "check_reduce", "REDUCTIONS", "finite_checks"]

#: how :func:`finish` reduces over the sample axis (the median is numpy's: the middle pair averaged)
_REDUCERS = {"mean": lambda v: v.mean(dim=0), "median": lambda v: torch.quantile(v, 0.5, dim=0), "none": lambda v: v}
REDUCTIONS = tuple(_REDUCERS)

#: whether :func:`as_pair` refuses NaN/Inf (reading that costs a device sync per input)
_CHECK_FINITE = contextvars.ContextVar("circuitop_check_finite", default=True)


@contextlib.contextmanager
def finite_checks(enabled: bool) -> Iterator[None]:
    """Within the block, metrics check their inputs for NaN/Inf (the default) or not. A training loop that
    checks its losses itself turns them off: a NaN then reaches the loss instead of stopping the metric, and no
    step waits for the device to say whether its inputs were finite."""
    token = _CHECK_FINITE.set(enabled)
    try:
        yield
    finally:
        _CHECK_FINITE.reset(token)


@dataclass(frozen=True)
class Pair:
    """``pred`` and ``true`` as tensors of one shape, dtype and device.

    Attributes:
        pred, true: tensors ``(batch, ...)``.
        is_torch: whether the caller passed a tensor (results then stay tensors).
        n_spatial: how many trailing axes are spatial (for xarray, its spatial dims; for arrays, all
            non-sample axes).
        has_time: for xarray input, whether axis 1 is ``time`` (arrays: ``None``, unknown).
    """

    pred: torch.Tensor
    true: torch.Tensor
    is_torch: bool
    n_spatial: int
    has_time: bool | None = None


def _describe(obj) -> str:
    if isinstance(obj, (xr.Dataset, xr.DataArray)):
        return f"dims {dict(obj.sizes)}"
    return f"shape {tuple(getattr(obj, 'shape', ()))}"


def _from_xarray(pred, true) -> Pair:
    if not isinstance(true, type(pred)):
        raise ValueError(f"pred and true: expected the same xarray type, found "
                         f"{type(pred).__name__} and {type(true).__name__}")
    if dict(pred.sizes) != dict(true.sizes):
        raise ValueError(f"pred and true: expected the same dims, found pred dims {dict(pred.sizes)} "
                         f"and true dims {dict(true.sizes)}")
    variables = None
    if isinstance(pred, xr.Dataset):
        variables = list(pred.data_vars)
        if set(variables) != set(true.data_vars):
            raise ValueError(f"pred and true: expected the same data variables, found {variables} "
                             f"and {list(true.data_vars)}")
    tensors = []
    for name, obj in (("pred", pred), ("true", true)):
        try:
            tensors.append(model.to_tensor(obj, variables, dtype=torch.float64))
        except ValueError as exc:
            raise ValueError(f"{name}: {exc}") from None
    return Pair(*tensors, False, len(model.spatial_dims(pred)), model.TIME in pred.dims)


def _tensor(obj, name: str, like: torch.Tensor | None) -> torch.Tensor:
    if isinstance(obj, torch.Tensor):
        return obj if obj.is_floating_point() or obj.is_complex() else obj.double()
    try:
        values = np.asarray(obj, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: expected a numpy array, torch tensor or xarray object, "
                         f"found {type(obj).__name__}") from None
    if like is None:
        return torch.from_numpy(values)
    return torch.as_tensor(values, dtype=like.dtype, device=like.device)


def _from_arrays(pred, true) -> Pair:
    like = pred if isinstance(pred, torch.Tensor) else true if isinstance(true, torch.Tensor) else None
    p, t = _tensor(pred, "pred", like), _tensor(true, "true", like)
    if p.device != t.device:
        raise ValueError(f"pred and true: expected one device, found {p.device} and {t.device}")
    if p.dtype != t.dtype:
        dtype = torch.promote_types(p.dtype, t.dtype)
        p, t = p.to(dtype), t.to(dtype)
    return Pair(p, t, like is not None, max(p.ndim - 1, 0))


def as_pair(pred, true, *, min_ndim: int = 1, reduce: str | None = None) -> Pair:
    """Convert and validate ``pred`` and ``true`` (sample axis first) for a metric; a given ``reduce`` is
    checked first (:func:`check_reduce`), before any conversion.

    Raises:
        ValueError: mixed xarray/array inputs, different shapes or dims, fewer than ``min_ndim``
            axes, an empty array, or NaN/Inf in either input (unless :func:`finite_checks` is off); the
            message names the argument.
    """
    if reduce is not None:
        check_reduce(reduce)
    xr_types = (xr.Dataset, xr.DataArray)
    if isinstance(pred, xr_types) or isinstance(true, xr_types):
        if not (isinstance(pred, xr_types) and isinstance(true, xr_types)):
            raise ValueError(f"pred and true: expected both xarray or both arrays, found "
                             f"{type(pred).__name__} and {type(true).__name__}")
        pair = _from_xarray(pred, true)
    else:
        pair = _from_arrays(pred, true)
    if pair.pred.shape != pair.true.shape:
        raise ValueError(f"pred and true: expected the same shape, found pred {_describe(pred)} "
                         f"and true {_describe(true)}")
    if pair.pred.ndim < min_ndim:
        raise ValueError(f"pred: expected at least {min_ndim} axes (sample first), found {_describe(pred)}")
    if pair.pred.numel() == 0:
        raise ValueError(f"pred and true: expected non-empty arrays, found {_describe(pred)}")
    for name, x in (("pred", pair.pred), ("true", pair.true)) if _CHECK_FINITE.get() else ():
        if not bool(torch.isfinite(x.detach()).all()):
            raise ValueError(f"{name}: expected finite values, found NaN or Inf in {_describe(x)}")
    return pair


def finish(values: torch.Tensor, reduce: str, is_torch: bool):
    """Reduce per-sample ``values`` ``(batch, ...)`` over the sample axis and return in the caller's type.

    ``"mean"`` and ``"median"`` (numpy's: the middle pair averaged) reduce axis 0; ``"none"`` keeps it.
    Tensors in give tensors out; otherwise floats (or numpy arrays).
    """
    check_reduce(reduce)
    out = _REDUCERS[reduce](values)
    if is_torch:
        return out
    array = out.detach().cpu().numpy()
    return float(array) if array.ndim == 0 else array


def check_reduce(reduce: str) -> None:
    """Raise early (before any computation) if ``reduce`` is not a known reduction."""
    if reduce not in REDUCTIONS:
        raise ValueError(f"reduce: expected one of {REDUCTIONS}, found {reduce!r}")
