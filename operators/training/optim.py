"""Optimizers (Adam, AdamW) and schedules (StepLR, cosine, none) named in an :class:`~operators.training.spec.OptimSpec`
(whose values the spec has already checked)."""

from __future__ import annotations

import torch

__all__ = ["make_optimizer", "make_scheduler"]


def make_optimizer(params, config) -> torch.optim.Optimizer:
    """``Adam`` or ``AdamW`` with ``config.lr`` and ``config.weight_decay``, in torch's multi-tensor
    (``foreach``) form on every device: torch picks it by default on GPU only, and on CPU the
    per-parameter loop costs about as much again as the update for models with many small
    parameters (a CHONN-FNO's 110 tensors: 9.7 ms vs 5.5 ms per step)."""
    cls = torch.optim.AdamW if config.optimizer == "adamw" else torch.optim.Adam
    return cls(params, lr=config.lr, weight_decay=config.weight_decay, foreach=True)


def make_scheduler(optimizer, config) -> torch.optim.lr_scheduler.LRScheduler:
    """Stepped once per epoch: ``StepLR(step_size, gamma)``, cosine annealing over ``epochs``, or constant."""
    if config.scheduler == "step":
        return torch.optim.lr_scheduler.StepLR(optimizer, step_size=config.step_size, gamma=config.gamma)
    if config.scheduler == "cosine":
        return torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=max(config.epochs, 1))
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda epoch: 1.0)
