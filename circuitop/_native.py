"""Lazily built native (C++) CPU kernels, compiled once with ``torch.utils.cpp_extension.load``.

Three extensions: ``scan.cpp`` (the plain selective scan), ``kirchhoff.cpp`` (the Kirchhoff cell's
fused ZOH scan, the block's convolution stage and gate) and ``resample.cpp`` (the exact 2× pooling and
upsampling on which ``operators`` hosts run their blocks). Each build (about a minute, cached in
``$TORCH_EXTENSIONS_DIR``; torch serialises concurrent builds of one extension with a lock file)
happens on the first call of :func:`scan_ops` / :func:`kirchhoff_ops` / :func:`resample_for`. A failed build is
reported once with ``warnings.warn`` and not retried; callers then use their pure-torch paths.
``CIRCUITOP_NATIVE_SCAN=0`` (read on every call) disables all three without building them.
"""

from __future__ import annotations

import os
import threading
import warnings
from pathlib import Path

import torch

__all__ = [
    "native_scan_enabled", "scan_build_error", "scan_ops", "scan_for", "kirchhoff_ops", "kirchhoff_for", "resample_for",
]

_CSRC = Path(__file__).with_name("csrc")
_lock = threading.Lock()
_ops: dict[str, object] = {}
_failed: dict[str, str] = {}


def native_scan_enabled() -> bool:
    """False when the environment variable ``CIRCUITOP_NATIVE_SCAN`` is ``0`` (or ``false``/``off``/``no``)."""
    return os.environ.get("CIRCUITOP_NATIVE_SCAN", "1").strip().lower() not in ("0", "false", "off", "no")


def scan_ops():
    """The compiled plain scan (``csrc/scan.cpp``: ``scan``, the differentiable scan of ``(batch, time,
    *channels)`` tensors; ``forward`` and ``reverse``, its two kernels), or None when
    it is disabled or cannot be built (then a single warning says why)."""
    return _extension("scan")


def kirchhoff_ops():
    """The compiled Kirchhoff kernels (``csrc/kirchhoff.cpp``: ``zoh_forward``/``zoh_backward``, the
    cell's fused scan; ``conv_forward``/``conv_backward`` and ``gate_forward``/``gate_backward``, the
    block's), or None when they are disabled or cannot be built (then a single warning says why)."""
    return _extension("kirchhoff")


def scan_for(*tensors: torch.Tensor | None):
    """:func:`scan_ops` when the given tensors (None entries skipped) suit its kernels (see
    :func:`_suit`), else None (then the caller takes its torch path)."""
    return _extension("scan") if _suit(tensors) else None


def kirchhoff_for(*tensors: torch.Tensor | None):
    """:func:`kirchhoff_ops` when the given tensors (None entries skipped) suit its kernels (see
    :func:`_suit`), else None (then the caller takes its torch path)."""
    return _extension("kirchhoff") if _suit(tensors) else None


def resample_for(*tensors: torch.Tensor | None):
    """The compiled 2× resampling (``csrc/resample.cpp``: ``pool2x``, ``upsample2x`` and their
    ``*_adjoint``) when the given tensors suit its kernels (see :func:`_suit`), else None."""
    return _extension("resample") if _suit(tensors) else None


def _suit(tensors) -> bool:
    """Whether every tensor (None skipped) is a CPU float32 or float64 tensor, all of one dtype:
    what the native kernels take. (The ``*_for`` functions call ``_extension`` themselves, so that a
    build warning points at their caller, as one from ``scan_ops`` / ``kirchhoff_ops`` does.)"""
    present = [t for t in tensors if t is not None]
    dtype = present[0].dtype
    return dtype in (torch.float32, torch.float64) and all(t.device.type == "cpu" and t.dtype == dtype for t in present)


def _extension(stem: str):
    if not native_scan_enabled():
        return None
    if stem in _ops or stem in _failed:
        return _ops.get(stem)
    with _lock:
        if stem not in _ops and stem not in _failed:
            try:
                _ops[stem] = _build(stem)
            except Exception as exc:  # noqa: BLE001 - any build/load failure means "use the torch path"
                _failed[stem] = f"{type(exc).__name__}: {exc}".strip()
                warnings.warn(
                    f"circuitop: native CPU kernel {stem}.cpp unavailable, using the pure-torch path "
                    f"({_failed[stem][:500]})",
                    RuntimeWarning,
                    stacklevel=4,
                )
    return _ops.get(stem)


# The ZOH kernel's clamp is only if-converted (hence vectorised) when comparisons may be speculated;
# circuitop never enables floating-point traps, so -fno-trapping-math changes no result.
_EXTRA_CFLAGS = {"scan": [], "kirchhoff": ["-fno-trapping-math"], "resample": []}


def _build(stem: str):
    from torch.utils.cpp_extension import load

    # at::parallel_for runs serially unless the extension itself is built with OpenMP
    # (torch's own libgomp is already loaded, so the extension shares its thread pool).
    omp = ["-fopenmp"] if torch.backends.openmp.is_available() else []
    return load(
        name=f"circuitop_{stem}",
        sources=[str(_CSRC / f"{stem}.cpp")],
        extra_cflags=["-O3", *omp, *_EXTRA_CFLAGS[stem]],
        extra_ldflags=omp,
        verbose=False,
    )


def scan_build_error(stem: str = "scan") -> str | None:
    """Why the native kernel ``stem`` (``"scan"``, ``"kirchhoff"`` or ``"resample"``) could not be
    built (None when it was built or not tried yet)."""
    return _failed.get(stem)
