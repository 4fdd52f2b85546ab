"""Fields resampled to another grid, one spatial dim at a time (:func:`resample`): by cell averages where the new
size divides the old (area-average down-sampling: each new cell the mean of the cells it covers, its coordinate
their mean), else by Fourier resampling (the spectrum along the dim truncated or zero-padded: exact for a
band-limited periodic field; its coordinate the uniform grid of the same period).

Example:
    >>> coarse = resample(ds, {"x": 16, "y": 16})      # a 64² set as 16² cell averages
"""

from __future__ import annotations

from typing import Mapping

import numpy as np
import xarray as xr

__all__ = ["resample", "method_of"]


def method_of(old: int, new: int) -> str:
    """How :func:`resample` takes a dim of ``old`` points to ``new``: ``"as stored"``, ``"area average"`` or
    ``"spectral"``."""
    return "as stored" if new == old else "area average" if old % new == 0 else "spectral"


def resample(ds: xr.Dataset, sizes: Mapping[str, int]) -> xr.Dataset:
    """``ds`` with each dim of ``sizes`` resampled to that many points (:func:`method_of`); variables without the
    dim unchanged.

    Raises:
        ValueError: a size below 1, or a dim ``ds`` lacks.
    """
    for dim, n in sizes.items():
        if dim not in ds.dims or n < 1:
            raise ValueError(f"sizes: expected a positive size of a dim of {dict(ds.sizes)}, found {dim}={n}")
        ds = _along(ds, dim, int(n))
    return ds


def _along(ds: xr.Dataset, dim: str, n: int) -> xr.Dataset:
    old = ds.sizes[dim]
    method = method_of(old, n)
    if method == "as stored":
        return ds
    if method == "area average":
        return ds.coarsen({dim: old // n}).mean(keep_attrs=True)
    data = {name: (v.dims, _spectral(v.values, v.dims.index(dim), n) if dim in v.dims else v.values, v.attrs)
            for name, v in ds.data_vars.items()}
    coords = {name: c for name, c in ds.coords.items() if dim not in c.dims}
    if dim in ds.coords:
        x = ds[dim].values.astype(np.float64)
        step = (x[1] - x[0]) * old / n if old > 1 else 1.0
        coords[dim] = (dim, x[0] + step * np.arange(n), ds[dim].attrs)
    return xr.Dataset(data, coords=coords, attrs=ds.attrs)


def _spectral(values: np.ndarray, axis: int, n: int) -> np.ndarray:
    """``values`` along ``axis`` resampled to ``n`` points by its real spectrum (truncated or zero-padded), scaled so
    a constant stays that constant."""
    spectrum = np.fft.rfft(values.astype(np.float64), axis=axis)
    kept = min(spectrum.shape[axis], n // 2 + 1)
    shape = list(spectrum.shape)
    shape[axis] = n // 2 + 1
    out = np.zeros(shape, dtype=spectrum.dtype)
    index = [slice(None)] * values.ndim
    index[axis] = slice(0, kept)
    out[tuple(index)] = spectrum[tuple(index)]
    return (np.fft.irfft(out, n=n, axis=axis) * (n / values.shape[axis])).astype(values.dtype)
