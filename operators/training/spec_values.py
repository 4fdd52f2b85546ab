"""The values of a :class:`~operators.training.spec.RunSpec`: conversion from plain values (YAML, JSON, the
command line) to each field's annotated type and back, and the checks of each field's range and choices.
Every failure is one :class:`SpecError` naming the field path, what was expected and what was found.
Checks that need the data (variables, frames, classes) belong to the tasks (:mod:`operators.training.tasks`)."""

from __future__ import annotations

import math
import types
import typing
from dataclasses import dataclass

from pde_data.core.fingerprint import Fingerprint

__all__ = ["check", "CHOICES", "SpecError", "Splits", "plain", "typed"]


@dataclass(frozen=True)
class Splits:
    """Disjoint sorted sample indices of the ``train``, ``val`` and ``test`` splits."""

    train: tuple[int, ...]
    val: tuple[int, ...]
    test: tuple[int, ...]

    @property
    def sizes(self) -> tuple[int, int, int]:
        return len(self.train), len(self.val), len(self.test)



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
    "task.loss": ("auto", "rel_l2", "rel_l1", "h1", "mse", "cross_entropy"),
    "optim.optimizer": ("adam", "adamw"),
    "optim.scheduler": ("step", "cosine", "plateau", "none"),
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
    "optim.warmup": ("a number of epochs >= 0", lambda v: v >= 0),
    "optim.plateau_patience": ("a number of epochs >= 0", lambda v: v >= 0),
    "optim.patience": ("a positive number of epochs", lambda v: v >= 1),
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
            raise SpecError(path, f"expected one of {shown}{' or null' if None in allowed else ''}, found {value!r}")
    for path, (expected, ok) in _RANGES.items():
        value = spec.get(path)
        if value is None:
            continue
        if (isinstance(value, float) and not math.isfinite(value)) or not ok(value):
            raise SpecError(path, f"expected {expected}, found {value!r}")
    split = spec.data.split
    if split is not None and (len(split) != 3 or min(split) < 0):
        raise SpecError("data.split", f"expected three sizes (train, val, test) >= 0, found {list(split)}")
    _check_together(spec)


def _check_together(spec) -> None:
    """Fields whose values depend on another field's."""
    if spec.task.periodic and spec.task.loss != "h1":
        raise SpecError("task.periodic", f"expected only with task.loss 'h1' (the loss that differentiates), found "
                        f"task.loss {spec.task.loss!r}")
    if spec.optim.scheduler == "plateau" and spec.optim.gamma == 1:
        raise SpecError("optim.gamma", "expected a factor in (0, 1) for the plateau schedule (which multiplies the "
                        "learning rate by it), found 1.0")


def plain(value):
    if isinstance(value, Splits):
        return {k: list(getattr(value, k)) for k in ("train", "val", "test")}
    if isinstance(value, Fingerprint):
        return value.to_state()
    if isinstance(value, tuple):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return value


def typed(cls: type, name: str, value, path: str):
    """``value`` converted to the annotated type of ``cls.name`` (lists → tuples, ints → floats), or a
    :class:`SpecError` naming ``path``, what was expected and what was found."""
    hint = typing.get_type_hints(cls)[name]
    options = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
    if value is None:
        if type(None) in options:
            return None
        raise SpecError(path, f"expected {_describe(hint)}, found none")
    for option in options:
        converted = _convert(option, value)
        if converted is not _NO:
            return converted
    raise SpecError(path, f"expected {_describe(hint)}, found {value!r}")


_NO = object()


def _convert(option, value):
    origin = typing.get_origin(option)
    if option is bool:
        return value if isinstance(value, bool) else _NO
    if option is int:
        return value if isinstance(value, int) and not isinstance(value, bool) else _NO
    if option is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        return float(value) if ok else _NO
    if option is str:
        return value if isinstance(value, str) else _NO
    if origin is tuple and isinstance(value, (list, tuple)):
        item = typing.get_args(option)[0]
        items = [_convert(item, v) for v in value]
        return _NO if any(v is _NO for v in items) else tuple(items)
    if option is dict:
        return {str(k): _tuples(v) for k, v in value.items()} if isinstance(value, dict) else _NO
    if option is Splits:
        return _splits(value)
    if option is Fingerprint:
        return value if isinstance(value, Fingerprint) else _fingerprint(value)
    return _NO


def _tuples(value):
    """Lists (YAML and JSON have no tuples) as tuples, at any depth."""
    if isinstance(value, (list, tuple)):
        return tuple(_tuples(v) for v in value)
    if isinstance(value, dict):
        return {k: _tuples(v) for k, v in value.items()}
    return value


def _fingerprint(value):
    try:
        return Fingerprint.from_state(value) if isinstance(value, dict) else _NO
    except (KeyError, TypeError, ValueError):
        return _NO


def _splits(value):
    if isinstance(value, Splits):
        return value
    if not isinstance(value, dict) or set(value) != {"train", "val", "test"}:
        return _NO
    parts = [value[k] for k in ("train", "val", "test")]
    if not all(isinstance(p, (list, tuple)) and all(isinstance(i, int) and not isinstance(i, bool) for i in p)
               for p in parts):
        return _NO
    return Splits(*(tuple(p) for p in parts))


def _describe(hint) -> str:
    text = str(hint).replace("typing.", "").replace("NoneType", "None")
    return text.replace("<class '", "").replace("'>", "").replace("pde_data.core.fingerprint.", "").replace(
        "operators.training.spec.", "")
