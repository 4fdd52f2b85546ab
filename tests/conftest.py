"""Shared test settings."""

import pytest
import torch


@pytest.fixture(autouse=True)
def one_thread():
    """One torch thread per test process: the suite's tensors are small, and on 2 shared cores two
    threads per process oversubscribe (small FFTs and training steps ran up to 20x slower)."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)
