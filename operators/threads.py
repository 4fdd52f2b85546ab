"""How many torch CPU threads a process uses: ``--threads N``, or ``auto`` (every command's default).

Where the caller can time its own work (a training step: ``probe``), ``auto`` times it at 1 thread and at every
core this process may use, under the load of the moment, and keeps the faster; otherwise it takes the cores less
the machine's 1-minute load average (a busy 2-core machine with one other job running leaves 1; the average
lags, which is why a probe, where there is one, decides). Small tensors on shared cores often run several times
faster on one thread than on two (README: Threads); on an idle machine with large tensors more threads win. The
choice is said in one line.

Example:
    >>> choose_threads("auto", probe=lambda: step(model, batch))  # doctest: +SKIP
    'threads: auto chose 1 (a step: … ms at 1 thread, … ms at 2 threads; --threads N sets it)'
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Callable

import torch

__all__ = ["threads_value", "usable_cores", "idle_cores", "choose_threads", "add_threads_option", "say", "AUTO"]

AUTO = "auto"
#: timed calls of a probe at each thread count (after one untimed warm-up); the median counts
_REPEATS = 3


def threads_value(text: str) -> int | str:
    """``--threads``'s value: ``auto`` or a positive number of threads (argparse ``type``)."""
    if text == AUTO:
        return AUTO
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected '{AUTO}' or a positive number of threads, found {text!r}")
    return value


def usable_cores() -> int:
    """The cores this process may use."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def idle_cores() -> int:
    """The cores this process may use less the machine's 1-minute load average, at least 1."""
    cores = usable_cores()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    return max(1, min(cores, round(cores - load)))


def _median_seconds(probe: Callable[[], None], threads: int) -> float:
    torch.set_num_threads(threads)
    probe()  # warm-up: allocations, kernel selection
    times = []
    for _ in range(_REPEATS):
        start = time.perf_counter()
        probe()
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]


def choose_threads(threads: int | str | None, *, probe: Callable[[], None] | None = None,
                   processes: int = 1) -> str | None:
    """Set torch's CPU threads: ``threads`` as given; for ``auto`` (and None) ``OMP_NUM_THREADS`` when the
    environment sets it, else, with a ``probe`` of the caller's work, whichever of 1 thread and the cores (shared
    by ``processes``, e.g. ``torchrun``'s on this machine) runs it faster, timed under the machine's load of the
    moment; without one, the cores the 1-minute load leaves. Returns the one line that says an ``auto`` choice
    (None when the number was given)."""
    if threads not in (None, AUTO):
        torch.set_num_threads(int(threads))
        return None
    if os.environ.get("OMP_NUM_THREADS", "").isdigit():  # the environment chose (as `make test` does): kept, silently
        torch.set_num_threads(max(1, int(os.environ["OMP_NUM_THREADS"])))
        return None
    usable = max(1, usable_cores() // max(1, processes))
    if probe is None or usable == 1:  # nothing to time: the cores the load leaves
        idle = max(1, idle_cores() // max(1, processes))
        torch.set_num_threads(idle)
        return f"threads: auto chose {idle} (the idle cores; --threads N sets it)"
    seconds = {n: _median_seconds(probe, n) for n in (1, usable)}  # timed now, under the load there is now
    best = min(seconds, key=seconds.get)
    torch.set_num_threads(best)
    timed = ", ".join(f"{1e3 * s:.3g} ms at {n} thread{'s' if n > 1 else ''}" for n, s in seconds.items())
    return f"threads: auto chose {best} (a step: {timed}; --threads N sets it)"


def add_threads_option(p: argparse.ArgumentParser) -> None:
    """``--threads N|auto`` (:func:`operators.threads.choose_threads`), every command's."""
    p.add_argument("--threads", type=threads_value, default=AUTO, metavar="N|auto",
                   help="torch CPU threads of this process (default auto: OMP_NUM_THREADS if set, else for train "
                        "whichever of 1 and all cores runs a training step faster, else the cores the load leaves; "
                        "said in one line)")


def say(line: str | None) -> None:
    """``line`` on stderr, if there is one."""
    if line:
        print(line, file=sys.stderr, flush=True)
