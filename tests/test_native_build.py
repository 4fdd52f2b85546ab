"""Native kernels are built visibly, once, and a killed build does not block the next one.

``circuitop build`` compiles into ``$TORCH_EXTENSIONS_DIR``; here a build of the smallest kernel
(``resample.cpp``) into a fresh folder is killed while the compiler runs, and the next build must clear
the stale lock with a message and finish. Compiler-family flags are checked on version strings."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from circuitop import _native
from pde_data.core import native

ROOT = Path(__file__).resolve().parents[1]
_BUILD = "from circuitop._native import build_native_kernels; build_native_kernels(('resample',))"


def _can_compile() -> bool:
    return native.compiler() != "other" and native.native_enabled()


@pytest.mark.parametrize("text,family", [
    ("c++ (Debian 12.2.0-14) 12.2.0\nCopyright (C) 2022 Free Software Foundation, Inc.", "gcc"),
    ("Apple clang version 15.0.0 (clang-1500.1.0.2.5)\nTarget: arm64-apple-darwin23", "apple-clang"),
    ("Ubuntu clang version 18.1.3\nTarget: x86_64-pc-linux-gnu", "clang"),
    ("Microsoft (R) C/C++ Optimizing Compiler", "other"),
])
def test_compiler_family_and_flags(text, family):
    assert _native.compiler_family(text) == family
    cflags, ldflags = _native.KERNELS["kirchhoff"].flags(family)
    if family == "other":
        assert (cflags, ldflags) == ([], [])
    else:
        assert "-O3" in cflags and "-fno-trapping-math" in cflags
        assert ("-fopenmp" in cflags) == (family == "gcc" and _native.torch.backends.openmp.is_available())
        assert ldflags == [f for f in cflags if f == "-fopenmp"]


def test_the_cli_builds_every_kernel_with_a_line_each():
    proc = subprocess.run([sys.executable, "-m", "operators.cli", "build"], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    for stem in (*_native.STEMS, "swe"):  # circuitop's kernels and pde_data's shallow-water step
        assert f"circuitop: {stem}.cpp: " in proc.stderr


@pytest.mark.slow
@pytest.mark.skipif(not _can_compile(), reason="no C++ compiler of a known family, or native kernels disabled")
def test_a_killed_build_leaves_no_hang(tmp_path):
    env = {**os.environ, "TORCH_EXTENSIONS_DIR": str(tmp_path)}
    first = subprocess.Popen([sys.executable, "-c", _BUILD], cwd=ROOT, env=env, start_new_session=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lock = next(tmp_path.rglob("circuitop_resample"), None)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (lock and (lock / "lock").exists()):
        time.sleep(0.2)
        lock = lock or next(tmp_path.rglob("circuitop_resample"), None)
    assert lock is not None and (lock / "lock").exists(), "the build never took torch's lock"
    os.killpg(first.pid, signal.SIGKILL)  # the compiler with it
    first.wait()
    assert (lock / "lock").exists()  # torch's lock file outlives the killed build

    start = time.monotonic()
    second = subprocess.run([sys.executable, "-c", _BUILD], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=600)
    assert second.returncode == 0, second.stderr[-2000:]
    assert "removing the stale build lock" in second.stderr and "resample.cpp: ready" in second.stderr
    assert not (lock / "lock").exists()
    print(f"rebuild after the kill: {time.monotonic() - start:.0f} s")


@pytest.mark.skipif(not _can_compile(), reason="no C++ compiler of a known family, or native kernels disabled")
def test_a_plain_shell_loads_the_kernels_make_install_built(tmp_path):
    """Started from another folder without ``TORCH_EXTENSIONS_DIR`` (a user's plain shell after ``make
    install``), circuitop loads the kernels from the checkout's ``.torch_extensions`` without compiling."""
    built = ROOT / ".torch_extensions"
    subprocess.run([sys.executable, "-m", "operators.cli", "build"], cwd=ROOT, capture_output=True, timeout=600,
                   env={**os.environ, "TORCH_EXTENSIONS_DIR": str(built)}, check=True)
    env = {k: v for k, v in os.environ.items() if k != "TORCH_EXTENSIONS_DIR"}
    code = ("from circuitop import _native; ops = _native.kirchhoff_ops(); "
            "print(ops is not None, _native.KERNELS['kirchhoff'].build_directory())")
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["True", str(built / "circuitop_kirchhoff")]
    assert "compiling" not in proc.stderr
