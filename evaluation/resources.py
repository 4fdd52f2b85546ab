"""Run-time resources of a call: the peak of live tensor memory it adds.

Used by the benchmarks and the examples that report memory next to the papers' runtime tables.
"""

from __future__ import annotations

import gc
from typing import Callable

import torch

__all__ = ["peak_memory_mb"]


def peak_memory_mb(fn: Callable[[], object], device: str | torch.device = "cpu") -> float:
    """Peak rise (MB) of live tensor memory while ``fn()`` runs, over what was live before it.

    CUDA: ``torch.cuda.max_memory_allocated`` minus the memory allocated before the call. CPU: the
    profiler's per-operator *self* allocations and frees replayed in time order (summing the
    inclusive ``cpu_memory_usage`` instead would count a nested operator's allocation once per level).
    """
    gc.collect()
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        fn()
        torch.cuda.synchronize()
        return (torch.cuda.max_memory_allocated() - base) / 2**20
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    live = peak = 0
    for event in sorted(prof.events(), key=lambda e: e.time_range.start):
        live += event.self_cpu_memory_usage
        peak = max(peak, live)
    return peak / 2**20
