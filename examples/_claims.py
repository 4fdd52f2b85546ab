"""The rules RESULTS.md words its claims by, from seed statistics ``{"mean", "std", "values"}`` (mean and sample
standard deviation over the training seeds).

- A difference counts only when the two means differ by more than their standard deviations added
  (:func:`compare`); otherwise the two are "within the seed spread", and no side is better.
- "Best" is lower than every other beyond that spread (:func:`lowest_beyond`), never the lowest mean alone.
- A claim of *no* difference is "reproduced" only with an equivalence margin stated in its definition
  (:class:`Equivalence`) and met even after adding the spread: ``|gap| + std_a + std_b <= margin``. A
  difference beyond the spread makes it "not reproduced at this scale"; anything else is "no difference
  detected" with the number of seeds and the spread, which says what the data cannot show.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

__all__ = ["SPREAD", "REPRODUCED", "NOT_REPRODUCED", "NOT_MEASURED", "Equivalence", "compare", "stat_of", "lowest_beyond",
           "lowest_line", "equivalent", "no_difference"]

SPREAD = "within the seed spread"
REPRODUCED, NOT_REPRODUCED = "reproduced", "not reproduced at this scale"
NOT_MEASURED = "not measured"  # a mean or spread that is NaN: no verdict either way


def _measured(*stats: dict) -> bool:
    return all(not math.isnan(s["mean"]) and not math.isnan(s["std"]) for s in stats)


def stat_of(values: list[float]) -> dict:
    """``{"mean", "std", "values"}`` of per-seed values (sample standard deviation; 0 for one seed)."""
    values = [float(v) for v in values]
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return {"mean": statistics.fmean(values), "std": std, "values": values}


def compare(ours: dict, other: dict) -> str:
    """"lower" / "higher" (``ours`` against ``other``), :data:`SPREAD` when the means differ by no more than
    the two standard deviations added, or :data:`NOT_MEASURED` when either is NaN."""
    if not _measured(ours, other):
        return NOT_MEASURED
    gap = ours["mean"] - other["mean"]
    if abs(gap) <= ours["std"] + other["std"]:
        return SPREAD
    return "lower" if gap < 0 else "higher"


def lowest_beyond(stats: dict[str, dict]) -> str | None:
    """The label whose mean is lower than every other's beyond the seed spread, or None (no such label, or a
    NaN among them)."""
    if not _measured(*stats.values()):
        return None
    best = min(stats, key=lambda k: stats[k]["mean"])
    return best if all(compare(stats[best], s) == "lower" for k, s in stats.items() if k != best) else None


def lowest_line(stats: dict[str, dict], what: str) -> str:
    """``- Lowest mean <what>: X`` and whether it is lower than every other beyond the seed spread (naming
    those within it); a NaN among them: not measured."""
    if not _measured(*stats.values()):
        return f"- Lowest mean {what}: {NOT_MEASURED} (a seed statistic is NaN)."
    best = min(stats, key=lambda k: stats[k]["mean"])
    close = [k for k, s in stats.items() if k != best and compare(stats[best], s) == SPREAD]
    tail = ("lower than every other beyond the seed spread" if not close
            else f"not beyond the seed spread of {', '.join(close)}, so no {what} winner")
    return f"- Lowest mean {what}: {best}; {tail}."


@dataclass(frozen=True)
class Equivalence:
    """A claim of no difference and the margin, stated with the claim, within which two results count as the same.
    ``one_sided``: the claim is only that the first does not exceed the second (by more than ``margin``)."""

    claim: str
    margin: float
    unit: str
    one_sided: bool = False


def equivalent(claim: Equivalence, a: dict, b: dict) -> bool:
    """Whether ``a`` and ``b`` are within ``claim.margin`` even after adding both standard deviations."""
    gap = a["mean"] - b["mean"]
    return (gap if claim.one_sided else abs(gap)) + a["std"] + b["std"] <= claim.margin


def no_difference(claim: Equivalence, pairs: list[tuple[dict, dict]]) -> str:
    """The verdict on ``claim`` over ``pairs``: "reproduced" when every pair is :func:`equivalent`; "not reproduced
    at this scale" when a pair differs beyond the seed spread (for a one-sided claim: the first higher);
    otherwise "no difference detected (n = …, spread …)"; "not measured" when a statistic is NaN."""
    if not all(_measured(a, b) for a, b in pairs):
        return NOT_MEASURED
    if all(equivalent(claim, a, b) for a, b in pairs):
        return REPRODUCED
    found = [compare(a, b) for a, b in pairs]
    if "higher" in found or (not claim.one_sided and "lower" in found):
        return NOT_REPRODUCED
    seeds = min(len(s["values"]) for pair in pairs for s in pair)
    spread = max(s["std"] for pair in pairs for s in pair)
    return (f"no difference detected (n = {seeds} seeds, spread up to ±{spread:.2g} {claim.unit}: the data cannot "
            f"show the {claim.margin:g} {claim.unit} margin the claim states)")
