"""The table of :func:`evaluation.summarize` over a test set streamed batch by batch, in bounded memory.

Every metric of the table is either a reduction over samples of a per-sample value (the CHONN metrics,
kept as one float per sample) or, for PDEBench's suite, formed from running sums over samples
(:class:`evaluation.PDEBenchAccumulator`). Neither keeps a batch, so memory is O(samples · time) plus a
few numbers per (time, channel), while the result equals the whole-set table.
"""

from __future__ import annotations

import numpy as np
import torch
import xarray as xr

from pde_data import model
from evaluation._inputs import finish
from evaluation.bootstrap import bootstrap_interval
from evaluation.long_rollout import step_scores
from evaluation.pdebench import PDEBenchAccumulator
from evaluation.rollout import step_values
from evaluation.summary import per_sample_metrics, present_bands, scored_frames

__all__ = ["MetricAccumulator"]


def _signature(ds: xr.Dataset) -> tuple:
    """What every batch must share: family, non-sample dim sizes and data variables."""
    sizes = {d: n for d, n in ds.sizes.items() if d != model.SAMPLE}
    return model.family_of(ds), sizes, list(ds.data_vars)


class MetricAccumulator:
    """``summarize(pred_all, true_all)`` and per-step rollout errors, fed one batch of samples at a time.

    Per-sample metrics (``rel_l2``, ``rel_l1``, ...) keep one value per sample and are reduced over
    all samples by :meth:`result` (mean, or median for ``rel_l1_median``); PDEBench's suite keeps
    running sums (see :mod:`evaluation.pdebench`). Batches may have any number of samples but must
    agree in every other dim and in their data variables.

    Args:
        window: number of leading input frames to exclude, as in :func:`evaluation.summarize`.

    Example:
        >>> acc = MetricAccumulator(window=10)
        >>> for pred, true in batches: acc.update(pred, true)
        >>> table, (per_step, mean) = acc.result(), acc.per_step()
    """

    def __init__(self, *, window: int = 0):
        self.window = window
        self.n_samples = 0
        self._signature: tuple | None = None
        self._values: dict[str, list[np.ndarray]] = {}      # metric name -> per-batch (batch,) values
        self._steps: list[np.ndarray] = []                   # per-batch (batch, scored time) rel L2
        self._by_step: dict[str, list[np.ndarray]] = {}      # long-rollout values (batch, scored time) by name
        self._pdebench = PDEBenchAccumulator(window=window)

    def update(self, pred: xr.Dataset, true: xr.Dataset) -> None:
        """Add one batch: data-model Datasets ``(sample, ...)`` with the same dims and variables.

        Raises:
            ValueError: as :func:`evaluation.summarize`, or a batch whose non-sample dims or data
                variables differ from the first batch's (the state is left unchanged).
        """
        signature = _signature(true)
        if self._signature is not None and signature != self._signature:
            raise ValueError(f"true: expected batches with (family, dims, variables) {self._signature} like "
                             f"the first, found {signature}")
        family = signature[0]
        p = scored_frames(pred, self.window, "pred")
        t = scored_frames(true, self.window, "true")
        values = {}
        for _, metric, _ in per_sample_metrics(family):
            if metric.__name__ not in values:  # per sample: The Well's metrics averaged over time and variables
                per = np.atleast_1d(metric(p, t, reduce="none"))
                values[metric.__name__] = per.reshape(per.shape[0], -1).mean(axis=1)
        steps = step_values(p, t)[0].numpy() if model.TIME in true.dims else None
        by_step = step_scores(p, t) if steps is not None and family == "field" else {}
        if family == "field":
            self._pdebench.update(pred, true)
        for name, v in values.items():
            self._values.setdefault(name, []).append(v)
        if steps is not None:
            self._steps.append(steps)
        for name, v in by_step.items():
            self._by_step.setdefault(name, []).append(v)
        self._signature = signature
        self.n_samples += true.sizes[model.SAMPLE]

    def _check_started(self) -> None:
        if self._signature is None:
            raise ValueError("MetricAccumulator: expected at least one update before reading results, "
                             "found none")

    def result(self) -> dict[str, float]:
        """``{metric name: value}`` over every sample so far, equal to :func:`evaluation.summarize`."""
        self._check_started()
        family = self._signature[0]
        table = {key: finish(torch.from_numpy(np.concatenate(self._values[metric.__name__])), reduce, False)
                 for key, metric, reduce in per_sample_metrics(family)}
        if family == "field":
            table.update(present_bands(self._pdebench.result()))
        return table

    def intervals(self, *, resamples: int = 1000, seed: int = 0) -> dict[str, list[float]]:
        """``{metric name: [low, high]}``: the bootstrap interval (:func:`evaluation.bootstrap.bootstrap_interval`)
        of each per-sample metric of :meth:`result`, over the samples; PDEBench's suite (running sums over the
        set, no per-sample values) has none."""
        self._check_started()
        return {key: list(bootstrap_interval(np.concatenate(self._values[metric.__name__]), reduce=reduce,
                                             resamples=resamples, seed=seed))
                for key, metric, reduce in per_sample_metrics(self._signature[0])}

    def step_arrays(self) -> dict[str, np.ndarray]:
        """``{name: (sample, scored step)}``: the rel L2 error (``"rel_l2"``) and :func:`evaluation.long_rollout.
        step_scores`' values of every sample so far (data with a ``time`` dim)."""
        self._check_started()
        if not self._steps:
            raise ValueError(f"step_arrays: expected data with a '{model.TIME}' dim, found dims "
                             f"{self._signature[1]} besides '{model.SAMPLE}'")
        return {"rel_l2": np.concatenate(self._steps), **{k: np.concatenate(v) for k, v in self._by_step.items()}}

    def per_step(self) -> tuple[np.ndarray, float]:
        """Mean over samples of the rel L2 error of every scored step ``(time,)``, and its mean over steps.

        Equal to :func:`evaluation.rollout_errors` on the scored frames (``time ≥ window``).
        """
        self._check_started()
        if not self._steps:
            raise ValueError(f"per_step: expected data with a '{model.TIME}' dim, found dims "
                             f"{self._signature[1]} besides '{model.SAMPLE}'")
        per_step = finish(torch.from_numpy(np.concatenate(self._steps)), "mean", False)
        return per_step, float(per_step.mean())
