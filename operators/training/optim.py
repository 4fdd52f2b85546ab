"""Optimizers (Adam, AdamW) and the learning-rate schedule named in an :class:`~operators.training.spec.OptimSpec`
(whose values the spec has already checked): a linear warm-up, then StepLR, cosine, plateau or a constant rate."""

from __future__ import annotations

import torch
from torch.optim import lr_scheduler

__all__ = ["make_optimizer", "clip_gradients", "EpochSchedule"]


def make_optimizer(params, config) -> torch.optim.Optimizer:
    """``Adam`` or ``AdamW`` with ``config.lr`` and ``config.weight_decay``, in torch's multi-tensor
    (``foreach``) form on every device: torch picks it by default on GPU only, and on CPU the
    per-parameter loop is slow for models with many small parameters (a CHONN-FNO has 110 tensors)."""
    cls = torch.optim.AdamW if config.optimizer == "adamw" else torch.optim.Adam
    return cls(params, lr=config.lr, weight_decay=config.weight_decay, foreach=True)


def clip_gradients(params, max_norm: float | None) -> torch.Tensor:
    """The total 2-norm of the gradients of ``params`` (a 0-d tensor on their device, not read back), after
    scaling them to a total norm of at most ``max_norm`` (``None``: left as they are), as torch's
    ``clip_grad_norm_`` does.

    Complex gradients (an FNO's spectral weights) are measured through their real views, which have the same
    2-norm: torch's norm of complex tensors is much slower on CPU (through them, the norm took a visible share
    of an FNO's training step).
    """
    params = [p for p in params if p.grad is not None]
    norm = torch.nn.utils.get_total_norm([torch.view_as_real(p.grad) if p.grad.is_complex() else p.grad
                                          for p in params])
    if max_norm is not None:
        torch.nn.utils.clip_grads_with_norm_(params, max_norm, norm)
    return norm


def _main_schedule(optimizer, config) -> lr_scheduler.LRScheduler:
    """The schedule after the warm-up: ``StepLR(step_size, gamma)``, cosine annealing over the epochs after
    the warm-up, ``ReduceLROnPlateau(factor=gamma, patience=plateau_patience)``, or constant."""
    if config.scheduler == "step":
        return lr_scheduler.StepLR(optimizer, step_size=config.step_size, gamma=config.gamma)
    if config.scheduler == "cosine":
        return lr_scheduler.CosineAnnealingLR(optimizer, T_max=max(config.epochs - config.warmup, 1))
    if config.scheduler == "plateau":
        return lr_scheduler.ReduceLROnPlateau(optimizer, factor=config.gamma, patience=config.plateau_patience)
    return lr_scheduler.LambdaLR(optimizer, lambda epoch: 1.0)


class EpochSchedule:
    """The learning rate of each epoch, stepped once at the end of every epoch with the epoch's score.

    The first ``warmup`` epochs train at ``lr·e/(warmup + 1)`` (epoch ``e = 1 .. warmup``: torch's ``LambdaLR``,
    whose closed form hands over exactly ``lr``, where ``LinearLR``'s products drift by an ulp); then the
    chosen schedule (:func:`_main_schedule`) runs from its own epoch 0. ``ReduceLROnPlateau`` reads the
    score (what ``best.pt`` minimises) and counts only the epochs after the warm-up; the others ignore it.

    Example:
        >>> schedule = EpochSchedule(optimizer, OptimSpec(warmup=2, scheduler="plateau"))
        >>> schedule.step(score)   # after each epoch's validation
    """

    def __init__(self, optimizer: torch.optim.Optimizer, config):
        self.main = _main_schedule(optimizer, config)  # first: a LambdaLR sets the rate when made
        self.warmup_epochs = config.warmup
        self.warmup = (lr_scheduler.LambdaLR(optimizer, lambda epoch: min(1.0, (epoch + 1) / (config.warmup + 1)))
                       if config.warmup else None)

    def step(self, score: float) -> None:
        """End an epoch whose score (lower is better) was ``score``."""
        if self.warmup is not None and self.warmup.last_epoch < self.warmup_epochs:
            self.warmup.step()
        elif isinstance(self.main, lr_scheduler.ReduceLROnPlateau):
            self.main.step(score)
        else:
            self.main.step()

    def state_dict(self) -> dict:
        """Plain values (``weights_only``-loadable): the main schedule's and the warm-up's (None: none) states."""
        return {"main": self.main.state_dict(), "warmup": None if self.warmup is None else self.warmup.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict`; a checkpoint written before warm-ups existed holds the main state alone."""
        if "main" not in state:
            state = {"main": state, "warmup": None}
        self.main.load_state_dict(state["main"])
        if self.warmup is not None:
            self.warmup.load_state_dict(state["warmup"])
