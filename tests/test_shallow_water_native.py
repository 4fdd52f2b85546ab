"""The fused shallow-water kernel (``pde_data/solvers/csrc/swe.cpp``) against its torch twin (``make_rhs`` +
``ssp_rk2_step``, ``_swe_flux.max_rate``): one step and the CFL rate on random states with momenta and
dry patches, both limiters, odd grids, samples with dt = 0; whole runs; threads; the dispatch of
``step``/``cfl_rate`` and the fallback after a failed build. The solver's physics tests
(test_shallow_water.py) run on the fused path by default and again on the torch path in ``make test``.

The two agree to round-off, not bit for bit: torch takes its square roots from MKL (not correctly
rounded), the kernel from the CPU's sqrt instruction."""

import warnings

import pytest
import torch

from pde_data.core.native import NativeKernelWarning
from pde_data.solvers._swe_flux import max_rate
from pde_data.solvers.shallow_water import SWE_KERNEL, cfl_rate, make_rhs, simulate_shallow_water, ssp_rk2_step, step

TOL = {torch.float32: dict(rtol=1e-6, atol=1e-6), torch.float64: dict(rtol=1e-12, atol=1e-12)}


def _state(batch, n, dtype, seed=0, dry=False):
    """(batch, 3, n, n): depth in [0.5, 2.5] with jumps, momenta of either sign (Froude numbers up to
    about 1); ``dry``: the last sample is dry (h = 0 and no momentum: HLL's zero-width guard everywhere)."""
    gen = torch.Generator().manual_seed(seed)
    h = 0.5 + 2 * torch.rand(batch, n, n, generator=gen, dtype=torch.float64)
    hu, hv = (h * torch.randn(batch, n, n, generator=gen, dtype=torch.float64) for _ in range(2))
    q = torch.stack([h, hu, hv], dim=1)
    if dry:
        q[-1] = 0.0
    return q.to(dtype)


def _torch_step(q, dt, dx, g, limiter):
    return ssp_rk2_step(make_rhs(dx=dx, g=g, limiter=limiter), q, dt)


def test_the_swe_kernel_builds(swe_native):
    assert callable(swe_native.ssp_rk2_step) and callable(swe_native.max_rate)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("limiter", ["mc", "minmod"])
@pytest.mark.parametrize("n", [5, 13, 32])
def test_fused_step_equals_the_torch_step(swe_native, dtype, limiter, n):
    q = _state(5, n, dtype, seed=n, dry=True)
    cfl = torch.tensor([0.45, 0.0, 0.3, 0.0, 0.0], dtype=torch.float64)
    dt = (cfl / max_rate(q, 2.0 / n, 1.7).double()).nan_to_num(0.01)  # the dry sample's rate is 0
    fused = swe_native.ssp_rk2_step(q, dt, 2.0 / n, 1.7, limiter)
    ref = _torch_step(q, dt, 2.0 / n, 1.7, limiter)
    torch.testing.assert_close(fused, ref, **TOL[dtype])
    assert torch.equal(fused[1], q[1]) and torch.equal(fused[3], q[3])  # dt = 0: unchanged, bit for bit
    assert float(fused[4].abs().max()) == 0.0  # dry stays dry (no 0/0 at the faces)
    assert float((fused[0] - q[0]).abs().max()) > 1e-3  # the step did move the states


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_fused_cfl_rate_equals_the_torch_rate(swe_native, dtype):
    q = _state(3, 11, dtype, seed=4, dry=True)
    torch.testing.assert_close(swe_native.max_rate(q, 0.1, 9.81), max_rate(q, 0.1, 9.81), **TOL[dtype])
    q[2, 1, 5, 5] = float("nan")  # as torch's amax: a NaN cell makes its sample's rate NaN
    rates = swe_native.max_rate(q, 0.1, 9.81)
    assert rates[:2].isfinite().all() and rates[2].isnan()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_whole_run_matches_the_torch_path(swe_native, dtype, monkeypatch):
    q = _state(3, 24, torch.float64, seed=7)
    h, hu, hv = (0.5 * q[:, 0] + 1).to(dtype), (0.2 * q[:, 1]).to(dtype), (0.2 * q[:, 2]).to(dtype)
    run = dict(length=3.0, t_final=0.3, n_frames=4, limiter="minmod")
    fused = simulate_shallow_water(h, hu, hv, **run)
    monkeypatch.setenv("CIRCUITOP_NATIVE", "0")
    ref = simulate_shallow_water(h, hu, hv, **run)
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=1e-11, atol=1e-11)
    for a, b in zip(fused, ref):
        torch.testing.assert_close(a, b, **tol)
    assert float((fused[0][:, -1] - fused[0][:, 0]).abs().max()) > 0.01  # the waves moved


def test_fused_step_does_not_depend_on_the_thread_count(swe_native):
    q = _state(3, 40, torch.float64, seed=1)
    dt = torch.tensor([0.2, 0.3, 0.4], dtype=torch.float64) / max_rate(q, 0.05, 1.0)
    one = swe_native.ssp_rk2_step(q, dt, 0.05, 1.0, "mc")
    old = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        two = swe_native.ssp_rk2_step(q, dt, 0.05, 1.0, "mc")
    finally:
        torch.set_num_threads(old)
    assert one.isfinite().all() and torch.equal(one, two)


def test_fused_kernel_rejects_bad_input(swe_native):
    q, dt = _state(2, 8, torch.float64), torch.zeros(2, dtype=torch.float64)
    with pytest.raises(RuntimeError, match="q: expected a contiguous"):
        swe_native.ssp_rk2_step(q.transpose(2, 3), dt, 0.1, 1.0, "mc")
    with pytest.raises(RuntimeError, match="q: expected a contiguous"):
        swe_native.max_rate(q[:, :2].contiguous(), 0.1, 1.0)
    with pytest.raises(RuntimeError, match="dt: expected a contiguous CPU float64 tensor"):
        swe_native.ssp_rk2_step(q, dt.float(), 0.1, 1.0, "mc")
    with pytest.raises(RuntimeError, match="limiter: expected 'mc' or 'minmod', found 'superbee'"):
        swe_native.ssp_rk2_step(q, dt, 0.1, 1.0, "superbee")


def test_step_and_cfl_rate_take_the_kernel_on_cpu_unless_disabled(swe_native, monkeypatch):
    calls = []

    class Spy:
        def ssp_rk2_step(self, *args):
            calls.append("step")
            return swe_native.ssp_rk2_step(*args)

        def max_rate(self, *args):
            calls.append("rate")
            return swe_native.max_rate(*args)

    monkeypatch.setattr(SWE_KERNEL, "_module", Spy())
    q, dt = _state(2, 9, torch.float64), torch.tensor([0.01, 0.0], dtype=torch.float64)
    fused, rate = step(q, dt, dx=0.1, g=1.0), cfl_rate(q, dx=0.1, g=1.0)
    assert calls == ["step", "rate"]
    monkeypatch.setenv("CIRCUITOP_NATIVE", "0")
    torch.testing.assert_close(step(q, dt, dx=0.1, g=1.0), fused, **TOL[torch.float64])
    torch.testing.assert_close(cfl_rate(q, dx=0.1, g=1.0), rate, **TOL[torch.float64])
    assert calls == ["step", "rate"]


def test_a_failed_build_warns_once_and_the_torch_path_runs(monkeypatch):
    import torch.utils.cpp_extension as cpp_extension

    builds = []

    def broken_load(*args, **kwargs):
        builds.append(1)
        raise RuntimeError("no compiler")

    monkeypatch.setenv("CIRCUITOP_NATIVE", "1")
    monkeypatch.setattr(SWE_KERNEL, "_module", None)
    monkeypatch.setattr(SWE_KERNEL, "error", None)
    monkeypatch.setattr(cpp_extension, "load", broken_load)
    q, dt = _state(2, 9, torch.float64), torch.tensor([0.01, 0.02], dtype=torch.float64)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first, second = step(q, dt, dx=0.1, g=1.0), step(q, dt, dx=0.1, g=1.0)
    assert builds == [1]
    assert [w.category for w in caught] == [NativeKernelWarning]
    assert "swe.cpp unavailable" in str(caught[0].message) and caught[0].filename == __file__
    assert "no compiler" in SWE_KERNEL.error
    assert torch.equal(first, _torch_step(q, dt, 0.1, 1.0, "mc")) and torch.equal(second, first)
