"""Shared test settings."""

import pytest
import torch

from circuitop import _native


@pytest.fixture(autouse=True)
def one_thread():
    """One torch thread per test process: the suite's tensors are small, and on 2 shared cores two
    threads per process oversubscribe (small FFTs and training steps ran up to 20x slower)."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


@pytest.fixture
def kirchhoff_native():
    """Skips the test unless the native Kirchhoff kernels (``csrc/kirchhoff.cpp``) are enabled and built."""
    if not _native.native_scan_enabled():
        pytest.skip("native kernels disabled by CIRCUITOP_NATIVE_SCAN=0 in the environment")
    if _native.kirchhoff_ops() is None:
        pytest.skip(f"native Kirchhoff extension cannot be built here: {_native.scan_build_error('kirchhoff')}")
