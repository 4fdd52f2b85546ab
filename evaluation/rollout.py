"""Error per step of an autoregressive rollout (CHONN Fig. 5e-f: 40-step Navier-Stokes curves)."""

from __future__ import annotations

from typing import Callable

from evaluation._inputs import as_pair, check_reduce, finish
from evaluation.metrics import rel_l2

__all__ = ["rollout_errors"]


def rollout_errors(pred, true, *, metric: Callable = rel_l2, reduce: str = "mean"):
    """Error of every rollout step, ``err[t] = reduce_b metric(pred[b, t], true[b, t])``, and its mean.

    All (sample, step) pairs go through ``metric`` in one call (``reduce="none"``), so there is no
    loop over steps. ``metric`` receives tensors ``(batch·time, ...)``: a metric that needs to know
    which axes are spatial (``rel_l2_derivative``) treats every remaining axis as spatial.

    Args:
        pred, true: ``(sample, time, ...)``; numpy, torch, or xarray with a ``time`` dim.
        metric: any metric of this package taking ``reduce="none"`` (default :func:`rel_l2`).
        reduce: how samples are combined per step: ``"mean"`` or ``"median"``.

    Returns:
        ``(per_step, mean_over_steps)``: ``(time,)`` and a scalar (numpy/float, or tensors for tensors).
    """
    check_reduce(reduce)
    if reduce == "none":
        raise ValueError("reduce: expected 'mean' or 'median' for rollout_errors, found 'none'")
    pair = as_pair(pred, true, min_ndim=3)
    if pair.has_time is False:
        raise ValueError(f"pred: expected a 'time' dim for a rollout, found dims {dict(pred.sizes)}")
    n_batch, n_time = pair.pred.shape[:2]
    flat_pred = pair.pred.reshape(n_batch * n_time, *pair.pred.shape[2:])
    flat_true = pair.true.reshape(n_batch * n_time, *pair.true.shape[2:])
    values = metric(flat_pred, flat_true, reduce="none").reshape(n_batch, n_time)
    per_step = finish(values, reduce, pair.is_torch)
    return per_step, per_step.mean() if pair.is_torch else float(per_step.mean())
