"""Pointwise, spectral and derivative error metrics of the CHONN paper (Eqs. 48-50, 55, 59-61).

Every metric takes ``pred`` and ``true`` with the sample axis first (numpy, torch or xarray; see
``evaluation._inputs``), computes one value per sample over all other axes, and reduces over samples
with ``reduce="mean" | "median" | "none"``. Given tensors, the result is a tensor on the same device and
in the same autograd graph, so :func:`rel_l2` and :func:`rel_l1` serve as training losses.
"""

from __future__ import annotations

import torch

from evaluation._grid import gradient_components, spatial_axes, spectral_gradient
from evaluation._inputs import Pair, as_pair, finish

__all__ = ["rel_l2", "rel_l2_spectral", "rel_l2_derivative", "rel_h1", "rel_l1", "nrmse_range", "max_mse"]


def _flat(x: torch.Tensor) -> torch.Tensor:
    return x.reshape(x.shape[0], -1)


def _norm2(x: torch.Tensor) -> torch.Tensor:
    return torch.linalg.vector_norm(_flat(x), ord=2, dim=1)


def _relative(pair: Pair, reduce: str, norm=_norm2):
    """``norm(pred − true) / norm(true)`` per sample (``norm`` maps ``(batch, ...)`` to ``(batch,)``), reduced."""
    return finish(norm(pair.pred - pair.true) / norm(pair.true), reduce, pair.is_torch)


def rel_l2(pred, true, *, reduce: str = "mean"):
    """Relative L2 error ``‖pred − true‖₂ / ‖true‖₂`` per sample (CHONN Eq. 48).

    Continuous form: ``(∫|u_pred − u_true|² dx)^½ / (∫|u_true|² dx)^½``; on a uniform grid the
    quadrature weight cancels, leaving the discrete norms over all non-sample axes.

    Args:
        pred, true: ``(batch, ...)``; numpy, torch or xarray (same type for both).
        reduce: ``"mean"`` (default), ``"median"`` or ``"none"`` (per-sample values ``(batch,)``).

    Example:
        >>> loss = rel_l2(model(x), y)   # a differentiable scalar tensor
    """
    return _relative(as_pair(pred, true, reduce=reduce), reduce)


def rel_l1(pred, true, *, reduce: str = "mean"):
    """Relative L1 error ``‖pred − true‖₁ / ‖true‖₁`` per sample, as a fraction (CHONN Eqs. 55, 59).

    Continuous form: ``∫|u_pred − u_true| dx / ∫|u_true| dx``. The paper reports it in percent
    (multiply by 100); CNO-style tables report the **median** over the test set (``reduce="median"``).

    Args:
        pred, true: ``(batch, ...)``; numpy, torch or xarray.
        reduce: ``"mean"``, ``"median"`` or ``"none"``.
    """
    return _relative(as_pair(pred, true, reduce=reduce), reduce, lambda x: _flat(x).abs().sum(dim=1))


def rel_l2_spectral(pred, true, *, reduce: str = "mean"):
    """Relative L2 error of the one-sided spectrum ``‖F(e)‖₂ / ‖F(true)‖₂`` per sample (CHONN Eq. 49).

    ``F`` is ``rfftn`` over all non-sample axes: a full FFT on the leading axes and a real FFT on the
    last, which keeps only modes ``0..n//2`` of the last axis. With a two-sided FFT this would equal
    :func:`rel_l2` exactly (Parseval); the one-sided spectrum counts every mode except the zero (and,
    for even ``n``, the Nyquist) mode of the last axis once instead of twice, so it is a different,
    frequency-weighted measure that gives the mean and Nyquist content double relative weight.

    Args:
        pred, true: ``(batch, ...)`` with at least one non-sample axis.
        reduce: ``"mean"``, ``"median"`` or ``"none"``.
    """
    pair = as_pair(pred, true, min_ndim=2, reduce=reduce)
    dims = tuple(range(1, pair.pred.ndim))
    return _relative(pair, reduce, lambda x: _norm2(torch.fft.rfftn(x, dim=dims)))


def rel_l2_derivative(pred, true, *, periodic: bool = True, reduce: str = "mean"):
    """Relative L2 error of the gradient ``‖∇e‖₂ / ‖∇true‖₂`` per sample (CHONN Eq. 50).

    Continuous form: ``(∫|∇u_pred − ∇u_true|² dx)^½ / (∫|∇u_true|² dx)^½``. ``∇`` is the
    second-order central difference along every spatial axis, all components in one norm; a uniform
    spacing cancels. ``periodic=True`` wraps around the edges; ``periodic=False`` uses one-sided
    second-order differences at the edges (as ``numpy.gradient(..., edge_order=2)``).

    Args:
        pred, true: ``(batch, ..., *spatial)``. Arrays: every non-sample axis is spatial; xarray: its
            spatial dims (``s``, ``x``, ``y``, ``z``), each at least 3 points long.
        periodic: whether the domain wraps around.
        reduce: ``"mean"``, ``"median"`` or ``"none"``.
    """
    pair = as_pair(pred, true, min_ndim=2, reduce=reduce)
    return _relative(pair, reduce, lambda x: _norm2(gradient_components(x, pair.n_spatial, periodic=periodic)))


def rel_h1(pred, true, *, periodic: bool = False, n_spatial: int | None = None, reduce: str = "mean"):
    """Relative H1 error ``‖pred − true‖_H1 / ‖true‖_H1`` per sample, with the full norm
    ``‖u‖²_H1 = ‖u‖²_L2 + ‖∇u‖²_L2 = ∫ |u|² + |∇u|² dx`` (not the seminorm; neuraloperator's ``H1Loss``
    is the same).

    Every spatial axis spans the unit length, whatever its number of points: ``∇`` is in units of
    ``1/length``, so a mode ``sin(2πkx)`` weighs ``1 + (2πk)²`` times its L2 weight. ``periodic=True``
    takes the grid as ``i/n`` on ``[0, 1)`` and ``∇`` spectrally (:func:`evaluation._grid.spectral_gradient`:
    exact for the grid's trigonometric interpolant); ``periodic=False`` as ``i/(n − 1)`` on ``[0, 1]`` and ``∇``
    by second-order central differences, one-sided at the edges (``torch.gradient(..., edge_order=2)``: exact
    for quadratics). The uniform quadrature weight cancels in the ratio; all channels share one norm.

    Args:
        pred, true: ``(batch, channels, *spatial)`` (arrays; ``(batch, horizon, channels, *spatial)`` with
            ``n_spatial``) or xarray objects (their spatial dims). Finite differences need 3 points per axis.
        periodic: whether the domain wraps around (spectral ``∇``) or not (finite differences).
        n_spatial: how many trailing axes are spatial (default: xarray's spatial dims; arrays: all after the
            channel axis).
        reduce: ``"mean"``, ``"median"`` or ``"none"``.

    Example:
        >>> loss = rel_h1(model(a), u, periodic=True)   # a differentiable scalar tensor
    """
    pair = as_pair(pred, true, min_ndim=2, reduce=reduce)
    if n_spatial is None:
        n_spatial = pair.n_spatial if pair.has_time is not None else pair.pred.ndim - 2
        if n_spatial < 1:
            raise ValueError(f"pred: expected (batch, channels, *spatial) with a spatial axis, found shape "
                             f"{tuple(pair.pred.shape)} (pass n_spatial for another layout)")
    return _relative(pair, reduce, lambda x: _h1_norm(x, n_spatial, periodic))


def _h1_norm(x: torch.Tensor, n_spatial: int, periodic: bool) -> torch.Tensor:
    """``(‖x‖² + ‖∇x‖²)^½`` per sample on the unit grid of :func:`rel_h1` (one vector norm: its gradient is
    finite at 0, where a square root of a sum of squares is not)."""
    if periodic:
        grad = spectral_gradient(x, n_spatial)
    else:
        steps = [x.shape[d] - 1 for d in spatial_axes(x, n_spatial)]  # 1/h on [0, 1]
        scale = torch.tensor(steps, dtype=x.dtype, device=x.device).reshape(1, -1, *[1] * (x.ndim - 1))
        grad = gradient_components(x, n_spatial, periodic=False) * scale
    return _norm2(torch.cat([_flat(x), _flat(grad)], dim=1))


def nrmse_range(pred, true, *, reduce: str = "mean"):
    """RMSE normalised by the range of the truth, per sample (CHONN Eq. 60).

    ``sqrt(mean_p e(p)²) / (max_p true(p) − min_p true(p))``; continuous form
    ``(|D|⁻¹ ∫ e² dx)^½ / (max u_true − min u_true)``.

    Args:
        pred, true: ``(batch, ...)``; points ``p`` are all non-sample entries.
        reduce: ``"mean"``, ``"median"`` or ``"none"``.
    """
    pair = as_pair(pred, true, reduce=reduce)
    truth = _flat(pair.true)
    values = _flat(pair.pred - pair.true).square().mean(dim=1).sqrt() / (truth.amax(dim=1) - truth.amin(dim=1))
    return finish(values, reduce, pair.is_torch)


def max_mse(pred, true, *, reduce: str = "mean"):
    """Largest squared pointwise error ``max_p e(p)²`` per sample (CHONN Eq. 61).

    Continuous form: ``‖u_pred − u_true‖²_∞``.

    Args:
        pred, true: ``(batch, ...)``.
        reduce: ``"mean"``, ``"median"`` or ``"none"``.
    """
    pair = as_pair(pred, true, reduce=reduce)
    return finish(_flat(pair.pred - pair.true).square().amax(dim=1), reduce, pair.is_torch)
