"""Lazily built native (C++) CPU kernels, compiled once with ``torch.utils.cpp_extension.load``.

The build (about a minute, cached in ``$TORCH_EXTENSIONS_DIR``; torch serialises concurrent builds
of one extension with a lock file) happens on the first call of :func:`scan_ops`. A failed build is
reported once with ``warnings.warn`` and not retried; callers then use their pure-torch paths.
``CIRCUITOP_NATIVE_SCAN=0`` (read on every call) disables the native scan without building it.
"""

from __future__ import annotations

import os
import threading
import warnings
from pathlib import Path

__all__ = ["native_scan_enabled", "scan_ops"]

_SOURCE = Path(__file__).with_name("csrc") / "scan.cpp"
_lock = threading.Lock()
_ops = None
_failed: str | None = None


def native_scan_enabled() -> bool:
    """False when the environment variable ``CIRCUITOP_NATIVE_SCAN`` is ``0`` (or ``false``/``off``/``no``)."""
    return os.environ.get("CIRCUITOP_NATIVE_SCAN", "1").strip().lower() not in ("0", "false", "off", "no")


def scan_ops():
    """The compiled scan module (``forward``, ``backward``, ``reverse``), or None when it is disabled
    or cannot be built (then a single warning says why)."""
    global _ops, _failed
    if _ops is not None or _failed is not None or not native_scan_enabled():
        return _ops if native_scan_enabled() else None
    with _lock:
        if _ops is None and _failed is None:
            try:
                import torch
                from torch.utils.cpp_extension import load

                # at::parallel_for runs serially unless the extension itself is built with OpenMP
                # (torch's own libgomp is already loaded, so the extension shares its thread pool).
                omp = ["-fopenmp"] if torch.backends.openmp.is_available() else []
                _ops = load(
                    name="circuitop_scan",
                    sources=[str(_SOURCE)],
                    extra_cflags=["-O3", *omp],
                    extra_ldflags=omp,
                    verbose=False,
                )
            except Exception as exc:  # noqa: BLE001 - any build/load failure means "use the torch path"
                _failed = f"{type(exc).__name__}: {exc}".strip()
                warnings.warn(
                    f"circuitop: native CPU scan unavailable, using the pure-torch scan ({_failed[:500]})",
                    RuntimeWarning,
                    stacklevel=3,
                )
    return _ops


def scan_build_error() -> str | None:
    """Why the native scan could not be built (None when it was built or not tried yet)."""
    return _failed
