"""Native (C++) CPU kernels, compiled once with ``torch.utils.cpp_extension.load`` and cached.

Two extensions: ``kirchhoff.cpp`` (the Kirchhoff cell's fused ZOH scan, the block's convolution stage
and gate) and ``resample.cpp`` (the exact 2× pooling and upsampling on which ``operators`` hosts run
their blocks). (The plain selective scan had a kernel of its own, ``scan.cpp``; no model used it, and
``selective_scan`` now runs its chunked torch scan.)

Building is visible and happens once: ``make install`` and ``circuitop build``
(:func:`build_native_kernels`) compile both with a progress line each; a kernel used before it was
built is compiled at its first call with one line on stderr that says so (about a minute). Builds go to
``$TORCH_EXTENSIONS_DIR/circuitop_<stem>`` (torch's default folder when unset). Concurrent builds of
one kernel wait for each other on an OS lock (released when its process dies, however it dies); a
build that was killed leaves torch's own ``lock`` file behind, which would make every later build wait
forever: under the OS lock it is known to be stale, and is removed with a message.

A failed build is reported once with :class:`NativeKernelWarning` and not retried; callers then use
their pure-torch paths. ``CIRCUITOP_NATIVE_SCAN=0`` (read on every call) disables all three without
building them. Compiler flags follow the compiler found (``$CXX``, else ``c++``): OpenMP only with GCC
(Apple clang has none), the vectorisation flags with GCC and clang, none with others.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import torch

__all__ = [
    "NativeKernelWarning", "STEMS", "build_native_kernels", "build_directory", "compiler_flags", "compiler_kind",
    "native_scan_enabled", "scan_build_error", "kirchhoff_ops", "kirchhoff_for", "resample_for",
]

_CSRC = Path(__file__).with_name("csrc")
_lock = threading.Lock()
_ops: dict[str, object] = {}
_failed: dict[str, str] = {}

#: the kernels, in build order
STEMS = ("kirchhoff", "resample")


class NativeKernelWarning(RuntimeWarning):
    """A native kernel could not be built or loaded; the pure-torch path runs instead (same results,
    slower). Raised once per kernel and process."""


def native_scan_enabled() -> bool:
    """False when the environment variable ``CIRCUITOP_NATIVE_SCAN`` is ``0`` (or ``false``/``off``/``no``)."""
    return os.environ.get("CIRCUITOP_NATIVE_SCAN", "1").strip().lower() not in ("0", "false", "off", "no")


def kirchhoff_ops():
    """The compiled Kirchhoff kernels (``csrc/kirchhoff.cpp``: ``zoh_forward``/``zoh_backward``, the
    cell's fused scan; ``conv_forward``/``conv_backward`` and ``gate_forward``/``gate_backward``, the
    block's), or None when they are disabled or cannot be built (then a single warning says why)."""
    return _extension("kirchhoff")


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
    build warning points at their caller, as one from ``kirchhoff_ops`` does.)"""
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
                    NativeKernelWarning,
                    stacklevel=4,
                )
    return _ops.get(stem)


# The ZOH kernel's clamp is only if-converted (hence vectorised) when comparisons may be speculated;
# circuitop never enables floating-point traps, so -fno-trapping-math changes no result.
_EXTRA_CFLAGS = {"kirchhoff": ["-fno-trapping-math"], "resample": []}


@functools.cache
def _compiler() -> str:
    """``"gcc"``, ``"clang"``, ``"apple-clang"`` or ``"other"``: the C++ compiler torch will call."""
    cxx = os.environ.get("CXX", "c++")
    if shutil.which(cxx) is None:
        return "other"
    try:
        version = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return "other"
    return compiler_kind(version)


def compiler_kind(version_text: str) -> str:
    """The compiler family from ``<cxx> --version`` output."""
    text = version_text.lower()
    if "apple" in text and "clang" in text:
        return "apple-clang"
    if "clang" in text:
        return "clang"
    if "gcc" in text or "g++" in text or "free software foundation" in text:
        return "gcc"
    return "other"


def compiler_flags(stem: str, kind: str | None = None) -> tuple[list[str], list[str]]:
    """``(cflags, ldflags)`` for kernel ``stem`` and the compiler family ``kind`` (default: the one
    found). OpenMP (``at::parallel_for`` runs serially unless the extension itself is built with it;
    torch's own libgomp is already loaded, so the extension shares its thread pool) only with GCC and a
    torch built with OpenMP; ``-O3`` and the kernel's extra flags with GCC and clang."""
    kind = kind or _compiler()
    if kind not in ("gcc", "clang", "apple-clang"):
        return [], []
    omp = ["-fopenmp"] if kind == "gcc" and torch.backends.openmp.is_available() else []
    return ["-O3", *omp, *_EXTRA_CFLAGS[stem]], omp


def build_directory(stem: str) -> Path:
    """Where kernel ``stem`` is built and cached: ``$TORCH_EXTENSIONS_DIR/circuitop_<stem>``, or under
    torch's default extensions folder."""
    from torch.utils.cpp_extension import _get_build_directory

    return Path(_get_build_directory(f"circuitop_{stem}", verbose=False))


def _is_built(directory: Path, stem: str) -> bool:
    """Whether a compiled module newer than its source is in ``directory`` (then loading is quick)."""
    source = (_CSRC / f"{stem}.cpp").stat().st_mtime
    return any(lib.stat().st_mtime >= source for lib in directory.glob(f"circuitop_{stem}*.so"))


def _say(message: str) -> None:
    print(f"circuitop: {message}", file=sys.stderr, flush=True)


def _build(stem: str):
    from torch.utils.cpp_extension import load

    directory = build_directory(stem)
    directory.mkdir(parents=True, exist_ok=True)
    with _os_lock(directory / "circuitop.lock", stem):
        stale = directory / "lock"  # torch's FileBaton: nobody holds it while we hold the OS lock
        if stale.exists():
            _say(f"removing the stale build lock {stale} (an earlier build of {stem}.cpp was interrupted)")
            stale.unlink(missing_ok=True)
        visible = not _is_built(directory, stem)
        if visible:
            _say(f"compiling the native CPU kernel {stem}.cpp (once; about a minute; cached in {directory})")
        start = time.perf_counter()
        cflags, ldflags = compiler_flags(stem)
        module = load(name=f"circuitop_{stem}", sources=[str(_CSRC / f"{stem}.cpp")], extra_cflags=cflags,
                      extra_ldflags=ldflags, build_directory=str(directory), verbose=False)
        if visible:
            _say(f"{stem}.cpp compiled in {time.perf_counter() - start:.0f} s")
        return module


@contextlib.contextmanager
def _os_lock(path: Path, stem: str):
    """An exclusive ``lockf`` on ``path`` (POSIX; elsewhere no lock): the kernel's build is serialised
    between processes, and the lock goes with its process if that is killed."""
    try:
        import fcntl
    except ImportError:  # Windows: torch's own file lock only
        yield
        return
    with open(path, "a+") as handle:  # closing the file releases the lock
        try:
            fcntl.lockf(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            _say(f"waiting for another process's build of {stem}.cpp ({path})")
            fcntl.lockf(handle, fcntl.LOCK_EX)
        yield


def build_native_kernels(stems: tuple[str, ...] = STEMS) -> dict[str, str | None]:
    """Build (or load from the cache) every kernel in ``stems`` now, with a progress line each; returns
    ``{stem: None if built, else why not}``. What ``make install`` and ``circuitop build`` run."""
    result = {}
    for stem in stems:
        if not native_scan_enabled():
            result[stem] = "disabled by CIRCUITOP_NATIVE_SCAN=0"
            continue
        ops = _extension(stem)
        result[stem] = None if ops is not None else _failed.get(stem, "unavailable")
        _say(f"{stem}.cpp: {'ready' if ops is not None else 'not built: ' + result[stem][:300]}")
    return result


def scan_build_error(stem: str = "kirchhoff") -> str | None:
    """Why the native kernel ``stem`` (``"kirchhoff"`` or ``"resample"``) could not be
    built (None when it was built or not tried yet)."""
    return _failed.get(stem)
