"""Grid helpers shared by the metrics: finite-difference gradients and boundary points."""

from __future__ import annotations

import math

import torch

__all__ = ["gradient_components", "spectral_gradient", "boundary_points", "spatial_axes"]


def spatial_axes(x: torch.Tensor, n_spatial: int) -> tuple[int, ...]:
    """The trailing ``n_spatial`` axes of ``x`` (never the sample axis 0)."""
    if not 1 <= n_spatial <= x.ndim - 1:
        raise ValueError(f"n_spatial: expected 1..{x.ndim - 1} spatial axes after the sample axis, "
                         f"found {n_spatial} for shape {tuple(x.shape)}")
    return tuple(range(x.ndim - n_spatial, x.ndim))


def gradient_components(x: torch.Tensor, n_spatial: int, *, periodic: bool) -> torch.Tensor:
    """Second-order central differences of ``x`` along its trailing ``n_spatial`` axes (unit spacing).

    ``∂_d x ≈ (x[i+1] − x[i−1]) / 2``; periodic wraps with ``roll``, otherwise the edges use one-sided
    second-order differences (``torch.gradient(..., edge_order=2)``, as ``numpy.gradient``).

    Args:
        x: ``(batch, ..., *spatial)``, every spatial axis at least 3 points long.

    Returns:
        ``(batch, n_spatial, ...)``: the components stacked after the sample axis.
    """
    axes = spatial_axes(x, n_spatial)
    if any(x.shape[d] < 3 for d in axes):
        raise ValueError(f"pred/true: finite differences need at least 3 points per spatial axis, "
                         f"found shape {tuple(x.shape)} with spatial axes {axes}")
    if periodic:
        parts = [(torch.roll(x, -1, d) - torch.roll(x, 1, d)) / 2 for d in axes]
    else:
        parts = list(torch.gradient(x, dim=axes, edge_order=2))
    return torch.stack(parts, dim=1)


def spectral_gradient(x: torch.Tensor, n_spatial: int) -> torch.Tensor:
    """The exact gradient of the trigonometric interpolant of ``x`` on the periodic unit cube.

    Along each of the trailing ``n_spatial`` axes (``n`` points ``i/n`` of ``[0, 1)``),
    ``∂_d x = irfft(2πi·k · rfft(x))`` with wavenumbers ``k = 0 .. n//2``; an even ``n``'s Nyquist mode
    ``k = n/2`` has no real derivative on the grid and is dropped (its interpolant ``cos(πn x)`` has
    derivative 0 at every grid point).

    Args:
        x: ``(batch, ..., *spatial)``, real.

    Returns:
        ``(batch, n_spatial, ...)``: the components stacked after the sample axis.
    """
    parts = []
    for d in spatial_axes(x, n_spatial):
        n = x.shape[d]
        k = torch.fft.rfftfreq(n, d=1.0 / n, dtype=x.dtype, device=x.device)
        if n % 2 == 0:
            k[-1] = 0.0
        shape = [1] * x.ndim
        shape[d] = -1
        parts.append(torch.fft.irfft(torch.fft.rfft(x, dim=d) * (2j * math.pi * k.reshape(shape)), n=n, dim=d))
    return torch.stack(parts, dim=1)


def boundary_points(x: torch.Tensor, n_spatial: int) -> torch.Tensor:
    """The values of ``x`` on the boundary of its trailing ``n_spatial`` axes, flattened last.

    Each face (first and last index along every spatial axis) is taken in full, so corners count once
    per face they lie on: 1D gives the 2 end points, 2D the ``2·Nx + 2·Ny`` edge points.

    Args:
        x: ``(..., *spatial)``.

    Returns:
        ``(..., n_boundary)``.
    """
    axes = spatial_axes(x, n_spatial)
    lead = x.shape[: x.ndim - n_spatial]
    faces = [x.select(d, i).reshape(*lead, -1) for d in axes for i in (0, -1)]
    return torch.cat(faces, dim=-1)
