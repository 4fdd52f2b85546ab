"""Shared timing helpers for the benchmark scripts (not timed tests: scripts that print ratios)."""

from __future__ import annotations

import resource
import time
from dataclasses import dataclass
from typing import Callable

import torch

from evaluation.resources import peak_memory_mb

__all__ = ["Row", "best_time", "best_times_interleaved", "peak_memory_mb", "max_rss_mb", "print_table"]


@dataclass
class Row:
    """One line of a benchmark table: ``ratio`` is ``baseline / candidate`` time unless ``detail`` says otherwise."""

    benchmark: str
    case: str
    value: float
    unit: str
    detail: str = ""


def best_time(fn: Callable[[], object], *, repeat: int = 5, warmup: int = 1) -> float:
    """Minimum wall time of ``fn()`` in seconds over ``repeat`` runs after ``warmup`` runs."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return min(times)


def best_times_interleaved(fns: dict[str, Callable[[], object]], *, rounds: int = 5, warmup: int = 1,
                           repeat: int | dict[str, int] = 1, round_warmup: int = 0) -> dict[str, float]:
    """Minimum wall time of each ``fn()`` over ``rounds`` rounds that run every function in turn, so
    that a slow spell of a shared machine hits all of them alike (after ``warmup`` calls each). In a
    round each function is called ``round_warmup`` times untimed (its caches, after the others ran),
    then timed ``repeat`` times (an int, or one per name: more for the fast ones)."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    best = {name: float("inf") for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            calls = repeat[name] if isinstance(repeat, dict) else repeat
            best[name] = min(best[name], best_time(fn, repeat=calls, warmup=round_warmup))
    return best


def max_rss_mb() -> float:
    """The process's peak resident set size so far, in MB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def print_table(rows: list[Row], title: str = "") -> None:
    """Print rows as an aligned text table."""
    if title:
        print(f"\n== {title}")
    width = max((len(r.benchmark) + len(r.case) for r in rows), default=20) + 3
    for r in rows:
        label = f"{r.benchmark} | {r.case}"
        print(f"{label:<{width}} {r.value:>12.4g} {r.unit:<10} {r.detail}")
