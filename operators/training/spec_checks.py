"""The value checks of a :class:`~operators.training.spec.RunSpec`: each field's range and choices,
one :class:`SpecError` naming the field path, what was expected and what was found.
Checks that need the data (variables, frames, classes) belong to the tasks (:mod:`operators.training.tasks`)."""

from __future__ import annotations

import math

__all__ = ["check", "CHOICES", "SpecError"]


class SpecError(ValueError):
    """A value of a run spec (or a parameter of the run API) is invalid; ``field`` is its path (``"optim.lr"``) or
    name (``"steps"``), which the CLI maps to an option."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field, self.message = field, message

#: the allowed values of the fields that name a choice (``None`` allowed where the field is optional)
CHOICES = {
    "data.normalize": ("gaussian", "minmax", None),
    "task.kind": ("steady", "window", "classify", "sequence", None),
    "task.loss": ("auto", "rel_l2", "rel_l1", "mse", "cross_entropy"),
    "optim.optimizer": ("adam", "adamw"),
    "optim.scheduler": ("step", "cosine", "none"),
    "loading.cache": ("auto", "memory", "stream"),
}

#: path -> (expected, test) for numbers
_RANGES = {
    "data.split_seed": ("an integer", lambda v: True),
    "task.window": ("a positive number of frames", lambda v: v >= 1),
    "task.horizon": ("a positive number of frames", lambda v: v >= 1),
    "task.label_smoothing": ("a number in [0, 1)", lambda v: 0 <= v < 1),
    "task.shift": ("an integer >= 0", lambda v: v >= 0),
    "optim.epochs": ("a positive number of epochs", lambda v: v >= 1),
    "optim.batch_size": ("a positive integer", lambda v: v >= 1),
    "optim.lr": ("a positive number", lambda v: v > 0),
    "optim.weight_decay": ("a number >= 0", lambda v: v >= 0),
    "optim.step_size": ("a positive integer", lambda v: v >= 1),
    "optim.gamma": ("a number in (0, 1]", lambda v: 0 < v <= 1),
    "optim.grad_clip": ("a positive number", lambda v: v > 0),
    "optim.seed": ("an integer", lambda v: True),
    "loading.workers": ("an integer >= 0", lambda v: v >= 0),
    "loading.prefetch": ("a positive integer", lambda v: v >= 1),
    "loading.memory_budget": ("a number of bytes >= 0", lambda v: v >= 0),
}


def check(spec) -> None:
    """Raise :class:`SpecError` for the first field of ``spec`` out of its range or choices."""
    for path, allowed in CHOICES.items():
        value = spec.get(path)
        if value not in allowed:
            shown = [a for a in allowed if a is not None]
            raise SpecError(path, f"expected one of {shown}{' or none' if None in allowed else ''}, found {value!r}")
    for path, (expected, ok) in _RANGES.items():
        value = spec.get(path)
        if value is None:
            continue
        if (isinstance(value, float) and not math.isfinite(value)) or not ok(value):
            raise SpecError(path, f"expected {expected}, found {value!r}")
    split = spec.data.split
    if split is not None and (len(split) != 3 or min(split) < 0):
        raise SpecError("data.split", f"expected three sizes (train, val, test) >= 0, found {list(split)}")
