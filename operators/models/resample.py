"""Exact 2× average pooling and 2× (bi)linear upsampling: ``pool`` and ``up`` of
:class:`operators.models.hosts.Coarsened` on even grid sizes.

Pooling is the mean of each 2×2 (or 2, 2×2×2) cell, as ``F.adaptive_avg_pool2d`` computes it on even
sizes, from strided pair sums (backward: the gradient spread evenly over the cell).

``F.interpolate(x, scale_factor=2, mode="bilinear" / "linear", align_corners=False)`` samples the
input at (j + 0.5) / 2 − 0.5 = j/2 − 1/4, so along each axis

    out[2i] = ¾ x[i] + ¼ x[i−1],   out[2i+1] = ¾ x[i] + ¼ x[i+1]   (indices clamped to 0 … n−1).

This fixed stencil with its adjoint as the backward gives the same numbers as ``F.interpolate``. On
CPU float32/float64 fields with 1 or 2 spatial axes all four maps (pool, upsample and their adjoints)
run as one-pass native kernels (``circuitop/csrc/resample.cpp``, hand-written because torch has no
single-pass op for them: its formulation here needs several strided passes; no benchmark in ``bench/``
times the two now); elsewhere, as a few
multiply-adds into strided halves of the output, which still avoids the two full-resolution copies
``F.interpolate``'s backward makes.
"""

from __future__ import annotations

import torch
from torch.nn import functional as F

import circuitop

__all__ = ["pool2x", "upsample2x", "pool2x_ref", "upsample2x_ref"]


def upsample2x(x: torch.Tensor, add_to: torch.Tensor | None = None) -> torch.Tensor:
    """``(batch, channels, *spatial)`` → every spatial axis twice as long, (bi)linear with
    ``align_corners=False`` (1, 2 or 3 spatial axes); with ``add_to`` (the output's shape),
    ``add_to + upsample2x(x)`` in one pass (the residual of :class:`~operators.models.hosts.Coarsened`)."""
    if x.ndim not in (3, 4, 5):
        raise ValueError(f"x: expected (batch, channels, *spatial) with 1-3 spatial axes, found {tuple(x.shape)}")
    out_shape = x.shape[:2] + tuple(2 * n for n in x.shape[2:])
    if add_to is not None and add_to.shape != out_shape:
        raise ValueError(f"add_to: expected the output's shape {tuple(out_shape)}, found {tuple(add_to.shape)}")
    return _Upsample2x.apply(x, add_to)


def pool2x(x: torch.Tensor) -> torch.Tensor:
    """``(batch, channels, *spatial)`` with even spatial sizes → every axis halved, each output the
    mean of its 2^d input cell (= ``F.adaptive_avg_pool{d}d`` to half size)."""
    if x.ndim not in (3, 4, 5) or any(n % 2 for n in x.shape[2:]):
        raise ValueError(f"x: expected (batch, channels, *spatial) with 1-3 even spatial sizes, found {tuple(x.shape)}")
    return _Pool2x.apply(x)


def _up_axis(x: torch.Tensor, axis: int) -> torch.Tensor:
    n = x.shape[axis]
    out = x.new_empty(x.shape[:axis] + (n, 2) + x.shape[axis + 1:])
    even, odd = out.select(axis + 1, 0), out.select(axis + 1, 1)
    torch.mul(x, 0.75, out=even)
    torch.mul(x, 0.75, out=odd)
    if n > 1:
        even.narrow(axis, 1, n - 1).add_(x.narrow(axis, 0, n - 1), alpha=0.25)
        odd.narrow(axis, 0, n - 1).add_(x.narrow(axis, 1, n - 1), alpha=0.25)
    even.narrow(axis, 0, 1).add_(x.narrow(axis, 0, 1), alpha=0.25)  # clamped x[-1] = x[0]
    odd.narrow(axis, n - 1, 1).add_(x.narrow(axis, n - 1, 1), alpha=0.25)  # clamped x[n] = x[n-1]
    return out.flatten(axis, axis + 1)


def _up_axis_adjoint(grad: torch.Tensor, axis: int) -> torch.Tensor:
    """Adjoint of :func:`_up_axis`: grad ``(…, 2n, …)`` → ``(…, n, …)``."""
    pairs = grad.unflatten(axis, (grad.shape[axis] // 2, 2))
    even, odd = pairs.select(axis + 1, 0), pairs.select(axis + 1, 1)
    n = even.shape[axis]
    out = torch.add(even, odd).mul_(0.75)
    if n > 1:
        out.narrow(axis, 0, n - 1).add_(even.narrow(axis, 1, n - 1), alpha=0.25)
        out.narrow(axis, 1, n - 1).add_(odd.narrow(axis, 0, n - 1), alpha=0.25)
    out.narrow(axis, 0, 1).add_(even.narrow(axis, 0, 1), alpha=0.25)
    out.narrow(axis, n - 1, 1).add_(odd.narrow(axis, n - 1, 1), alpha=0.25)
    return out


def _native_or(name: str, torch_fn):
    """The map ``name`` of ``circuitop/csrc/resample.cpp`` on CPU float32/float64 fields with 1 or 2
    spatial axes (one pass over the data), else its torch formulation ``torch_fn``; further tensor
    arguments are passed to either. (The kernel is ``circuitop``'s, built by ``pde_data.core.native``, the
    project's one builder of native kernels.)"""

    def apply(x: torch.Tensor, *more: torch.Tensor) -> torch.Tensor:
        ops = circuitop.resample_kernels(x, *more) if x.ndim in (3, 4) else None
        if ops is None:
            return torch_fn(x, *more)
        return getattr(ops, name)(x.contiguous(), *(t.contiguous() for t in more))

    return apply


def _pool_torch(x: torch.Tensor) -> torch.Tensor:
    """``(batch, channels, *spatial)`` → every axis halved: pair means, axis by axis."""
    for axis in range(2, x.ndim):
        pairs = x.unflatten(axis, (x.shape[axis] // 2, 2))
        x = torch.add(pairs.select(axis + 1, 0), pairs.select(axis + 1, 1)).mul_(0.5)
    return x


def _pool_adjoint_torch(grad: torch.Tensor) -> torch.Tensor:
    """``(batch, channels, *spatial)`` → every axis doubled: each value spread over its cell, the
    last (contiguous) axis first: its copy repeats single values and runs on the smallest
    intermediate; the others then repeat whole rows (faster than the opposite order)."""
    grad = grad * (0.5 ** (grad.ndim - 2))
    for axis in reversed(range(2, grad.ndim)):
        grad = grad.unsqueeze(axis + 1).expand(*grad.shape[:axis + 1], 2, *grad.shape[axis + 1:]).flatten(axis, axis + 1)
    return grad.contiguous()


def _up_torch(x: torch.Tensor, add_to: torch.Tensor | None = None) -> torch.Tensor:
    """``(batch, channels, *spatial)`` → every axis doubled (plus ``add_to``). Axis by axis, the
    last (contiguous) axis first: its interleaving writes every other value, so it runs on the
    smallest intermediate; the other axes then move whole rows."""
    for axis in reversed(range(2, x.ndim)):
        x = _up_axis(x, axis)
    return x if add_to is None else add_to + x


def _up_adjoint_torch(grad: torch.Tensor) -> torch.Tensor:
    """``(batch, channels, *spatial)`` with even sizes → every axis halved; the adjoint of
    :func:`_up_torch`, running the axes in the opposite order for the same reason."""
    for axis in range(2, grad.ndim):
        grad = _up_axis_adjoint(grad, axis)
    return grad


_pool, _pool_adjoint = _native_or("pool2x", _pool_torch), _native_or("pool2x_adjoint", _pool_adjoint_torch)
_up, _up_adjoint = _native_or("upsample2x", _up_torch), _native_or("upsample2x_adjoint", _up_adjoint_torch)


def _linear_function(name: str, linear_map, adjoint) -> type[torch.autograd.Function]:
    """An autograd function computing ``linear_map(x)`` whose backward is ``adjoint(grad)``, itself an
    autograd function (whose backward is the map), so gradients of any order flow."""

    def forward(ctx, x):
        return linear_map(x)

    def backward(ctx, grad):
        return adjoint(grad)

    methods = {"forward": staticmethod(forward), "backward": staticmethod(backward)}
    return type(name, (torch.autograd.Function,), methods)


# The adjoints resolve their partner when called (the partner is defined later in the module).
_Pool2x = _linear_function("_Pool2x", _pool, lambda grad: _Pool2xAdjoint.apply(grad))
_Pool2xAdjoint = _linear_function("_Pool2xAdjoint", _pool_adjoint, lambda grad: _Pool2x.apply(grad))
_Upsample2xAdjoint = _linear_function("_Upsample2xAdjoint", _up_adjoint, lambda grad: _Upsample2x.apply(grad, None))


class _Upsample2x(torch.autograd.Function):
    """``add_to + upsample2x(x)`` (``add_to`` may be None); backward: the adjoint for ``x``, the
    gradient itself for ``add_to``."""

    @staticmethod
    def forward(ctx, x, add_to):
        ctx.has_base = add_to is not None
        return _up(x) if add_to is None else _up(x, add_to)

    @staticmethod
    def backward(ctx, grad):
        grad_x = _Upsample2xAdjoint.apply(grad) if ctx.needs_input_grad[0] else None
        return grad_x, (grad if ctx.has_base else None)


def pool2x_ref(x: torch.Tensor) -> torch.Tensor:
    """Reference twin of :func:`pool2x`: ``(batch, channels, *spatial)`` → halved, ``F.adaptive_avg_pool{1,2,3}d``."""
    pool = {3: F.adaptive_avg_pool1d, 4: F.adaptive_avg_pool2d, 5: F.adaptive_avg_pool3d}[x.ndim]
    return pool(x, tuple(n // 2 for n in x.shape[2:]))


def upsample2x_ref(x: torch.Tensor) -> torch.Tensor:
    """Reference twin of :func:`upsample2x`: ``(batch, channels, *spatial)`` → doubled, ``F.interpolate``."""
    mode = {3: "linear", 4: "bilinear", 5: "trilinear"}[x.ndim]
    return F.interpolate(x, scale_factor=2, mode=mode, align_corners=False)
