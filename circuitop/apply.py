"""Apply a circuitop module to xarray sequences and fields, keeping their coordinates.

All conversion goes through :mod:`pde_data.core.model` (``to_tensor`` / ``from_tensor`` / ``time_steps``).
"""

from __future__ import annotations

import inspect
from typing import Sequence

import torch
import xarray as xr
from torch import nn

from pde_data.core.model import TIME, from_tensor, family_of, time_steps, to_tensor

__all__ = ["apply"]


def apply(module: nn.Module, obj: xr.Dataset | xr.DataArray, *, variables: Sequence[str] | None = None,
          use_time: bool = True) -> xr.Dataset | xr.DataArray:
    """Run ``module`` on a data-model object and wrap the result with the same dims and coords.

    - sequences ``(sample, time[, feature])`` become ``(batch, time, channels)``; if ``module.forward``
      takes ``dt`` and ``use_time`` is set, the step sizes from the ``time`` coordinate
      (:func:`pde_data.core.model.time_steps`) are passed as ``dt (batch, time)`` — irregular sampling.
    - fields ``(sample, [time], x[, y])`` become ``(batch, channels, x[, y])``; a ``time`` dim is
      folded into the batch (each frame is mapped on its own).

    The module must map channels to channels with the same shape. Runs without gradients.

    Args:
        module: e.g. a :class:`~circuitop.KirchhoffCell`, :class:`~circuitop.CascadedKirchhoffBlock`
            or :class:`~circuitop.CascadedKirchhoffBlock2d`.
        obj: a Dataset (its variables become channels) or DataArray.
        variables: data variables to use, in channel order (default: all).
        use_time: pass ``dt`` from the time coordinate to modules that accept it.

    Example:
        >>> out = apply(CascadedKirchhoffBlock2d(1, d_state=4), field_dataarray)
    """
    param = next(module.parameters(), None)
    dtype = param.dtype if param is not None else torch.float32
    device = param.device if param is not None else None
    x = to_tensor(obj, variables, dtype=dtype, device=device)
    with torch.no_grad():
        y = _run(module, x, obj, use_time=use_time)
    if y.shape != x.shape:
        raise ValueError(f"module: expected an output of the input's shape {tuple(x.shape)} (channels to channels), "
                         f"found {tuple(y.shape)}")
    return from_tensor(y, obj, variables)


def _run(module: nn.Module, x: torch.Tensor, obj, *, use_time: bool) -> torch.Tensor:
    if family_of(obj) == "sequence":
        kwargs = {}
        if use_time and TIME in obj.coords and "dt" in inspect.signature(module.forward).parameters:
            kwargs["dt"] = time_steps(obj, dtype=x.dtype, device=x.device)
        return module(x, **kwargs)
    if TIME in obj.dims:  # (batch, time, channels, *spatial): frames as a batch
        return module(x.flatten(0, 1)).unflatten(0, x.shape[:2])
    return module(x)
