"""Shared test settings."""

import pytest
import torch

from circuitop import _native
from pde_data.core import native
from pde_data.solvers.shallow_water import SWE_KERNEL


@pytest.fixture(autouse=True)
def one_thread():
    """One torch thread per test process: the suite's tensors are small, and on 2 shared cores two
    threads per process oversubscribe (small FFTs and training steps ran up to 20x slower)."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


def _skip_unless_built(kernel: native.NativeKernel, build):
    """The compiled module ``build()`` returns. Skips the test when the native kernels are disabled or no
    known compiler is here; fails it when a GCC or clang is here and the build failed (so CI cannot pass
    with its native tests silently skipped)."""
    if not native.native_enabled():
        pytest.skip("native kernels disabled by CIRCUITOP_NATIVE=0 in the environment")
    ops = build()
    if ops is None:
        stem, why = kernel.stem, kernel.error
        if native.compiler() != "other":  # a GCC or clang is here: it should have built the kernel
            pytest.fail(f"native {stem} extension failed to build with the {native.compiler()} found: {why}")
        pytest.skip(f"native {stem} extension cannot be built here (no GCC or clang found): {why}")
    return ops


@pytest.fixture
def kirchhoff_native():
    """The native Kirchhoff kernels (``csrc/kirchhoff.cpp``); skips the test unless enabled and built."""
    return _skip_unless_built(_native.KERNELS["kirchhoff"], _native.kirchhoff_ops)


@pytest.fixture
def resample_native():
    """The native 2× resampling kernels (``csrc/resample.cpp``); skips the test unless enabled and built."""
    return _skip_unless_built(_native.KERNELS["resample"], lambda: _native.resample_for(torch.zeros(1)))


@pytest.fixture
def swe_native():
    """The fused shallow-water step (``pde_data/solvers/csrc/swe.cpp``); skips the test unless enabled and built."""
    return _skip_unless_built(SWE_KERNEL, SWE_KERNEL.load)
