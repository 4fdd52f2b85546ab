"""Error per step of an autoregressive rollout (CHONN Fig. 5e-f: 40-step Navier-Stokes curves)."""

from __future__ import annotations

from typing import Callable

import torch

from evaluation._inputs import as_pair, check_reduce, finish
from evaluation.metrics import rel_l2

__all__ = ["rollout_errors", "step_values"]


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
    values, is_torch = step_values(pred, true, metric=metric)
    per_step = finish(values, reduce, is_torch)
    return per_step, per_step.mean() if is_torch else float(per_step.mean())


def step_values(pred, true, *, metric: Callable = rel_l2) -> tuple[torch.Tensor, bool]:
    """``metric`` of every (sample, step) pair: a tensor ``(sample, time)`` and whether the input was torch.

    The unreduced form of :func:`rollout_errors` (which reduces it over samples), also kept batch by
    batch by :class:`evaluation.MetricAccumulator`.
    """
    pair = as_pair(pred, true, min_ndim=3)
    if pair.has_time is False:
        raise ValueError(f"pred: expected a 'time' dim for a rollout, found dims {dict(pred.sizes)}")
    values = metric(pair.pred.flatten(0, 1), pair.true.flatten(0, 1), reduce="none")  # tensors in, so a tensor out
    return values.reshape(pair.pred.shape[:2]), pair.is_torch
