"""The PDEBench metric suite, computed over a whole test set (``docs/specs/metrics.md``), at once or streamed.

PDEBench averages per-batch means, so its numbers depend on the batch size, and it once scored the
``initial_step`` input frames (our ``window``) as predictions (its issue #41), making errors look up to 2x smaller.
Here the input frames are excluded and every quantity is computed over all samples together: each
batch adds its partial sums over samples (:class:`PDEBenchAccumulator`), and the metrics are formed
from the sums at the end, so a test set streamed batch by batch gives the whole-set numbers.
"""

from __future__ import annotations

import math
from typing import Sequence

import torch
import xarray as xr

from evaluation._grid import boundary_points
from evaluation._inputs import as_pair
from evaluation.spectra import band_means, check_bands, radial_power

__all__ = ["pdebench_metrics", "PDEBenchAccumulator", "PDEBENCH_KEYS"]

PDEBENCH_KEYS = ("RMSE", "nRMSE", "CSV", "Max", "bRMSE", "fRMSE_low", "fRMSE_mid", "fRMSE_high")
#: Frames per chunk are chosen so one chunk holds about this many values (bounds peak memory).
_CHUNK_VALUES = 2**23


def _layout(pred, true) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Detached tensors ``(batch, time, channel, *spatial)`` and the number of spatial axes."""
    pair = as_pair(pred, true)
    if isinstance(pred, (xr.Dataset, xr.DataArray)):
        if pair.n_spatial == 0:
            raise ValueError(f"pred: expected spatial dims (s, x, y or z), found dims {dict(pred.sizes)}")
        p, t = pair.pred, pair.true
        if not pair.has_time:
            p, t = p.unsqueeze(1), t.unsqueeze(1)
        return p.detach(), t.detach(), pair.n_spatial
    if not 4 <= pair.pred.ndim <= 6:
        raise ValueError(f"pred: expected (sample, time, channel, *spatial) with 1 to 3 spatial axes, "
                         f"found shape {tuple(pair.pred.shape)}")
    return pair.pred.detach(), pair.true.detach(), pair.pred.ndim - 3


def _partial_sums(e: torch.Tensor, true: torch.Tensor, n_spatial: int) -> tuple[torch.Tensor, ...]:
    """One batch's sums over samples, for ``e``, ``true`` ``(batch, time, channel, *spatial)``.

    Returns ``(sums, worst, power)``: ``sums`` ``(4, time, channel)`` holds Σ_b of the per-sample RMSE,
    RMSE / RMS(true), boundary RMSE and (Σ_s e)²; ``worst`` ``(time, channel)`` is max_{b,s} |e|;
    ``power`` ``(time, channel, radius)`` is Σ_b of the radial power spectrum of ``e``.
    """
    space = tuple(range(3, e.ndim))
    rmse = e.square().mean(dim=space).sqrt()                              # (b, t, c)
    norm = true.square().mean(dim=space).sqrt()
    brmse = boundary_points(e, n_spatial).square().mean(dim=-1).sqrt()
    total = e.sum(dim=space).square()
    sums = torch.stack([rmse, rmse / norm, brmse, total]).sum(dim=1)      # (4, t, c)
    worst = e.abs().amax(dim=(0,) + space)
    return sums, worst, radial_power(e, n_spatial).sum(dim=0)


class PDEBenchAccumulator:
    """PDEBench's suite over a test set fed batch by batch; :func:`pdebench_metrics` is one update.

    The state is a few numbers per (time, channel): running sums over samples, a running max and the
    summed radial power spectrum, so memory does not grow with the number of samples.
    ``window``, ``lengths`` and ``bands`` are those of :func:`pdebench_metrics`.

    Example:
        >>> acc = PDEBenchAccumulator(window=10)
        >>> for pred, true in batches: acc.update(pred, true)
        >>> acc.result()["nRMSE"]
    """

    def __init__(self, *, window: int = 0, lengths: Sequence[float] | None = None,
                 bands: Sequence[int] = (4, 12)):
        check_bands(bands)
        self.window, self.bands = window, tuple(bands)
        self.lengths = tuple(lengths) if lengths is not None else None
        self.n_samples = 0
        self._shape: tuple[int, ...] | None = None
        self._sums = self._worst = self._power = None

    def _check(self, p: torch.Tensor, n_spatial: int) -> None:
        shape = tuple(p.shape[1:])
        if self._shape is not None:
            if shape != self._shape:
                raise ValueError(f"pred: expected batches shaped (sample, *{self._shape}) like the first, "
                                 f"found shape {tuple(p.shape)}")
            return
        n_time = shape[0]
        if not isinstance(self.window, int) or not 0 <= self.window < n_time:
            raise ValueError(f"window: expected an integer in [0, {n_time}) for {n_time} time steps, "
                             f"found {self.window!r}")
        if self.lengths is None:
            self.lengths = (1.0,) * n_spatial
        if len(self.lengths) != n_spatial:
            raise ValueError(f"lengths: expected {n_spatial} domain lengths for spatial shape "
                             f"{shape[2:]}, found {self.lengths}")
        self._shape = shape

    def update(self, pred, true) -> None:
        """Add one batch: arrays ``(sample, time, channel, *spatial)`` or xarray fields."""
        p, t, n_spatial = _layout(pred, true)
        self._check(p, n_spatial)
        step = max(1, _CHUNK_VALUES // max(1, p[:, :1].numel()))
        chunks = [_partial_sums(p[:, i:i + step] - t[:, i:i + step], t[:, i:i + step], n_spatial)
                  for i in range(self.window, p.shape[1], step)]
        sums, worst, power = zip(*chunks)                                   # chunks along time
        sums, worst, power = torch.cat(sums, dim=1), torch.cat(worst), torch.cat(power)
        if self._sums is None:
            self._sums, self._worst, self._power = sums, worst, power
        else:
            self._sums, self._power = self._sums + sums, self._power + power
            self._worst = torch.maximum(self._worst, worst)
        self.n_samples += p.shape[0]

    def result(self) -> dict[str, float]:
        """The suite over every sample so far: a dict with keys ``PDEBENCH_KEYS``, Python floats."""
        if self._sums is None:
            raise ValueError("PDEBenchAccumulator: expected at least one update before result(), found none")
        n, grid = self.n_samples, self._shape[2:]
        rmse, nrmse, brmse, total = self._sums / n
        csv = total.sqrt() / math.prod(grid)
        spectrum = (self._power / n).sqrt() * (math.prod(self.lengths) / math.prod(grid))
        fbands = band_means(spectrum, self.bands).movedim(-1, 0)            # (3, t, c)
        rows = torch.cat([torch.stack([rmse, nrmse, csv, self._worst, brmse]), fbands])
        return dict(zip(PDEBENCH_KEYS, rows.mean(dim=(1, 2)).tolist()))


def pdebench_metrics(pred, true, *, window: int = 0, lengths: Sequence[float] | None = None,
                     bands: Sequence[int] = (4, 12)) -> dict[str, float]:
    """PDEBench's RMSE, nRMSE, CSV, Max, bRMSE and fRMSE bands over a whole test set.

    With ``e = pred − true``, N spatial points, each metric is computed per (channel c, time t ≥
    ``window``) and then averaged over (c, t):

    - ``RMSE  = mean_b sqrt(mean_s e²)``;  ``nRMSE = mean_b sqrt(mean_s e²) / sqrt(mean_s true²)``
    - ``CSV   = sqrt(mean_b (Σ_s e)²) / N`` (error of the conserved total, PDEBench's cRMSE)
    - ``Max   = max_{b,s} |e|``;  ``bRMSE = mean_b sqrt(mean of e² over the boundary faces)``
    - ``fRMSE``: ``E_r = sqrt(mean_b Σ_{|k|=r} |F(e)_k|²) · Π L_d / Π N_d`` with the radial binning of
      :mod:`evaluation.spectra`; bands average ``E_r`` over ``r ∈ [0, 4)``, ``[4, 12)``, ``[12, end)``
      (NaN when the grid has no radius in a band).

    Continuous forms: RMSE ≈ ``(|D|⁻¹ ∫ e² dx)^½``, CSV ≈ ``|∫ e dx| / |D|`` (RMS over samples).
    Every term is a mean, RMS or max over samples of per-sample quantities, so the same numbers come
    from streaming the test set through :class:`PDEBenchAccumulator`.

    Args:
        pred, true: ``(sample, time, channel, *spatial)`` with 1-3 spatial axes (channel-first, the
            torch layout of :func:`pde_data.core.model.to_tensor`), or xarray objects (a Dataset's data
            variables are the channels; dims ``(sample, [time], x[, y])``).
        window: the first ``window`` frames were model inputs and are excluded.
        lengths: domain length per spatial axis (default 1 each, as PDEBench passes).
        bands: the two fRMSE band edges.

    Returns:
        a dict with keys ``PDEBENCH_KEYS``, Python floats (tensors are reduced where they are).

    Example:
        >>> pdebench_metrics(pred, true, window=10)["nRMSE"]   # pred (n, T, C, 64, 64)
    """
    acc = PDEBenchAccumulator(window=window, lengths=lengths, bands=bands)
    acc.update(pred, true)
    return acc.result()
