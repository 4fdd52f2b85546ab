"""Memory of a process tree, sampled from ``/proc``, and a file's presence in the OS page cache (Linux).

:func:`run_sampled` runs a command and samples the whole tree (the process and every descendant, e.g.
DataLoader workers) every ``interval`` seconds, summing each process's resident set (``VmRSS``, shared
pages counted once per process) and proportional set (``Pss`` of ``smaps_rollup``, shared pages split
between the processes that map them), and keeps the peaks of both sums.

:func:`cached_fraction` says how much of a file is in the page cache (``mincore`` over a read-only
mapping; nothing is read); :func:`evict` asks the kernel to drop a file's clean cached pages
(``posix_fadvise(POSIX_FADV_DONTNEED)``, no root needed; advisory, so check with ``cached_fraction``).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = ["TreePeak", "descendants", "tree_memory", "run_sampled", "cached_fraction", "evict"]


def _children(pid: int) -> list[int]:
    """Direct children of ``pid``: from ``/proc/<pid>/task/*/children``, else by scanning every ppid."""
    tasks = Path(f"/proc/{pid}/task")
    try:
        files = list(tasks.glob("*/children"))
    except OSError:
        return []
    if files:
        found = []
        for f in files:
            try:
                found += [int(p) for p in f.read_text().split()]
            except OSError:
                pass
        return found
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                stat = Path(entry.path, "stat").read_text()
            except OSError:
                continue
            if int(stat[stat.rindex(")") + 2:].split()[1]) == pid:  # field 4 (ppid), after "(comm)"
                found.append(int(entry.name))
    return found


def descendants(pid: int) -> list[int]:
    """``pid`` and all its descendants (a snapshot; processes may come and go)."""
    tree, todo = [], [pid]
    while todo:
        p = todo.pop()
        tree.append(p)
        todo += _children(p)
    return tree


def _field_kb(path: str, key: str) -> int:
    try:
        with open(path) as fh:
            for line in fh:
                if line.startswith(key):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def tree_memory(pid: int) -> tuple[int, int, int]:
    """``(rss_bytes, pss_bytes, n_processes)`` summed over ``pid``'s tree now."""
    rss = pss = n = 0
    for p in descendants(pid):
        r = _field_kb(f"/proc/{p}/status", "VmRSS:")
        if r:
            rss, pss, n = rss + r, pss + _field_kb(f"/proc/{p}/smaps_rollup", "Pss:"), n + 1
    return rss * 1024, pss * 1024, n


@dataclass
class TreePeak:
    """Peaks over the samples of one run: summed RSS and PSS (bytes), most processes seen at once."""

    rss: int = 0
    pss: int = 0
    processes: int = 0
    samples: int = 0
    returncode: int | None = None
    wall_s: float = 0.0


def run_sampled(cmd: list[str], *, interval: float = 0.1, log: str | os.PathLike | None = None,
                **popen) -> TreePeak:
    """Run ``cmd`` to completion, sampling its process tree every ``interval`` s (stdout+stderr to ``log``)."""
    peak, done = TreePeak(), threading.Event()
    out = open(log, "w") if log is not None else subprocess.DEVNULL
    start = time.perf_counter()
    try:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, **popen)

        def sample():
            while not done.is_set():
                rss, pss, n = tree_memory(proc.pid)
                peak.rss, peak.pss = max(peak.rss, rss), max(peak.pss, pss)
                peak.processes, peak.samples = max(peak.processes, n), peak.samples + 1
                done.wait(interval)

        thread = threading.Thread(target=sample, daemon=True)
        thread.start()
        try:
            peak.returncode = proc.wait()
        finally:
            done.set()
            thread.join()
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    finally:
        if log is not None:
            out.close()
    peak.wall_s = time.perf_counter() - start
    return peak


_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
_MAP_FAILED = ctypes.c_void_p(-1).value


def cached_fraction(path: str | os.PathLike) -> float:
    """Fraction of ``path``'s pages in the OS page cache (``mincore``; NaN if it cannot be told)."""
    size = os.path.getsize(path)
    if size == 0:
        return float("nan")
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if addr in (None, _MAP_FAILED):
            return float("nan")
        try:
            pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
            vec = ctypes.create_string_buffer(pages)
            if _libc.mincore(addr, size, vec) != 0:
                return float("nan")
            return float((np.frombuffer(vec.raw, np.uint8) & 1).sum()) / pages
        finally:
            _libc.munmap(addr, size)
    finally:
        os.close(fd)


def evict(path: str | os.PathLike) -> None:
    """Write ``path`` back and ask the kernel to drop its cached pages (advisory)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
