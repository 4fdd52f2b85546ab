"""The Well's metrics (Ohana et al. 2024, ``the_well.benchmark.metrics``), on channel-first fields.

Definitions as The Well computes them, per sample and per field (channel), over the spatial axes only
(``s`` below; a time axis, when there is one, is kept like the sample axis), with its ε = 1e-7:

    MSE = mean_s (x − y)²                           NMSE = MSE / (mean_s y² + ε)      NRMSE = √NMSE
    VMSE = MSE / (var_s(y) + ε)  (unbiased var)     VRMSE = √VMSE                     L∞ = max_s |x − y|
    Pearson r = mean_s[(x − x̄)(y − ȳ)] / (std_s(x) std_s(y) + ε)   (biased covariance, unbiased stds)

Binned spectral MSE: the full FFT of the residual over the spatial axes, |k| = √Σ(2π fftfreq(N_i))²
in radians per grid cell, three bins with edges ``[0, e1, e2, e3)`` where e1..e3 are log-spaced from
2π / max(N_i) to π√d (d spatial axes; the last edge is where The Well's fourth bin starts, which it
discards); per bin Σ_k |F(x − y)_k|² / N² (so the bins add up to the MSE of the modes they hold,
Parseval; The Well forms it as the bin's mean power (sum / (count + ε)) times its count, kept here), and,
normalized, that divided by the same sum of the true field's spectrum + ε.

Inputs: ``pred`` and ``true`` as numpy arrays or torch tensors ``(sample, channel, *spatial)``, or
xarray objects in the data model (then ``(sample, [time], variable/component, *spatial)``). ``reduce``:
``"none"`` gives one value per sample (and time) and channel (binned: and bin, last axis); ``"mean"``
their mean (binned: one per bin); ``"median"`` their median.
"""

from __future__ import annotations

import math

import torch

from evaluation._inputs import as_pair, finish

__all__ = ["EPS", "vmse", "vrmse", "nmse_well", "nrmse_well", "linf", "pearson", "binned_spectral_mse",
           "spectral_bin_edges"]

#: The Well's ε (``the_well.benchmark.metrics.spatial``), in every denominator
EPS = 1e-7


def _fields(pred, true, reduce: str):
    """``(pred, true, spatial axes, caller passed tensors)`` with the channel axis before the spatial ones;
    ``reduce`` is checked first, before any computation."""
    pair = as_pair(pred, true, min_ndim=3, reduce=reduce)
    n_spatial = pair.n_spatial if pair.has_time is not None else pair.pred.ndim - 2
    if n_spatial < 1:
        raise ValueError(f"pred: expected (sample, channel, *spatial) with a spatial axis, found shape "
                         f"{tuple(pair.pred.shape)}")
    return pair.pred, pair.true, tuple(range(-n_spatial, 0)), pair.is_torch


def _reduce(values: torch.Tensor, reduce: str, is_torch: bool, *, keep_last: bool = False):
    """``finish`` over every value (``keep_last``: every value of each index of the last axis, the bins)."""
    if reduce != "none":
        values = values.reshape(-1, values.shape[-1]) if keep_last else values.reshape(-1)
    return finish(values, reduce, is_torch)


def _normalized_mse(pred, true, reduce: str, norm: str, *, root: bool = False):
    """MSE over The Well's normalizer: mean_s y² (``"norm"``, NMSE) or the unbiased var_s(y) (``"std"``,
    VMSE), plus ε, per sample and channel; ``root`` takes the square root of that whole ratio, ε included."""
    x, y, dims, is_torch = _fields(pred, true, reduce)
    mse = (x - y).square().mean(dim=dims)
    if norm == "norm":
        ratio = mse / (y.square().mean(dim=dims) + EPS)
    else:
        ratio = mse / (y.flatten(start_dim=y.ndim - len(dims)).var(dim=-1) + EPS)  # unbiased, as torch.std there
    return _reduce(ratio.sqrt() if root else ratio, reduce, is_torch)


def nmse_well(pred, true, *, reduce: str = "mean"):
    """The Well's NMSE: MSE / (mean_s y² + ε), per sample and channel (module docstring)."""
    return _normalized_mse(pred, true, reduce, "norm")


def nrmse_well(pred, true, *, reduce: str = "mean"):
    """The Well's NRMSE: √NMSE (the square root over the whole ratio, ε included)."""
    return _normalized_mse(pred, true, reduce, "norm", root=True)


def vmse(pred, true, *, reduce: str = "mean"):
    """The Well's VMSE: MSE / (var_s(y) + ε) with the unbiased variance (module docstring)."""
    return _normalized_mse(pred, true, reduce, "std")


def vrmse(pred, true, *, reduce: str = "mean"):
    """The Well's VRMSE: √VMSE; 1 for the predictor of the field's own spatial mean (up to (N−1)/N)."""
    return _normalized_mse(pred, true, reduce, "std", root=True)


def linf(pred, true, *, reduce: str = "mean"):
    """The Well's L∞: max_s |x − y| per sample and channel."""
    x, y, dims, is_torch = _fields(pred, true, reduce)
    return _reduce((x - y).abs().flatten(start_dim=x.ndim - len(dims)).amax(dim=-1), reduce, is_torch)


def pearson(pred, true, *, reduce: str = "mean"):
    """The Well's Pearson r over space: biased covariance over unbiased standard deviations plus ε
    (so a perfect correlation reads (N−1)/N, as in The Well)."""
    x, y, dims, is_torch = _fields(pred, true, reduce)
    xf, yf = x.flatten(start_dim=x.ndim - len(dims)), y.flatten(start_dim=y.ndim - len(dims))
    covariance = ((xf - xf.mean(-1, keepdim=True)) * (yf - yf.mean(-1, keepdim=True))).mean(-1)
    return _reduce(covariance / (xf.std(dim=-1) * yf.std(dim=-1) + EPS), reduce, is_torch)


def spectral_bin_edges(shape: tuple[int, ...]) -> torch.Tensor:
    """The Well's edges of its three kept bins (radians per grid cell): 0, then log-spaced values from
    2π / max(N) to π√d (+1e-6), four edges in all."""
    edges = torch.logspace(math.log10(2 * math.pi / max(shape)), math.log10(math.pi * math.sqrt(len(shape)) + 1e-6),
                           4, dtype=torch.float64)
    edges[0] = 0.0
    return edges


def binned_spectral_mse(pred, true, *, normalized: bool = False, reduce: str = "mean"):
    """The Well's binned spectral MSE (module docstring): ``(..., 3)`` per sample, channel and bin (low,
    mid, high frequency); ``normalized`` divides each bin by the true field's energy there (+ ε), The
    Well's ``spectral_error_nmse_per_bin``."""
    x, y, dims, is_torch = _fields(pred, true, reduce)
    shape = x.shape[x.ndim - len(dims):]
    grids = torch.meshgrid(*(2 * math.pi * torch.fft.fftfreq(n, dtype=torch.float64) for n in shape), indexing="ij")
    wavenumber = torch.sqrt(sum(g.square() for g in grids)).flatten().to(x.device)
    edges = spectral_bin_edges(tuple(shape)).to(x.device)
    bins = torch.bucketize(wavenumber, edges, right=True) - 1  # bin i holds [edge i, edge i+1)
    members = torch.stack([bins == i for i in range(3)], dim=-1).to(x.dtype)  # (modes, 3)
    counts = members.sum(0)
    # The Well: mean power per bin (sum / (count + ε)) times the count, over N²
    scale = counts / (counts + EPS) / float(math.prod(shape)) ** 2

    def binned(field: torch.Tensor) -> torch.Tensor:  # (..., 3): the field's spectral energy per bin
        return torch.fft.fftn(field, dim=dims).abs().square().flatten(start_dim=field.ndim - len(dims)) @ members * scale

    per_bin = binned(x - y)
    if normalized:
        per_bin = per_bin / (binned(y) + EPS)
    return _reduce(per_bin, reduce, is_torch, keep_last=True)
