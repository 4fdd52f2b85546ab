"""Radial binning of Fourier power: the one implementation behind fRMSE, band errors and spectrum plots.

PDEBench's binning (``docs/specs/metrics.md``): in 1D the modes of ``rfft``, ``k = 0..N/2``, are their own
bins. In 2D (and 3D) the ``fftn`` modes with every index ``0 ≤ i_d < N_d/2`` are grouped by radius
``r = floor(sqrt(Σ_d i_d²))``, and radii ``r ≥ min_d N_d/2`` are dropped.
"""

from __future__ import annotations

from typing import Sequence

import torch

from evaluation._grid import spatial_axes

__all__ = ["radial_bins", "radial_counts", "radial_power", "band_means", "check_bands", "BAND_NAMES"]

BAND_NAMES = ("low", "mid", "high")


def radial_bins(shape: Sequence[int], *, device=None) -> tuple[torch.Tensor, int]:
    """Radius of every kept mode of a spatial grid ``shape`` and the number of radii.

    Args:
        shape: ``(Nx,)``, ``(Nx, Ny)`` or ``(Nx, Ny, Nz)``.

    Returns:
        ``(radius, n_bins)``: ``radius`` has one entry per mode of the cropped spectrum (1D: the
        ``N//2 + 1`` rfft modes; else the ``Π_d N_d//2`` modes with ``i_d < N_d/2``, flattened in C
        order), ``-1`` marking a dropped mode.
    """
    if len(shape) == 1:
        n_bins = shape[0] // 2 + 1
        return torch.arange(n_bins, device=device), n_bins
    grids = torch.meshgrid(*[torch.arange(n // 2, device=device, dtype=torch.float64) for n in shape],
                           indexing="ij")
    radius = torch.sqrt(sum(g.square() for g in grids)).floor().long().flatten()
    n_bins = min(n // 2 for n in shape)
    radius[radius >= n_bins] = -1
    return radius, n_bins


def radial_counts(shape: Sequence[int]) -> torch.Tensor:
    """How many modes fall in each radius of :func:`radial_bins` (to turn sums into averages)."""
    radius, n_bins = radial_bins(shape)
    return torch.bincount(radius[radius >= 0], minlength=n_bins)


def radial_power(x: torch.Tensor, n_spatial: int) -> torch.Tensor:
    """Sum of ``|F(x)|²`` over the modes of each radius, ``F`` the unnormalised FFT (PDEBench binning).

    Args:
        x: ``(..., *spatial)`` real, with ``n_spatial`` (1 to 3) trailing spatial axes.

    Returns:
        ``(..., n_bins)``; 1D: ``|F_k|²`` for ``k = 0..N/2``.
    """
    axes = spatial_axes(x, n_spatial)
    shape = tuple(x.shape[d] for d in axes)
    lead = x.shape[: x.ndim - n_spatial]
    if n_spatial == 1:
        return torch.fft.rfft(x, dim=-1).abs().square()
    spectrum = torch.fft.fftn(x, dim=axes)
    cropped = spectrum[(...,) + tuple(slice(0, n // 2) for n in shape)]
    power = cropped.abs().square().reshape(*lead, -1)
    radius, n_bins = radial_bins(shape, device=x.device)
    keep = radius >= 0
    out = torch.zeros(*lead, n_bins, dtype=power.dtype, device=x.device)
    return out.index_add_(-1, radius[keep], power[..., keep])


def band_means(errors: torch.Tensor, bands: Sequence[int] = (4, 12)) -> torch.Tensor:
    """Mean of per-radius values over the bands ``[0, b0)``, ``[b0, b1)``, ``[b1, end)``.

    A band with no radii (a grid too coarse to reach it) is NaN.

    Args:
        errors: ``(..., n_bins)``.
        bands: the two band edges ``(b0, b1)`` with ``0 < b0 < b1``.

    Returns:
        ``(..., 3)``: low, mid, high.
    """
    check_bands(bands)
    edges = (0, bands[0], bands[1], errors.shape[-1])
    parts = []
    for lo, hi in zip(edges[:-1], edges[1:]):
        chunk = errors[..., lo:hi]
        parts.append(chunk.mean(dim=-1) if chunk.shape[-1] else torch.full_like(errors[..., 0], float("nan")))
    return torch.stack(parts, dim=-1)


def check_bands(bands: Sequence[int]) -> None:
    """Raise ``ValueError`` unless ``bands`` is two integers ``0 < b0 < b1``."""
    ok = len(bands) == 2 and all(int(b) == b for b in bands) and 0 < bands[0] < bands[1]
    if not ok:
        raise ValueError(f"bands: expected two integer edges 0 < low < high, found {tuple(bands)}")
