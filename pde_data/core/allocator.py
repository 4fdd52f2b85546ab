"""Keep freed memory blocks in the process for reuse (glibc's malloc only).

torch's CPU tensors come from ``malloc``. glibc serves blocks above its mmap threshold (128 KiB at
start, raised on the fly up to the size of the last freed block) with fresh ``mmap`` pages and returns
them on ``free``, so a solver step that allocates the same few megabytes every time (torch's inverse
real FFT clones its input, MKL's c2r overwrites it) pays a page fault for every 4 KiB page every step.
On the 2-core VMs we measure on, that made solver steps several times slower: ``bench/bench_solvers.py``
times the shallow-water step with glibc's defaults against the reused blocks (RESULTS.md's bench section).

:func:`retain_freed_memory` sets glibc's mmap threshold to 64 MiB and its trim threshold to 256 MiB
(``mallopt``; the same as the environment variables ``MALLOC_MMAP_THRESHOLD_`` and
``MALLOC_TRIM_THRESHOLD_``), so that freed blocks below 64 MiB stay in the heap and are reused. The process's peak memory is unchanged; its resident size may stay near
that peak instead of shrinking after a burst. Other C libraries (musl, macOS, Windows) are left alone.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import sys

__all__ = ["retain_freed_memory"]

_M_TRIM_THRESHOLD = -1  # glibc malloc.h
_M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 64 << 20
TRIM_THRESHOLD = 256 << 20


@functools.cache
def retain_freed_memory() -> bool:
    """Apply the settings of the module docstring once per process; True when glibc accepted them."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1 and mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1
