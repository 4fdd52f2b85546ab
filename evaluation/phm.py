"""The asymmetric PHM 2012 score for remaining-useful-life estimates (NAC paper, Eq. 58)."""

from __future__ import annotations

import torch

from evaluation._inputs import as_pair, finish

__all__ = ["phm_score"]

_EARLY_SCALE = 13.0  # d < 0: the estimate is early (RUL under-estimated), the cheaper mistake
_LATE_SCALE = 10.0   # d >= 0: the estimate is late (RUL over-estimated), the costlier mistake


def phm_score(pred, true, *, reduce: str = "sum"):
    """PHM Score ``Σ_{d<0} (exp(−d/13) − 1) + Σ_{d≥0} (exp(d/10) − 1)`` with ``d = pred − true``.

    NAC paper Eq. 58, the IEEE PHM 2012 challenge score (Nectoux et al., 2012): a **sum** over all
    estimates, lower is better, zero only for a perfect estimate. Late predictions (``d ≥ 0``: the
    model says the part lives longer than it does) cost more than early ones. Defined here on remaining
    useful life as in the challenge; note that the NAC authors applied it to a 0-1 degradation target
    instead, which inverts the early/late meaning and shrinks every term towards ``|d|/10``.

    Args:
        pred, true: RUL estimates and truths ``(batch, ...)``; numpy, torch or xarray.
        reduce: ``"sum"`` (the score, default), ``"mean"`` (per estimate) or ``"none"`` (the
            per-element terms, same shape as the inputs).
    """
    if reduce not in ("sum", "mean", "none"):
        raise ValueError(f"reduce: expected one of ('sum', 'mean', 'none'), found {reduce!r}")
    pair = as_pair(pred, true)
    d = pair.pred - pair.true
    terms = torch.where(d < 0, torch.expm1(-d / _EARLY_SCALE), torch.expm1(d / _LATE_SCALE))
    values = terms if reduce == "none" else terms.sum() if reduce == "sum" else terms.mean()
    return finish(values, "none", pair.is_torch)
