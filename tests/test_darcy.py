"""Darcy (CHONN, Eqs. 51-53): discrete residual, second-order convergence, physics, determinism."""

import numpy as np
import pytest

from pde_data.generate.darcy import darcy_coefficient, generate_darcy

from pde_data.solvers.darcy import cell_centres, darcy_matrix, solve_darcy
def _manufactured(n):
    """u = sin(pi x) sin(pi y) (zero on the walls), a = 1 + sin(2 pi x) sin(2 pi y) / 2, f = -div(a grad u)."""
    x = cell_centres(n)
    X, Y = np.meshgrid(x, x, indexing="ij")
    p = np.pi
    u = np.sin(p * X) * np.sin(p * Y)
    a = 1 + 0.5 * np.sin(2 * p * X) * np.sin(2 * p * Y)
    ax, ay = p * np.cos(2 * p * X) * np.sin(2 * p * Y), p * np.sin(2 * p * X) * np.cos(2 * p * Y)
    ux, uy = p * np.cos(p * X) * np.sin(p * Y), p * np.sin(p * X) * np.cos(p * Y)
    return a, -(ax * ux + ay * uy) + 2 * p * p * a * u, u


def test_second_order_convergence():
    sizes = [16, 32, 64]
    errors = []
    for n in sizes:
        a, f, exact = _manufactured(n)
        errors.append(np.max(np.abs(solve_darcy(a, forcing=f) - exact)))
    slope = np.polyfit(np.log(1.0 / np.array(sizes)), np.log(errors), 1)[0]
    assert 1.9 < slope < 2.1, (errors, slope)


def test_discrete_residual_and_matrix():
    ds = generate_darcy(2, n_grid=32, seed=3)
    for i in range(2):
        A = darcy_matrix(ds["a"].values[i])
        residual = A @ ds["u"].values[i].ravel() - 1.0
        assert np.max(np.abs(residual)) < 1e-10
    A = darcy_matrix(ds["a"].values[0])
    assert abs(A - A.T).max() < 1e-12  # symmetric
    # a 3x3 hand check: uniform a = 1, h = 1/3: corner cell has 2 neighbours and 2 walls
    B = darcy_matrix(np.ones((3, 3))).toarray()
    np.testing.assert_allclose(B[0, [0, 1, 3]], [9 * (2 + 2 * 2), -9, -9])
    np.testing.assert_allclose(B[4, [1, 3, 4, 5, 7]], [-9, -9, 36, -9, -9])


def test_constant_coefficient_physics():
    """a = 1: positive, symmetric solution, scales linearly with the forcing and as 1/a."""
    n = 24
    u = solve_darcy(np.ones((n, n)))
    assert u.min() > 0
    np.testing.assert_allclose(u, u.T, atol=1e-14)
    np.testing.assert_allclose(u, u[::-1], atol=1e-14)
    np.testing.assert_allclose(solve_darcy(np.full((n, n), 0.1), forcing=2.0), 20 * u, rtol=1e-10)
    assert abs(u.max() - 0.0737) < 2e-3  # max of the unit-square torsion function, 0.07367


def test_coefficient_and_dataset():
    ds = generate_darcy(3, n_grid=32, beta=1.0, seed=0)
    assert set(np.unique(ds["a"].values)) == {0.1, 1.0}
    np.testing.assert_allclose(ds["x"].values, (np.arange(32) + 0.5) / 32)
    assert ds["u"].dims == ("sample", "x", "y") and ds.attrs["beta"] == 1.0
    again = generate_darcy(3, n_grid=32, seed=0)
    assert again["u"].values.tobytes() == ds["u"].values.tobytes()
    shard = generate_darcy(3, n_grid=32, seed=0, samples=[2])
    assert shard["u"].values.tobytes() == ds["u"].isel(sample=[2]).values.tobytes()
    x = cell_centres(16)
    assert not np.array_equal(darcy_coefficient(np.random.default_rng(1), x),
                              darcy_coefficient(np.random.default_rng(2), x))


@pytest.mark.parametrize("call, message", [
    (lambda: solve_darcy(np.ones((4, 5))), r"a: expected a square \(n, n\) coefficient field, found shape \(4, 5\)"),
    (lambda: solve_darcy(np.zeros((4, 4))), "a: expected positive coefficients"),
    (lambda: generate_darcy(2, beta=-1.0), "beta: expected a positive forcing"),
    (lambda: generate_darcy(2, n_grid=1), "n_grid: expected at least 2"),
])
def test_invalid_input(call, message):
    with pytest.raises(ValueError, match=message):
        call()
