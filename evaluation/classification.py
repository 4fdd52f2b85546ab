"""Classification metrics on logits ``(batch, classes)`` and integer labels ``(batch,)``.

``top_k_accuracy`` is 1 for a sample whose label is among its ``k`` largest logits (ties broken by
:func:`torch.topk`), ``cross_entropy`` is torch's (natural log, optional label smoothing). Both
reduce like the field metrics: ``reduce="mean"`` over the batch, or ``"none"`` per sample.
"""

from __future__ import annotations

import torch
from torch.nn import functional as F

__all__ = ["top_k_accuracy", "cross_entropy"]


def _check(logits: torch.Tensor, labels: torch.Tensor, reduce: str) -> None:
    if reduce not in ("mean", "none"):
        raise ValueError(f"reduce: expected 'mean' or 'none', found {reduce!r}")
    if logits.dim() != 2 or labels.shape != logits.shape[:1]:
        raise ValueError(f"expected logits (batch, classes) and labels (batch,), found {tuple(logits.shape)} "
                         f"and {tuple(labels.shape)}")
    if labels.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"labels: expected integers, found {labels.dtype}")
    if labels.numel():
        low, high = (int(v) for v in torch.aminmax(labels))  # one device sync
        if low < 0 or high >= logits.shape[1]:
            raise ValueError(f"labels: expected integers in [0, {logits.shape[1]}), found [{low}, {high}]")


def top_k_accuracy(logits: torch.Tensor, labels: torch.Tensor, k: int = 1, *, reduce: str = "mean") -> torch.Tensor:
    """Fraction of samples whose label is among the ``k`` largest logits (``k`` capped at the classes)."""
    _check(logits, labels, reduce)
    hits = (logits.topk(min(k, logits.shape[1]), dim=1).indices == labels[:, None]).any(dim=1).to(logits.dtype)
    return hits.mean() if reduce == "mean" else hits


def cross_entropy(logits: torch.Tensor, labels: torch.Tensor, *, reduce: str = "mean",
                  label_smoothing: float = 0.0) -> torch.Tensor:
    """Cross-entropy of the soft-max of ``logits`` against ``labels`` (optionally smoothed)."""
    _check(logits, labels, reduce)
    return F.cross_entropy(logits, labels.long(), reduction="mean" if reduce == "mean" else "none",
                           label_smoothing=label_smoothing)
