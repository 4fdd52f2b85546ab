"""Shared timing helpers for the benchmark scripts (not timed tests: scripts that print ratios)."""

from __future__ import annotations

import os
import resource
import time
from dataclasses import dataclass
from typing import Callable

# The CPU profiler behind peak_memory_mb (kineto) prints "USDT: ... profiler_start/stop" and "STAGE: ..." lines
# on stderr at its default log level; 6 is above all of its levels (read when the profiler first starts).
os.environ.setdefault("KINETO_LOG_LEVEL", "6")

import torch  # noqa: E402

from evaluation.resources import peak_memory_mb  # noqa: E402

__all__ = ["Row", "best_time", "best_times_interleaved", "peak_memory_mb", "max_rss_mb", "busy_warning",
           "print_table"]


@dataclass
class Row:
    """One line of a benchmark table: ``ratio`` is ``baseline / candidate`` time unless ``detail`` says otherwise.

    ``threads``: the torch threads the timing ran under, shown in the row's :attr:`label` (``None``: not set
    by the benchmark; ``python -m bench`` then sets the count it ran the benchmark under).
    """

    benchmark: str
    case: str
    value: float
    unit: str
    detail: str = ""
    threads: int | None = None

    @property
    def label(self) -> str:
        """``benchmark | case``, and ``, N threads`` when the row says how many it used."""
        threads = "" if self.threads is None else f", {self.threads} thread{'s' if self.threads != 1 else ''}"
        return f"{self.benchmark} | {self.case}{threads}"


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


def busy_warning(load: float | None = None, cores: int | None = None) -> str | None:
    """A one-line warning when the 1-minute load average exceeds the core count (other work shares the cores:
    timings, multi-thread ones most, are unreliable); ``None`` otherwise (or where the load is unknown)."""
    if load is None:
        try:
            load = os.getloadavg()[0]
        except OSError:
            return None
    cores = cores or os.cpu_count() or 1
    if load <= cores:
        return None
    return (f"warning: the machine is busy (load average {load:.2f} over the last minute on {cores} cores): "
            "timings are unreliable, rows with several threads most")


def print_table(rows: list[Row], title: str = "", *, footer: list[str] = ()) -> None:
    """Print rows as an aligned text table, then the ``footer`` lines."""
    if title:
        print(f"\n== {title}")
    width = max((len(r.label) for r in rows), default=20)
    for r in rows:
        print(f"{r.label:<{width}} {r.value:>12.4g} {r.unit:<10} {r.detail}")
    for line in footer:
        print(line)
