"""Navier–Stokes vorticity solver: exact decay, invariants, convergence orders, bad input, generator."""

import math

import numpy as np
import pytest
import torch

import pde_data
from pde_data.solvers.navier_stokes import advective_cfl, simulate_navier_stokes, velocity


def _grid(n):
    x = torch.arange(n, dtype=torch.float64) / n
    return torch.meshgrid(x, x, indexing="ij")


def _low_modes(w, kmax):
    """Keep only Fourier modes with |kx|, |ky| <= kmax."""
    n = w.shape[-1]
    k = torch.fft.fftfreq(n, 1.0 / n)
    mask = (k.abs()[:, None] <= kmax) & (k.abs()[None, :] <= kmax)
    return torch.fft.ifft2(torch.fft.fft2(w) * mask).real


def test_taylor_green_decays_exactly():
    x, y = _grid(32)
    w0 = torch.sin(2 * math.pi * x) * torch.sin(2 * math.pi * y)
    visc = 1e-2
    w = simulate_navier_stokes(w0[None], visc=visc, t_final=1.0, n_records=4, dt=2.5e-4, forcing=None)
    for k in range(4):
        exact = w0 * math.exp(-8 * math.pi**2 * visc * (k + 1) / 4)
        assert float((w[0, k] - exact).abs().max() / exact.abs().max()) < 1e-8


def test_taylor_green_velocity_is_the_curl_of_the_stream_function():
    x, y = _grid(16)
    w = 8 * math.pi**2 * torch.sin(2 * math.pi * x) * torch.sin(2 * math.pi * y)  # ψ = sin sin
    u, v = velocity(w[None])
    assert torch.allclose(u[0], 2 * math.pi * torch.sin(2 * math.pi * x) * torch.cos(2 * math.pi * y), atol=1e-12)
    assert torch.allclose(v[0], -2 * math.pi * torch.cos(2 * math.pi * x) * torch.sin(2 * math.pi * y), atol=1e-12)


def test_mean_vorticity_is_conserved_and_viscosity_damps():
    w0 = pde_data.gaussian_random_field_2d(2, 32, seed=1) + 0.3
    runs = [simulate_navier_stokes(w0, visc=nu, t_final=1.0, n_records=2, dt=0.01) for nu in (1e-3, 1e-2)]
    for w in runs:
        assert torch.allclose(w.mean(dim=(-2, -1)), torch.full((2, 2), 0.3, dtype=torch.float64), atol=1e-13)
    energy = [float((w[:, -1] - 0.3).square().mean()) for w in runs]
    assert energy[1] < energy[0]


def test_records_land_on_the_record_times():
    w0 = pde_data.gaussian_random_field_2d(1, 16, seed=2)
    one = simulate_navier_stokes(w0, visc=1e-2, t_final=0.3, n_records=3, dt=0.03, record_initial=True)
    assert one.shape == (1, 4, 16, 16) and torch.equal(one[:, 0], w0)
    # dt = 0.04 does not divide 0.1: the solver takes 3 equal steps of 1/30 per record instead
    two = simulate_navier_stokes(w0, visc=1e-2, t_final=0.3, n_records=3, dt=0.04)
    three = simulate_navier_stokes(w0, visc=1e-2, t_final=0.3, n_records=3, dt=1 / 30)
    torch.testing.assert_close(two, three, rtol=0, atol=1e-14)
    fine = simulate_navier_stokes(w0, visc=1e-2, t_final=0.3, n_records=3, dt=1e-3)
    torch.testing.assert_close(two, fine, rtol=0, atol=2e-3)  # the same times, up to O(dt²)


def _forced_run(n, dt, t_final=1.0):
    w0 = _low_modes(pde_data.gaussian_random_field_2d(1, 64, seed=3), 2) * 4.0
    w0 = w0[:, :: 64 // n, :: 64 // n]
    # smooth, viscous flow: CNAB2 is stable here beyond the default CFL guard (checked by the slopes)
    return simulate_navier_stokes(w0, visc=1e-2, t_final=t_final, n_records=1, dt=dt, max_cfl=0.5)[:, -1]


def test_spectral_convergence_in_space():
    ref = _forced_run(64, 0.01)
    errors = [float((_forced_run(n, 0.01) - ref[:, :: 64 // n, :: 64 // n]).abs().max()) for n in (8, 16, 32)]
    assert errors[2] < 1e-10 * float(ref.abs().max())
    # spectral: the gain per doubling grows (algebraic convergence would give a constant ratio)
    assert errors[1] / errors[2] > 30 * errors[0] / errors[1] > 30 * 1e3


def test_second_order_in_time_for_the_forced_grf_case():
    ref = _forced_run(32, 0.01 / 16, t_final=2.0)
    dts = np.array([0.04, 0.02, 0.01])
    errors = np.array([float((_forced_run(32, dt, t_final=2.0) - ref).abs().max()) for dt in dts])
    slope = np.polyfit(np.log(dts), np.log(errors), 1)[0]
    assert 1.8 < slope < 2.3, (errors, slope)


def test_float32_tracks_float64():
    w0 = pde_data.gaussian_random_field_2d(2, 32, seed=4)
    w64 = simulate_navier_stokes(w0, visc=1e-3, t_final=1.0, n_records=2, dt=0.01)
    w32 = simulate_navier_stokes(w0.float(), visc=1e-3, t_final=1.0, n_records=2, dt=0.01)
    assert w32.dtype == torch.float32
    assert float((w32.double() - w64).abs().max()) < 1e-5 * float(w64.abs().max())


def test_bad_input_gives_clear_errors():
    w0 = torch.zeros(1, 16, 16, dtype=torch.float64)
    with pytest.raises(ValueError, match="square grid"):
        simulate_navier_stokes(torch.zeros(1, 16, 8), visc=1e-3, t_final=1.0, n_records=1)
    with pytest.raises(ValueError, match="even grid size"):
        simulate_navier_stokes(torch.zeros(1, 15, 15), visc=1e-3, t_final=1.0, n_records=1)
    with pytest.raises(ValueError, match="t_final"):
        simulate_navier_stokes(w0, visc=1e-3, t_final=0.0, n_records=1)
    with pytest.raises(ValueError, match="visc"):
        simulate_navier_stokes(w0, visc=-1.0, t_final=1.0, n_records=1)
    with pytest.raises(ValueError, match="finite"):
        simulate_navier_stokes(w0 + float("nan"), visc=1e-3, t_final=1.0, n_records=1)
    with pytest.raises(ValueError, match="forcing"):
        simulate_navier_stokes(w0, visc=1e-3, t_final=1.0, n_records=1, forcing=torch.zeros(8, 8))
    with pytest.raises(ValueError, match="forcing"):
        simulate_navier_stokes(w0, visc=1e-3, t_final=1.0, n_records=1, forcing="kolmogorov")


def test_a_step_above_the_cfl_limit_is_refused():
    x, y = _grid(32)
    w0 = 50.0 * torch.sin(2 * math.pi * x)[None]  # shear flow, |v| = 50 / (2π)
    assert float(advective_cfl(w0, 0.01)) > 0.5
    with pytest.raises(ValueError, match="CFL .* sample 0; use dt <="):
        simulate_navier_stokes(w0, visc=1e-3, t_final=1.0, n_records=1, dt=0.01)


def test_blow_up_names_the_time_and_sample():
    w0 = pde_data.gaussian_random_field_2d(2, 32, seed=5) * torch.tensor([1.0, 60.0], dtype=torch.float64)[:, None, None]
    with pytest.raises((FloatingPointError, RuntimeError), match=r"t=\S+ in sample 1"):
        simulate_navier_stokes(w0, visc=0.0, t_final=20.0, n_records=20, dt=0.02, max_cfl=10.0)


def test_generator_dataset_downsamples_and_reproduces_shards():
    kwargs = dict(n_sim=32, n_out=16, t_final=1.0, n_records=2, dt=0.02, seed=7, batch_size=2)
    ds = pde_data.generate_navier_stokes(3, record_initial=True, **kwargs)
    assert ds.vorticity.dims == ("sample", "time", "x", "y") and ds.vorticity.shape == (3, 3, 16, 16)
    assert list(ds.time.values) == [0.0, 0.5, 1.0] and ds.x.values[1] == 1 / 16
    assert ds.attrs["viscosity"] == 1e-3 and ds.attrs["seed"] == 7 and "sin(2*pi*(x+y))" in ds.attrs["forcing"]
    w0 = pde_data.gaussian_random_field_2d(3, 32, seed=7, dtype=torch.float32)
    np.testing.assert_array_equal(ds.vorticity[:, 0].values, w0[:, ::2, ::2].numpy())
    shard = pde_data.generate_navier_stokes(2, first_sample=1, record_initial=True, **kwargs)
    assert list(shard.sample.values) == [1, 2]
    np.testing.assert_array_equal(shard.vorticity.values, ds.vorticity[1:].values)
    with pytest.raises(ValueError, match="n_out"):
        pde_data.generate_navier_stokes(1, n_sim=32, n_out=12, t_final=1.0)


def test_unbatched_input_array_forcing_and_callback():
    from pde_data.solvers.navier_stokes import fno_forcing

    w0 = pde_data.gaussian_random_field_2d(1, 16, seed=8)[0]
    times = []
    fno = simulate_navier_stokes(w0, visc=1e-2, t_final=0.2, n_records=2, dt=0.02, callback=times.append)
    given = simulate_navier_stokes(w0, visc=1e-2, t_final=0.2, n_records=2, dt=0.02,
                                   forcing=fno_forcing(16).numpy())
    assert fno.shape == (2, 16, 16) and times == pytest.approx([0.1, 0.2])
    torch.testing.assert_close(fno, given, rtol=0, atol=1e-15)
    unforced = simulate_navier_stokes(w0, visc=1e-2, t_final=0.2, n_records=2, dt=0.02, forcing=None)
    assert float((unforced - fno).abs().max()) > 1e-3
