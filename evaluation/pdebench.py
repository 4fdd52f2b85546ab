"""The PDEBench metric suite, computed over a whole test set at once (spec ``metrics.md``).

PDEBench averages per-batch means, so its numbers depend on the batch size, and it once scored the
``initial_step`` input frames as predictions (its issue #41), making errors look up to 2x smaller.
Here the input frames are excluded and every quantity is computed over all samples together.
"""

from __future__ import annotations

import math
from typing import Sequence

import torch
import xarray as xr

from evaluation._grid import boundary_points
from evaluation._inputs import as_pair
from evaluation.spectra import band_means, check_bands, radial_power

__all__ = ["pdebench_metrics", "PDEBENCH_KEYS"]

PDEBENCH_KEYS = ("RMSE", "nRMSE", "CSV", "Max", "bRMSE", "fRMSE_low", "fRMSE_mid", "fRMSE_high")
#: Frames per chunk are chosen so one chunk holds about this many values (bounds peak memory).
_CHUNK_VALUES = 2**23


def _layout(pred, true) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Tensors ``(batch, time, channel, *spatial)`` and the number of spatial axes."""
    pair = as_pair(pred, true)
    if isinstance(pred, (xr.Dataset, xr.DataArray)):
        if pair.n_spatial == 0:
            raise ValueError(f"pred: expected spatial dims (s, x, y or z), found dims {dict(pred.sizes)}")
        p, t = pair.pred, pair.true
        if not pair.has_time:
            p, t = p.unsqueeze(1), t.unsqueeze(1)
        return p, t, pair.n_spatial
    if not 4 <= pair.pred.ndim <= 6:
        raise ValueError(f"pred: expected (sample, time, *spatial, channel) with 1 to 3 spatial axes, "
                         f"found shape {tuple(pair.pred.shape)}")
    return pair.pred.movedim(-1, 2), pair.true.movedim(-1, 2), pair.pred.ndim - 3


def _per_frame(e: torch.Tensor, true: torch.Tensor, n_spatial: int, scale: float,
               bands: Sequence[int]) -> torch.Tensor:
    """Every metric per (time, channel) for ``e``, ``true`` ``(batch, time, channel, *spatial)``.

    Returns ``(len(PDEBENCH_KEYS), time, channel)``.
    """
    space = tuple(range(3, e.ndim))
    n_points = math.prod(e.shape[3:])
    rmse = e.square().mean(dim=space).sqrt()                              # (b, t, c)
    norm = true.square().mean(dim=space).sqrt()
    csv = e.sum(dim=space).square().mean(dim=0).sqrt() / n_points          # (t, c)
    worst = e.abs().amax(dim=(0,) + space)
    brmse = boundary_points(e, n_spatial).square().mean(dim=-1).sqrt()
    spectrum = radial_power(e, n_spatial).mean(dim=0).sqrt() * scale      # (t, c, r)
    fbands = band_means(spectrum, bands).movedim(-1, 0)                    # (3, t, c)
    rows = [rmse.mean(dim=0), (rmse / norm).mean(dim=0), csv, worst, brmse.mean(dim=0)]
    return torch.cat([torch.stack(rows), fbands])


def pdebench_metrics(pred, true, *, initial_step: int = 0, lengths: Sequence[float] | None = None,
                     bands: Sequence[int] = (4, 12)) -> dict[str, float]:
    """PDEBench's RMSE, nRMSE, CSV, Max, bRMSE and fRMSE bands over a whole test set.

    With ``e = pred − true``, N spatial points, each metric is computed per (channel c, time t ≥
    ``initial_step``) and then averaged over (c, t):

    - ``RMSE  = mean_b sqrt(mean_s e²)``;  ``nRMSE = mean_b sqrt(mean_s e²) / sqrt(mean_s true²)``
    - ``CSV   = sqrt(mean_b (Σ_s e)²) / N`` (error of the conserved total, PDEBench's cRMSE)
    - ``Max   = max_{b,s} |e|``;  ``bRMSE = mean_b sqrt(mean of e² over the boundary faces)``
    - ``fRMSE``: ``E_r = sqrt(mean_b Σ_{|k|=r} |F(e)_k|²) · Π L_d / Π N_d`` with the radial binning of
      :mod:`evaluation.spectra`; bands average ``E_r`` over ``r ∈ [0, 4)``, ``[4, 12)``, ``[12, end)``
      (NaN when the grid has no radius in a band).

    Continuous forms: RMSE ≈ ``(|D|⁻¹ ∫ e² dx)^½``, CSV ≈ ``|∫ e dx| / |D|`` (RMS over samples).

    Args:
        pred, true: ``(sample, time, *spatial, channel)`` with 1-3 spatial axes, or xarray objects
            (a Dataset's data variables are the channels; dims ``(sample, [time], x[, y])``).
        initial_step: the first ``initial_step`` frames were model inputs and are excluded.
        lengths: domain length per spatial axis (default 1 each, as PDEBench passes).
        bands: the two fRMSE band edges.

    Returns:
        a dict with keys ``PDEBENCH_KEYS``, Python floats (tensors are reduced where they are).
    """
    check_bands(bands)
    p, t, n_spatial = _layout(pred, true)
    n_time = p.shape[1]
    if not isinstance(initial_step, int) or not 0 <= initial_step < n_time:
        raise ValueError(f"initial_step: expected an integer in [0, {n_time}) for {n_time} time steps, "
                         f"found {initial_step!r}")
    grid = p.shape[3:]
    lengths = tuple(lengths) if lengths is not None else (1.0,) * n_spatial
    if len(lengths) != n_spatial:
        raise ValueError(f"lengths: expected {n_spatial} domain lengths for spatial shape {tuple(grid)}, "
                         f"found {lengths}")
    scale = math.prod(lengths) / math.prod(grid)
    step = max(1, _CHUNK_VALUES // max(1, p[:, :1].numel()))
    frames = [
        _per_frame(p[:, i:i + step] - t[:, i:i + step], t[:, i:i + step], n_spatial, scale, bands)
        for i in range(initial_step, n_time, step)
    ]
    means = torch.cat(frames, dim=1).mean(dim=(1, 2)).tolist()
    return dict(zip(PDEBENCH_KEYS, means))
