"""The Gapped evaluation protocol (PDNA, Sec. 4, Table 2, Eq. 7).

A trained sequence classifier is evaluated with the inputs inside a gap set to zero, at test time only:

=========  ========================================================
level      gap
=========  ========================================================
``0``      none (standard evaluation)
``0.05``   one contiguous gap of 5 % of the steps, centred
``0.15``   one contiguous gap of 15 %, centred
``0.30``   one contiguous gap of 30 %, centred
``multi``  four gaps totalling 20 %, one centred in each quarter
=========  ========================================================

``degradation = acc(gap 0) - acc(gap 0.30)`` (Eq. 7). A gap of ``level * length`` steps is rounded to the
nearest integer, with at least one step for a positive level; ``multi`` splits ``round(0.2 * length)`` steps
into four near-equal gaps (fewer, of one step each, when the sequence has fewer than 20 steps).
"""

from __future__ import annotations

from typing import Callable

import torch

__all__ = ["GAP_LEVELS", "gap_mask", "apply_gap", "gapped_evaluation"]

#: The protocol's levels and the names under which :func:`gapped_evaluation` reports them.
GAP_LEVELS = {"gap_0": 0.0, "gap_5": 0.05, "gap_15": 0.15, "gap_30": 0.30, "multi": "multi"}
_MULTI_TOTAL, _MULTI_GAPS = 0.20, 4


def _gap_size(length: int, fraction: float) -> int:
    return 0 if fraction == 0 else max(1, round(fraction * length))


def gap_mask(length: int, level: float | str) -> torch.Tensor:
    """Boolean mask ``(length,)``, True on the time steps inside the gap(s) of ``level``.

    Args:
        length: number of time steps (>= 1).
        level: a fraction in ``[0, 1)`` for one centred contiguous gap, or ``"multi"``.
    """
    if not isinstance(length, int) or length < 1:
        raise ValueError(f"length: expected a positive int, found {length!r}")
    mask = torch.zeros(length, dtype=torch.bool)
    if level == "multi":
        total = _gap_size(length, _MULTI_TOTAL)
        n_gaps = min(_MULTI_GAPS, total)
        sizes = [total // n_gaps + (i < total % n_gaps) for i in range(n_gaps)]
        for i, size in enumerate(sizes):  # gap i centred in segment i of n_gaps equal segments
            centre = (i + 0.5) * length / n_gaps
            start = min(max(int(round(centre - size / 2)), 0), length - size)
            mask[start: start + size] = True
        return mask
    if isinstance(level, str) or not 0 <= level < 1:
        raise ValueError(f"level: expected a fraction in [0, 1) or 'multi', found {level!r}")
    size = _gap_size(length, level)
    start = (length - size) // 2
    mask[start: start + size] = True
    return mask


def apply_gap(x: torch.Tensor, level: float | str) -> torch.Tensor:
    """``x`` ``(batch, time, features)`` with the steps inside the gap(s) of ``level`` set to zero."""
    if x.dim() != 3:
        raise ValueError(f"x: expected shape (batch, time, features), found {tuple(x.shape)}")
    keep = ~gap_mask(x.shape[1], level).to(x.device)
    return x * keep[None, :, None].to(x.dtype)


@torch.no_grad()
def gapped_evaluation(model: Callable[..., torch.Tensor], x: torch.Tensor, y: torch.Tensor, *,
                      dt: torch.Tensor | None = None, batch_size: int = 512,
                      levels: dict[str, float | str] | None = None) -> dict[str, float]:
    """Accuracy of a classifier at each gap level, and the degradation ``acc(gap_0) - acc(gap_30)``.

    Args:
        model: maps ``x`` ``(batch, time, features)`` (and ``dt`` ``(batch, time)`` if given) to logits
            ``(batch, classes)``; an ``nn.Module`` is put in eval mode and restored afterwards.
        x: test inputs ``(n, time, features)``. y: labels ``(n,)``.
        levels: name -> level (default :data:`GAP_LEVELS`).

    Returns:
        ``{"gap_0": acc, "gap_5": ..., "gap_15": ..., "gap_30": ..., "multi": ..., "degradation": ...}``
        with accuracies in ``[0, 1]``.
    """
    if y.shape != x.shape[:1]:
        raise ValueError(f"y: expected shape ({x.shape[0]},) matching x, found {tuple(y.shape)}")
    levels = GAP_LEVELS if levels is None else levels
    was_training = getattr(model, "training", False)
    if hasattr(model, "eval"):
        model.eval()
    try:
        report = {name: _accuracy(model, apply_gap(x, level), y, dt, batch_size) for name, level in levels.items()}
    finally:
        if was_training:
            model.train()
    if "gap_0" in report and "gap_30" in report:
        report["degradation"] = report["gap_0"] - report["gap_30"]
    return report


def _accuracy(model, x, y, dt, batch_size) -> float:
    correct = 0
    for start in range(0, x.shape[0], batch_size):
        chunk = slice(start, start + batch_size)
        logits = model(x[chunk]) if dt is None else model(x[chunk], dt[chunk])
        correct += int((logits.argmax(-1) == y[chunk]).sum())
    return correct / max(x.shape[0], 1)
