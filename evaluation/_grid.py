"""Grid helpers shared by the metrics: finite-difference gradients and boundary points."""

from __future__ import annotations

import torch

__all__ = ["gradient_components", "boundary_points", "spatial_axes"]


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
    short = [x.shape[d] for d in axes if x.shape[d] < 3]
    if short:
        raise ValueError(f"pred/true: finite differences need at least 3 points per spatial axis, "
                         f"found shape {tuple(x.shape)} with spatial axes {axes}")
    if periodic:
        parts = [(torch.roll(x, -1, d) - torch.roll(x, 1, d)) / 2 for d in axes]
    else:
        parts = list(torch.gradient(x, dim=axes, edge_order=2))
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
