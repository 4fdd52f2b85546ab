"""pde_data.core.allocator: with freed blocks retained, the Navier–Stokes step (whose inverse real FFT
allocates a few megabytes every call, inside torch) stops page-faulting. Counted with the kernel's
minor-fault counter in fresh subprocesses: one where the solver's call is replaced by a no-op (malloc's
defaults, as before) and one as shipped."""

from __future__ import annotations

import subprocess
import sys

import pytest

from pde_data.core.allocator import retain_freed_memory

_STEPS = """
import resource, sys, torch
import pde_data.solvers.navier_stokes as ns
if sys.argv[1] == "default":
    ns.retain_freed_memory = lambda: False
torch.set_num_threads(1)
step = ns.make_step(64, 16, visc=1e-3, dt=1e-4, forcing_hat=None, dtype=torch.float64, device="cpu")
w_hat = torch.fft.rfft2(torch.randn(16, 64, 64, dtype=torch.float64))
for _ in range(5):
    step(w_hat)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(40):
    step(w_hat)
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _faults(mode: str) -> int:
    out = subprocess.run([sys.executable, "-c", _STEPS, mode], capture_output=True, text=True, check=True)
    return int(out.stdout.split()[-1])


@pytest.mark.skipif(not retain_freed_memory(), reason="glibc's mallopt is not available here")
def test_the_navier_stokes_step_stops_page_faulting_with_retained_blocks():
    default, retained = _faults("default"), _faults("retain")
    print(f"minor page faults in 40 steps: malloc defaults {default}, retained blocks {retained}")
    assert retained < 100 and default > 10 * max(retained, 100), (default, retained)
