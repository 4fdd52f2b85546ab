"""Native (C++) CPU kernels: one source file compiled once with ``torch.utils.cpp_extension.load``, cached.

The project's one builder: ``pde_data``'s kernel (``pde_data/solvers/csrc/swe.cpp``, the fused shallow-water
step) and ``circuitop``'s (``circuitop/csrc/``, through ``circuitop._native``) are :class:`NativeKernel`
objects that callers build with :meth:`NativeKernel.load`.

Building is visible and happens once: ``make install`` and ``circuitop build`` (:func:`build_kernels`)
compile every kernel with a progress line each; a kernel used before it was built is compiled at its
first call with one line on stderr that says so (about a minute). Builds go to one cache, wherever
circuitop is started from: ``$TORCH_EXTENSIONS_DIR/circuitop_<stem>`` when set, else the source checkout's
``.torch_extensions/`` when it exists (``make install`` builds there), else torch's default folder; so a
plain shell after ``make install`` loads the kernels it built instead of compiling them again. Concurrent builds of
one kernel wait for each other on an OS lock (released when its process dies, however it dies); a
build that was killed leaves torch's own ``lock`` file behind, which would make every later build wait
forever: under the OS lock it is known to be stale, and is removed with a message.

A failed build is reported once with :class:`NativeKernelWarning` and not retried; callers then use
their pure-torch paths. ``CIRCUITOP_NATIVE=0`` (read on every call) disables every kernel
without building it. Compiler flags follow the compiler found
(``$CXX``, else ``c++``): OpenMP only with GCC (Apple clang has none), ``-O3`` and the kernel's extra
flags with GCC and clang, none with others.

Example::

    kernel = NativeKernel(Path(__file__).with_name("csrc") / "swe.cpp")
    ops = kernel.load()  # the compiled module, or None (disabled, or the build failed: one warning)
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

__all__ = ["NativeKernel", "NativeKernelWarning", "SWITCH", "CHECKOUT_CACHE", "build_kernels", "compiler",
           "compiler_family", "native_enabled"]

#: the environment variable that disables every native kernel when set to 0 (or false/off/no)
SWITCH = "CIRCUITOP_NATIVE"
#: the source checkout's kernel cache (``make install`` sets ``TORCH_EXTENSIONS_DIR`` to it)
CHECKOUT_CACHE = Path(__file__).resolve().parents[2] / ".torch_extensions"


class NativeKernelWarning(RuntimeWarning):
    """A native kernel could not be built or loaded; the pure-torch path runs instead (same results,
    slower). Raised once per kernel and process."""


def native_enabled() -> bool:
    """False when the environment variable :data:`SWITCH` is ``0`` (or ``false``/``off``/``no``)."""
    return os.environ.get(SWITCH, "1").strip().lower() not in ("0", "false", "off", "no")


class NativeKernel:
    """The C++ extension compiled from ``source`` (``<csrc>/<stem>.cpp``, a ``PYBIND11_MODULE``), built
    at most once per process.

    Args:
        source: path of the ``.cpp`` file; the module is named ``circuitop_<stem>``.
        extra_cflags: flags added to ``-O3`` with GCC and clang (e.g. ``-fno-trapping-math``).
    """

    def __init__(self, source: Path, *, extra_cflags: tuple[str, ...] = ()):
        self.source, self.stem, self.extra_cflags = Path(source), Path(source).stem, tuple(extra_cflags)
        self._lock = threading.Lock()
        self._module = None
        self.error: str | None = None  # why the build failed (None: built, or not tried yet)

    def __repr__(self) -> str:
        return f"NativeKernel({str(self.source)!r})"

    def load(self, *, stacklevel: int = 1):
        """The compiled module (built now if needed), or None when native kernels are disabled or the
        build failed; the first failure warns once (:class:`NativeKernelWarning`), attributed to the
        frame ``stacklevel`` levels above the caller of ``load``, and is not retried."""
        if not native_enabled():
            return None
        if self._module is None and self.error is None:
            with self._lock:
                if self._module is None and self.error is None:
                    self._try_build(stacklevel + 3)
        return self._module

    def _try_build(self, stacklevel: int) -> None:
        try:
            self._module = self._build()
        except Exception as exc:  # noqa: BLE001 - any build/load failure means "use the torch path"
            self.error = f"{type(exc).__name__}: {exc}".strip()
            warnings.warn(f"circuitop: native CPU kernel {self.stem}.cpp unavailable, using the pure-torch path "
                          f"({self.error[:500]})", NativeKernelWarning, stacklevel=stacklevel)

    def build_directory(self) -> Path:
        """Where the kernel is built and cached (module docstring): ``$TORCH_EXTENSIONS_DIR``, else the
        checkout's :data:`CHECKOUT_CACHE` when it exists, else torch's default extensions folder."""
        from torch.utils.cpp_extension import _get_build_directory

        name = f"circuitop_{self.stem}"
        if not os.environ.get("TORCH_EXTENSIONS_DIR") and CHECKOUT_CACHE.is_dir():
            return CHECKOUT_CACHE / name
        return Path(_get_build_directory(name, verbose=False))

    def flags(self, family: str | None = None) -> tuple[list[str], list[str]]:
        """``(cflags, ldflags)`` of this kernel for the compiler ``family`` (default: the one found). OpenMP
        (``at::parallel_for`` runs serially unless the extension itself is built with it; torch's own libgomp
        is already loaded, so the extension shares its thread pool) only with GCC and a torch built with
        OpenMP; ``-O3`` and :attr:`extra_cflags` with GCC and clang."""
        family = family or compiler()
        if family not in ("gcc", "clang", "apple-clang"):
            return [], []
        omp = ["-fopenmp"] if family == "gcc" and torch.backends.openmp.is_available() else []
        return ["-O3", *omp, *self.extra_cflags], omp

    def _is_built(self, directory: Path) -> bool:
        """Whether a compiled module newer than its source is in ``directory`` (then loading is quick)."""
        source = self.source.stat().st_mtime
        return any(lib.stat().st_mtime >= source for lib in directory.glob(f"circuitop_{self.stem}*.so"))

    def _build(self):
        from torch.utils.cpp_extension import load

        directory = self.build_directory()
        directory.mkdir(parents=True, exist_ok=True)
        with _os_lock(directory / "circuitop.lock", self.stem):
            stale = directory / "lock"  # torch's FileBaton: nobody holds it while we hold the OS lock
            if stale.exists():
                _say(f"removing the stale build lock {stale} (an earlier build of {self.stem}.cpp was interrupted)")
                stale.unlink(missing_ok=True)
            visible = not self._is_built(directory)
            if visible:
                _say(f"compiling the native CPU kernel {self.stem}.cpp (once; about a minute; cached in {directory})")
            start = time.perf_counter()
            cflags, ldflags = self.flags()
            module = load(name=f"circuitop_{self.stem}", sources=[str(self.source)], extra_cflags=cflags,
                          extra_ldflags=ldflags, build_directory=str(directory), verbose=False)
            if visible:
                _say(f"{self.stem}.cpp compiled in {time.perf_counter() - start:.0f} s")
            return module


@functools.cache
def compiler() -> str:
    """``"gcc"``, ``"clang"``, ``"apple-clang"`` or ``"other"``: the C++ compiler torch will call."""
    cxx = os.environ.get("CXX", "c++")
    if shutil.which(cxx) is None:
        return "other"
    try:
        version = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return "other"
    return compiler_family(version)


def compiler_family(version_text: str) -> str:
    """The compiler family from ``<cxx> --version`` output."""
    text = version_text.lower()
    if "apple" in text and "clang" in text:
        return "apple-clang"
    if "clang" in text:
        return "clang"
    if "gcc" in text or "g++" in text or "free software foundation" in text:
        return "gcc"
    return "other"


def build_kernels(kernels) -> dict[str, str | None]:
    """Build (or load from the cache) every :class:`NativeKernel` in ``kernels`` now, with a progress
    line each; returns ``{stem: None if built, else why not}``. What ``make install`` and
    ``circuitop build`` run."""
    result = {}
    for kernel in kernels:
        if not native_enabled():
            result[kernel.stem] = f"disabled by {SWITCH}=0"
            continue
        ops = kernel.load()
        result[kernel.stem] = None if ops is not None else kernel.error or "unavailable"
        _say(f"{kernel.stem}.cpp: {'ready' if ops is not None else 'not built: ' + result[kernel.stem][:300]}")
    return result


def _say(message: str) -> None:
    print(f"circuitop: {message}", file=sys.stderr, flush=True)


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
