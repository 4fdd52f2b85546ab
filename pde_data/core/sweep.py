"""A parameter swept over a range: one value per sample, drawn from the set's seed (issue 44).

A generator parameter that takes a :class:`Sweep` (its field's annotation says ``float | Sweep``) draws each
sample's value from its own stream, ``np.random.default_rng([seed, i, PARAMETER_STREAM])``, apart from the
stream its fields are drawn from (``[seed, i]``), so a fixed value gives the set it gave before, and a swept set
is the same however it is sharded. The command line writes a range ``LOW..HIGH`` (uniform) or
``LOW..HIGH:log`` (log-uniform): ``generate darcy --beta 0.5..2``, ``train --generate ns --gen visc=1e-4..1e-3:log``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

__all__ = ["Sweep", "PARAMETER_STREAM", "drawn"]

#: the last word of a sample's parameter stream, ``[seed, i, PARAMETER_STREAM]``
PARAMETER_STREAM = 1
_TEXT = re.compile(r"^\s*([^.\s][^\s]*?)\s*\.\.\s*([^\s:]+)\s*(:log)?\s*$")


@dataclass(frozen=True)
class Sweep:
    """The range ``[low, high]`` a parameter is drawn from, uniformly or (``log``) log-uniformly."""

    low: float
    high: float
    log: bool = False
    #: how an error names what a swept field takes
    DESCRIBED = "a range LOW..HIGH[:log]"

    @classmethod
    def parse(cls, text: str) -> "Sweep | None":
        """``"0.5..2"`` → ``Sweep(0.5, 2.0)``, ``"1e-4..1e-3:log"`` → log-uniform; None for other text."""
        match = _TEXT.match(text)
        if match is None:
            return None
        try:
            low, high = float(match.group(1)), float(match.group(2))
        except ValueError:
            return None
        return cls(low, high, match.group(3) is not None)

    @classmethod
    def from_state(cls, state: dict) -> "Sweep":
        return cls(float(state["low"]), float(state["high"]), bool(state.get("log", False)))

    def to_state(self) -> dict:
        return {"low": self.low, "high": self.high, "log": self.log}

    def __str__(self) -> str:
        return f"{self.low:g}..{self.high:g}" + (":log" if self.log else "")

    def ends(self) -> tuple[float, float]:
        return self.low, self.high

    def problem(self) -> str | None:
        """What is wrong with the range (backwards, empty, not finite, a log range reaching 0), or None."""
        if not (math.isfinite(self.low) and math.isfinite(self.high)):
            return "finite ends"
        if not self.low < self.high:
            return "LOW < HIGH"
        return "LOW > 0 for a log range" if self.log and self.low <= 0 else None

    def draw(self, rng: np.random.Generator) -> float:
        """One value: ``low + u (high - low)``, or ``exp`` of that in logs (``u`` uniform in [0, 1) from ``rng``)."""
        u = rng.random()
        if self.log:
            return float(math.exp(math.log(self.low) + u * (math.log(self.high) - math.log(self.low))))
        return float(self.low + u * (self.high - self.low))


def drawn(value: "float | Sweep", seed: int, samples: np.ndarray) -> np.ndarray:
    """``value`` for each of ``samples`` (absolute indices) of a set seeded ``seed``: the fixed value, or each
    sample's draw from ``[seed, i, PARAMETER_STREAM]``. Shape ``(len(samples),)``, float64."""
    if not isinstance(value, Sweep):
        return np.full(len(samples), float(value))
    return np.array([value.draw(np.random.default_rng([seed, int(i), PARAMETER_STREAM])) for i in samples])
