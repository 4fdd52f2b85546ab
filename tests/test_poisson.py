"""Poisson (CHONN, Eqs. 56-58): analytic pairs, the sine-transform solver, FD convergence, determinism."""

import numpy as np
import pytest
import scipy.fft

from pde_data.generate.poisson import generate_poisson

from pde_data.solvers.poisson import poisson_grid, solve_poisson
@pytest.mark.parametrize("K", [16, 20])
def test_solver_reproduces_analytic_u(K):
    ds = generate_poisson(3, K=K, n_grid=64, seed=1)
    u = solve_poisson(ds["f"].values)
    assert np.max(np.abs(u - ds["u"].values)) < 1e-10
    assert np.max(np.abs(ds["u"].values)) > 1e-3  # not trivially zero


def test_minus_laplacian_of_u_is_f_spectrally():
    ds = generate_poisson(2, K=16, n_grid=64, seed=2)
    u, f = ds["u"].values[:, 1:-1, 1:-1], ds["f"].values[:, 1:-1, 1:-1]
    p = np.arange(1, 63)
    lap = np.pi**2 * (p[:, None] ** 2 + p[None] ** 2)
    minus_lap_u = scipy.fft.idstn(lap * scipy.fft.dstn(u, type=1, axes=(-2, -1)), type=1, axes=(-2, -1))
    assert np.max(np.abs(minus_lap_u - f)) < 1e-10 * np.max(np.abs(f))


def test_boundary_and_grid():
    ds = generate_poisson(2, K=4, n_grid=17, seed=0)
    np.testing.assert_array_equal(ds["x"].values, np.arange(17) / 16)
    for edge in (ds["u"][:, 0], ds["u"][:, -1], ds["u"][:, :, 0], ds["u"][:, :, -1]):
        assert np.max(np.abs(edge.values)) < 1e-15
    assert ds["coef"].dims == ("sample", "i", "j") and list(ds["i"].values) == [1, 2, 3, 4]


def test_eigenfunction_manufactured():
    x = poisson_grid(33)
    exact = np.sin(np.pi * x)[:, None] * np.sin(2 * np.pi * x)[None]
    np.testing.assert_allclose(solve_poisson(5 * np.pi**2 * exact), exact, atol=1e-13)


def test_five_point_laplacian_converges_second_order():
    """Independent of the sine transform: the 5-point -Δ_h of the analytic u tends to f as h^2."""
    errors, sizes = [], [17, 33, 65, 129]
    for n in sizes:
        ds = generate_poisson(1, K=3, n_grid=n, seed=4)
        u, f = ds["u"].values[0], ds["f"].values[0]
        lap = (u[2:, 1:-1] + u[:-2, 1:-1] + u[1:-1, 2:] + u[1:-1, :-2] - 4 * u[1:-1, 1:-1]) * (n - 1) ** 2
        errors.append(np.max(np.abs(-lap - f[1:-1, 1:-1])))
    slope = np.polyfit(np.log(1.0 / (np.array(sizes) - 1)), np.log(errors), 1)[0]
    assert 1.9 < slope < 2.1, (errors, slope)


def test_deterministic_shards_and_coefficients():
    a = generate_poisson(5, K=4, n_grid=16, seed=7)
    assert a["u"].values.tobytes() == generate_poisson(5, K=4, n_grid=16, seed=7)["u"].values.tobytes()
    shard = generate_poisson(5, K=4, n_grid=16, seed=7, samples=[3, 4])
    assert shard["f"].values.tobytes() == a["f"].isel(sample=[3, 4]).values.tobytes()
    coef = a["coef"].values
    assert coef.min() >= -1 and coef.max() <= 1
    assert not np.array_equal(coef, generate_poisson(5, K=4, n_grid=16, seed=8)["coef"].values)


@pytest.mark.parametrize("call, message", [
    (lambda: generate_poisson(2, K=0), "K: expected an integer >= 1, found 0"),
    (lambda: generate_poisson(2, n_grid=2), "n_grid: expected at least 3"),
    (lambda: generate_poisson(2, K=16, n_grid=3), r"n_grid: expected at least K \+ 2 = 18 .* found 3"),
    (lambda: generate_poisson(0), "samples: expected indices"),
    (lambda: solve_poisson(np.zeros((4, 5))), r"f: expected shape \(..., n, n\)"),
])
def test_invalid_parameters(call, message):
    with pytest.raises(ValueError, match=message):
        call()
