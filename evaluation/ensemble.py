"""Scores of an ensemble of predictions against one truth, per sample (so they stream batch by batch and take
bootstrap intervals over samples):

- the CRPS of the members' empirical distribution at every point, averaged over the sample's points:
  ``CRPS = mean_i |x_i - y| - 1/(2 M²) Σ_ij |x_i - x_j|`` (Gneiting & Raftery 2007, Eq. 21, with the ensemble's
  empirical CDF), the double sum from the sorted members, ``Σ_ij |x_i - x_j| = 2 Σ_k x_(k) (2k - M - 1)``: one member
  gives the absolute error;
- the spread, the members' unbiased variance at each point, and the skill, the squared error of their mean, both
  averaged over the sample's points; over a set, ``spread_skill = sqrt((M + 1) / M) · sqrt(mean spread) /
  sqrt(mean skill)``, 1 for an ensemble as spread out as its mean's error (Fortin et al. 2014, Eq. 15).

Example:
    >>> crps, spread, skill = ensemble_scores(members, truth)     # (M, batch, ...) and (batch, ...) -> (batch,) each
    >>> spread_skill_ratio(spread, skill, n_members=len(members))
"""

from __future__ import annotations

import math

import torch

__all__ = ["ensemble_scores", "spread_skill_ratio"]


def ensemble_scores(members: torch.Tensor, truth: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(crps, spread, skill)`` per sample, each ``(batch,)``, of ``members`` ``(M, batch, ...)`` against
    ``truth`` ``(batch, ...)`` (module docstring); float64.

    Raises:
        ValueError: shapes that do not match.
    """
    if members.ndim < 2 or members.shape[1:] != truth.shape:
        raise ValueError(f"members: expected (M, *truth.shape) = (M, {tuple(truth.shape)}), found "
                         f"{tuple(members.shape)}")
    x, y = members.double(), truth.double()
    m = x.shape[0]
    ranks = torch.arange(1, m + 1, dtype=torch.float64, device=x.device).reshape(m, *([1] * y.ndim))
    pairs = 2 * (x.sort(dim=0).values * (2 * ranks - m - 1)).sum(dim=0)  # Σ_ij |x_i - x_j|
    crps = (x - y).abs().mean(dim=0) - pairs / (2 * m * m)
    spread = x.var(dim=0, unbiased=True) if m > 1 else torch.zeros_like(y)
    skill = (x.mean(dim=0) - y).square()
    return tuple(v.reshape(v.shape[0], -1).mean(dim=1) for v in (crps, spread, skill))


def spread_skill_ratio(spread: torch.Tensor, skill: torch.Tensor, *, n_members: int,
                       dim: int | None = None) -> float | torch.Tensor:
    """``sqrt((M + 1) / M) · sqrt(mean spread / mean skill)`` over the samples of :func:`ensemble_scores` (a float),
    or over ``dim`` only (a tensor: per rollout step of ``(sample, step)`` values with ``dim=0``)."""
    if dim is None:
        return math.sqrt((n_members + 1) / n_members) * math.sqrt(float(spread.mean()) / float(skill.mean()))
    return math.sqrt((n_members + 1) / n_members) * (spread.mean(dim) / skill.mean(dim)).sqrt()
