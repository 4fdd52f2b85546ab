"""The one typed-parameter system: frozen dataclasses whose fields are the parameters, their annotations the
types and their defaults the only defaults; :func:`typed` converts and checks values for them, and every
failure is one :class:`ParameterError` carrying ``(parameter, expected, found)`` as data.

It serves everything a user can set: a run's spec (``operators.training.spec``), each model's config,
each generator's parameters (:mod:`pde_data.generate.defaults`) and the evaluation options. Values come
from YAML, JSON, Python or the command line: text is read as a Python literal where the field takes no text
(``"64"`` → ``64``, ``"(12, 12)"`` → ``(12, 12)``), lists become tuples, integers become floats where a float
is expected. A field's range or choices ride on it (:func:`param`).

Example:
    >>> @dataclass(frozen=True)
    ... class Grid(Typed):
    ...     n: int = param(64, "a positive integer", lambda v: v >= 1)
    >>> typed(Grid, {"n": "32"}, "grid")
    {'n': 32}
    >>> Grid(n=0)   # ParameterError: n: expected a positive integer, found 0
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import math
import re
import types
import typing
from typing import Callable, ClassVar, Iterable, Mapping

__all__ = ["Mentions", "Advice", "ParameterError", "ExistsError", "Typed", "param", "typed", "defaults", "choices",
           "library_name", "BARE"]

#: a mention of a parameter inside an error's text: ``{name}`` or ``{name=literal}`` (``{overwrite=True}``)
_MENTION = re.compile(r"\{([A-Za-z_][\w.]*)(?:=([^{}]*))?\}")
#: a mention without a value
BARE = object()


def library_name(path: str, value: object = BARE) -> str:
    """How the library writes a parameter (and a value it suggests): ``overwrite=True``, ``data.generate``."""
    return path if value is BARE else f"{path}={value!r}"


class Mentions:
    """What an error's one line says about parameters, as data: ``paths``, the parameters at fault (none: the
    line starts with what it is about, e.g. a file), ``expected`` and ``found`` (``found`` None: ``expected`` is
    the whole sentence), and ``mentions``, the other parameters the text names, written ``{name}`` or
    ``{name=literal}`` in it. :meth:`describe` names every parameter as the caller calls it (the library by
    default; the command line by its options), so no one rewrites the text."""

    def _name_parts(self, path, expected: str, found: str | None, mentions: Iterable[str]) -> None:
        self.paths = (path,) if isinstance(path, str) else tuple(path)
        self.expected, self.found, self.mentions = expected, found, tuple(mentions)

    @property
    def path(self) -> str:
        return ", ".join(self.paths)

    def text(self, name: Callable[..., str]) -> str:
        """What was expected and found, each mentioned parameter written ``name(path[, value])``."""
        text = self.expected if self.found is None else f"expected {self.expected}, found {self.found}"

        def named(m: re.Match) -> str:
            if m.group(1) not in self.mentions:
                return m.group()
            return name(m.group(1)) if m.group(2) is None else name(m.group(1), ast.literal_eval(m.group(2)))

        return _MENTION.sub(named, text) if self.mentions else text

    def describe(self, name: Callable[..., str] = library_name) -> str:
        """The one line: the parameters, then :meth:`text`; ``name`` writes each parameter (and a value)."""
        head = ", ".join(name(p) for p in self.paths)
        return f"{head}: {self.text(name)}" if head else self.text(name)


class ParameterError(Mentions, ValueError):
    """A parameter's value is invalid: ``path`` names it (``"optim.lr"``, ``"n_out"``; several: a tuple; none:
    ``()``), ``expected`` what it should be, ``found`` what it was, ``mentions`` the other parameters the text
    names (:class:`Mentions`).

    Example:
        >>> raise ParameterError("n_out", "a divisor of {n_sim=256}", "6", mentions=["n_sim"])
        ParameterError: n_out: expected a divisor of n_sim=256, found 6
    """

    def __init__(self, path: str | Iterable[str], expected: str, found: str | None = None,
                 mentions: Iterable[str] = ()):
        self._name_parts(path, expected, found, mentions)
        super().__init__(self.describe())

    def __reduce__(self):  # picklable (Dask workers, DDP) although the constructor takes the parts
        return type(self), (self.paths, self.expected, self.found, self.mentions)


class Advice(Mentions):
    """An error whose one line is advice, not a parameter at fault: ``message``, the parameters it names
    (``{name}`` or ``{name=literal}``) ``mentions`` (:class:`Mentions`). Mixed with the builtin error it is."""

    def __init__(self, message: str, mentions: Iterable[str] = ()):
        self._name_parts((), message, None, mentions)
        super().__init__(self.describe())

    def __reduce__(self):  # the builtin error's would call __init__ with the line alone
        return type(self), (self.expected, self.mentions)


class ExistsError(ParameterError, FileExistsError):
    """Something exists where an output would go, and ``overwrite`` was not given (the text mentions it)."""


def param(default, expected: str | None = None, check: Callable[[object], bool] | None = None, *,
          choices: tuple | None = None):
    """A dataclass field with its range (``check``, described by ``expected``) or its ``choices``."""
    metadata = {k: v for k, v in (("expected", expected), ("check", check), ("choices", choices)) if v is not None}
    return dataclasses.field(default=default, metadata=metadata)


class Typed:
    """A frozen dataclass whose fields are converted and checked (:func:`typed`) whenever one is made; errors
    name ``prefix.field`` (``class OptimSpec(Typed, prefix="optim")``: where the dataclass sits)."""

    prefix: ClassVar[str] = ""

    def __init_subclass__(cls, prefix: str = "", **kwargs):
        super().__init_subclass__(**kwargs)
        cls.prefix = prefix

    def __post_init__(self) -> None:
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        for name, value in typed(type(self), values, self.prefix).items():
            object.__setattr__(self, name, value)


def typed(cls: type, values: Mapping[str, object], path: str = "") -> dict:
    """``values`` converted to the annotated types of the dataclass ``cls``'s fields and checked against
    their ranges and choices; a :class:`ParameterError` naming ``path.name`` for an unknown name or a value
    that does not fit."""
    hints, fields = _hints(cls), {f.name: f for f in dataclasses.fields(cls)}
    out = {}
    for name, value in values.items():
        where = f"{path}.{name}" if path else name
        if name not in fields:
            raise ParameterError(where, f"a field of {cls.__name__} among {sorted(fields)}", repr(name))
        out[name] = value = _typed(hints[name], value, where)
        _check(fields[name].metadata, value, where)
    return out


def defaults(cls: type) -> dict:
    """``{name: default}`` of the dataclass ``cls``'s fields."""
    return {f.name: f.default if f.default_factory is dataclasses.MISSING else f.default_factory()
            for f in dataclasses.fields(cls)}


def choices(cls: type, name: str) -> tuple | None:
    """The allowed values of field ``name`` of ``cls`` (None: any of its type)."""
    return next(f.metadata.get("choices") for f in dataclasses.fields(cls) if f.name == name)


@functools.cache
def _hints(cls: type) -> dict:
    return typing.get_type_hints(cls)


def _check(metadata: Mapping, value, where: str) -> None:
    allowed = metadata.get("choices")
    if allowed is not None and value not in allowed:
        shown = [a for a in allowed if a is not None]
        raise ParameterError(where, f"one of {shown}{' or null' if None in allowed else ''}", repr(value))
    if hasattr(value, "problem") and value.problem() is not None:  # a range (Sweep): its ends in order
        raise ParameterError(where, f"a range LOW..HIGH[:log] with {value.problem()}", str(value))
    ok = metadata.get("check")
    if ok is None or value is None:
        return
    ends = value.ends() if hasattr(value, "ends") else (value,)
    if any((isinstance(v, float) and not math.isfinite(v)) or not ok(v) for v in ends):
        raise ParameterError(where, metadata["expected"], str(value) if len(ends) > 1 else repr(value))


def _typed(hint, value, where: str):
    options = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
    if value is None:
        if type(None) in options:
            return None
        raise ParameterError(where, _describe(hint), "none")
    if isinstance(value, str) and (str not in options or _quoted(value)):
        value = _literal(value)  # "64" -> 64; a quoted text ("'A'", as Python writes it) -> its contents
    for option in options:
        converted = _convert(option, value)
        if converted is not _NO:
            return converted
    raise ParameterError(where, _describe(hint), repr(value))


def _quoted(text: str) -> bool:
    return len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"" and isinstance(_literal(text), str)


def _literal(text: str):
    """Command-line text as the Python literal it writes (``"64"`` → 64), else the text itself."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return text


_NO = object()


def _convert(option, value):
    """``value`` as ``option`` (one member of a field's annotation), or ``_NO``."""
    if option is bool:
        return value if isinstance(value, bool) else _NO
    if option is int:
        return value if isinstance(value, int) and not isinstance(value, bool) else _NO
    if option is float:
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else _NO
    if option is str:
        return value if isinstance(value, str) else _NO
    if option is object:
        return value
    if typing.get_origin(option) is tuple:
        if not isinstance(value, (list, tuple)):
            return _NO
        items = [_convert(typing.get_args(option)[0], v) for v in value]
        return _NO if any(v is _NO for v in items) else tuple(items)
    if option is dict or typing.get_origin(option) in (dict, Mapping) or option is Mapping:
        return {str(k): _tuples(v) for k, v in value.items()} if isinstance(value, Mapping) else _NO
    if isinstance(option, type) and isinstance(value, option):
        return value
    if isinstance(value, str) and hasattr(option, "parse"):  # text in the option's own syntax (a Sweep's 0.5..2)
        parsed = option.parse(value)
        return _NO if parsed is None else parsed
    if isinstance(value, dict) and hasattr(option, "from_state"):  # a stored state (Fingerprint, Splits)
        try:
            return option.from_state(value)
        except (KeyError, TypeError, ValueError):
            return _NO
    return _NO


def _tuples(value):
    """Lists (YAML and JSON have no tuples) as tuples, at any depth."""
    if isinstance(value, (list, tuple)):
        return tuple(_tuples(v) for v in value)
    if isinstance(value, dict):
        return {k: _tuples(v) for k, v in value.items()}
    return value


def _describe(hint) -> str:
    """``int | None``, ``tuple[int, ...]``, ``Splits``: an annotation as its source writes it."""
    if isinstance(hint, types.UnionType):
        return " | ".join(_describe(h) for h in typing.get_args(hint))
    if typing.get_origin(hint) is not None:
        args = ("..." if a is Ellipsis else _describe(a) for a in typing.get_args(hint))
        return f"{typing.get_origin(hint).__name__}[{', '.join(args)}]"
    return "None" if hint is type(None) else getattr(hint, "DESCRIBED", None) or getattr(hint, "__name__", str(hint))
