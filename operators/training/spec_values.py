"""What a :class:`~operators.training.spec.RunSpec` holds besides plain values: the :class:`Splits`, the
checks of fields whose values depend on each other, and :func:`plain` (the serialised form). Each field's type,
range and choices ride on the field itself (:func:`pde_data.core.params.param`), converted and checked by the
one converter :func:`pde_data.core.params.typed`; every failure is one :class:`SpecError` naming the field path,
what was expected and what was found. Checks that need the data (variables, frames, classes) belong to the
tasks (:mod:`operators.training.tasks`)."""

from __future__ import annotations

from dataclasses import dataclass

from pde_data.core.params import ParameterError

__all__ = ["check", "SpecError", "Splits", "plain"]

#: a value of a run spec (or a parameter of the run API) is invalid: the one :class:`ParameterError` of every
#: parameter, whose ``path`` (``"optim.lr"``, ``"steps"``) the CLI maps to an option
SpecError = ParameterError


@dataclass(frozen=True)
class Splits:
    """Disjoint sorted sample indices of the ``train``, ``val`` and ``test`` splits."""

    train: tuple[int, ...]
    val: tuple[int, ...]
    test: tuple[int, ...]

    @property
    def sizes(self) -> tuple[int, int, int]:
        return len(self.train), len(self.val), len(self.test)

    @classmethod
    def from_state(cls, state: dict) -> "Splits":
        """The splits of :func:`plain`'s ``{"train": [...], "val": [...], "test": [...]}``."""
        parts = [state[k] for k in ("train", "val", "test")]
        if set(state) != {"train", "val", "test"} or not all(
                isinstance(i, int) and not isinstance(i, bool) for p in parts for i in p):
            raise ValueError(f"expected train, val and test lists of sample indices, found {sorted(state)}")
        return cls(*(tuple(p) for p in parts))


def check(spec) -> None:
    """Raise :class:`SpecError` for fields whose values depend on another field's."""
    used = [p for p in ("data.generator", "data.samples_per_epoch") if spec.get(p)]
    if used and spec.data.generate is None:
        raise SpecError(used[0], "only with {data.generate} (a run on generated data)", "it without", ["data.generate"])
    if spec.optim.scheduler == "plateau" and spec.optim.gamma == 1:
        raise SpecError("optim.gamma", "a factor in (0, 1) for the plateau schedule (which multiplies the learning "
                        "rate by it)", "1.0")


def plain(value):
    if isinstance(value, Splits):
        return {k: list(getattr(value, k)) for k in ("train", "val", "test")}
    if hasattr(value, "to_state"):  # a Fingerprint, a generator's Sweep
        return value.to_state()
    if isinstance(value, tuple):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return value
