"""Kirchhoff Neural Cell: scan vs step loop, gradcheck, exact ZOH, contraction, irregular dt, Eq. 46."""

import numpy as np
import pytest
import torch

from circuitop import KirchhoffCell, selective_scan, zoh_coefficients


def _cell(d_inner=4, d_state=3, seed=0, dtype=torch.float64):
    torch.manual_seed(seed)
    return KirchhoffCell(d_inner, d_state=d_state).to(dtype)


def _randn(*shape, seed=0, dtype=torch.float64):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-5), (torch.float64, 1e-12)])
@pytest.mark.parametrize("irregular", [False, True])
def test_scan_matches_step_loop_values_and_grads(dtype, tol, irregular):
    cell = _cell(dtype=dtype)
    u = _randn(2, 50, 4, dtype=dtype).requires_grad_()
    dt = (0.5 + torch.rand(2, 50, generator=torch.Generator().manual_seed(1))).to(dtype) if irregular else None
    weight = _randn(2, 50, 4, seed=2, dtype=dtype)
    params = [u] + list(cell.parameters())
    results = []
    for run in (cell.forward, cell.forward_ref):
        y = run(u, dt)
        results.append([y] + list(torch.autograd.grad((y * weight).sum(), params)))
    for fast, ref in zip(*results):
        torch.testing.assert_close(fast, ref, rtol=tol, atol=tol)


def test_unfused_path_with_initial_state_matches_step_loop():
    """With ``v0`` or ``return_state`` the cell scans ᾱ and β̄ u through autograd (not the fused
    function): values, states and gradients still equal the step loop's."""
    cell = _cell()
    u = _randn(2, 40, 4).requires_grad_()
    v0 = _randn(2, 4, 3, seed=3).requires_grad_()
    results = []
    for run in (cell.forward, cell.forward_ref):
        y, v = run(u, v0=v0, return_state=True)
        results.append([y, v] + list(torch.autograd.grad(y.sum() + v.square().sum(), [u, v0, cell.log_lam])))
    for fast, ref in zip(*results):
        torch.testing.assert_close(fast, ref, rtol=1e-12, atol=1e-12)


def test_gradcheck_tiny_cell():
    """Gradients w.r.t. the input, the step sizes and every parameter (log λ, W_Δ, b_Δ, W_b, W_c, d)."""
    cell = _cell(d_inner=2, d_state=2)
    u = _randn(1, 6, 2).requires_grad_()
    dt = (0.5 + torch.rand(1, 6, dtype=torch.float64)).requires_grad_()
    names = [name for name, _ in cell.named_parameters()]
    params = tuple(p.detach().clone().requires_grad_() for p in cell.parameters())

    def run(u, dt, *values):
        return torch.func.functional_call(cell, dict(zip(names, values)), (u, dt))

    assert torch.autograd.gradcheck(run, (u, dt) + params)


def test_zoh_is_exact_for_constant_input():
    """For constant u, the discrete state equals the exact solution of dv/dt = -λ v + b u, v(0) = 0:
    v(t) = (b u / λ)(1 - exp(-λ t)) at the sample times t_k = Σ Δ_j, for any (irregular) steps (Eq. 20)."""
    cell = _cell(d_inner=3, d_state=4)
    delta0 = 0.3
    with torch.no_grad():  # fixed Δ = delta0 (W_Δ = 0, softplus(b_Δ) = delta0)
        cell.delta_proj.weight.zero_()
        cell.delta_proj.bias.fill_(np.log(np.expm1(delta0)))
    u = torch.full((1, 40, 3), 0.7, dtype=torch.float64)
    dt = 0.1 + 2 * torch.rand(1, 40, dtype=torch.float64)
    _, v = cell(u, dt, return_state=True)
    t = torch.cumsum(delta0 * dt, dim=1)[..., None, None]  # (1, 40, 1, 1)
    lam, b = cell.lam, cell.b_proj(u)[:, :, None, :]  # (3, 4), (1, 40, 1, 4)
    exact = b * u[..., None] / lam * (1 - torch.exp(-lam * t))
    torch.testing.assert_close(v, exact, rtol=1e-12, atol=1e-12)


def test_euler_injection_would_not_be_exact():
    """The ZOH factor (1 - e^{-Δλ})/λ is not Mamba's Euler factor Δ (they agree only as Δλ -> 0)."""
    delta, lam = torch.tensor(0.5, dtype=torch.float64), torch.tensor(2.0, dtype=torch.float64)
    alpha_bar, inject = zoh_coefficients(delta, lam)
    assert float(alpha_bar) == pytest.approx(np.exp(-1.0), rel=1e-14)
    assert float(inject) == pytest.approx((1 - np.exp(-1.0)) / 2.0, rel=1e-14)
    assert abs(float(inject) - 0.5) > 0.1
    small = zoh_coefficients(torch.tensor(1e-12, dtype=torch.float64), lam)[1]
    assert float(small) == pytest.approx(1e-12, rel=1e-9)  # expm1: no cancellation for tiny Δλ


def test_retention_is_contractive():
    """0 < ᾱ < 1 for λ > 0 and Δ > 0 (Eq. 21), over random inputs and irregular steps."""
    cell = _cell(d_inner=8, d_state=16, dtype=torch.float32)
    u = 3 * _randn(4, 200, 8, dtype=torch.float32)
    dt = 0.01 + torch.rand(4, 200)
    alpha_bar, _, _ = cell.coefficients(u, dt)
    assert bool((alpha_bar > 0).all()) and bool((alpha_bar < 1).all())


def test_equal_steps_match_regular_sampling_and_unequal_differ():
    cell = _cell()
    u = _randn(2, 30, 4)
    torch.testing.assert_close(cell(u, torch.ones(2, 30, dtype=torch.float64)), cell(u), rtol=0, atol=0)
    dt = torch.ones(2, 30, dtype=torch.float64)
    dt[:, 10:] = 3.0
    assert (cell(u, dt) - cell(u)).abs().max() > 1e-3
    torch.testing.assert_close(cell(u, dt)[:, :10], cell(u)[:, :10], rtol=1e-13, atol=1e-13)  # causal


def _stage_filter(u, a, b, c, d):
    """Fixed-coefficient KNC of Eq. 44: v_t = a v_{t-1} + b u_t, y_t = c v_t + d u_t."""
    v = selective_scan(torch.full_like(u, a), b * u)
    return c * v + d * u


def test_cascade_impulse_response_is_convolution_of_stages():
    """Eq. 46: the N-stage transfer function is the product of the stages' d + c b / (1 - a z^-1),
    so the cascade's impulse response is the convolution of the stages' impulse responses."""
    length = 64
    impulse = torch.zeros(1, length, 1, dtype=torch.float64)
    impulse[0, 0, 0] = 1.0
    stages = [(0.9, 0.5, 1.3, 0.2), (0.5, -1.0, 0.7, 0.0), (0.95, 0.3, 0.4, -0.6)]
    y, expected = impulse, np.array([1.0])
    for a, b, c, d in stages:
        y = _stage_filter(y, a, b, c, d)
        k = np.arange(length)
        single = c * b * a**k + d * (k == 0)  # impulse response of d + c b / (1 - a z^-1)
        expected = np.convolve(expected, single)[:length]
    np.testing.assert_allclose(y[0, :, 0].numpy(), expected, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize(
    "shape, dt_shape, match",
    [
        ((2, 5), None, r"u: expected shape \(batch, time, 4\)"),
        ((2, 5, 3), None, r"u: expected shape \(batch, time, 4\)"),
        ((2, 5, 4), (2, 4), r"dt: expected shape"),
    ],
)
def test_bad_shapes_raise(shape, dt_shape, match):
    cell = _cell()
    dt = None if dt_shape is None else torch.ones(dt_shape, dtype=torch.float64)
    with pytest.raises(ValueError, match=match):
        cell(torch.zeros(shape, dtype=torch.float64), dt)


def test_dt_of_another_dtype_is_cast():
    cell = _cell(dtype=torch.float32)
    u = _randn(2, 5, 4, dtype=torch.float32)
    dt = torch.full((2, 5), 0.5, dtype=torch.float64)
    torch.testing.assert_close(cell(u, dt), cell(u, dt.float()))


def test_non_positive_dt_and_nan_raise():
    cell = _cell()
    u = _randn(2, 5, 4)
    dt = torch.ones(2, 5, dtype=torch.float64)
    dt[1, 3] = 0.0
    with pytest.raises(ValueError, match="dt: expected positive"):
        cell(u, dt)
    u[0, 2, 1] = float("nan")
    with pytest.raises(ValueError, match="u: expected finite"):
        cell(u)


@pytest.mark.parametrize("values", [(1.0, float("nan")), (float("inf"), float("nan")), (float("inf"), float("-inf"))])
def test_nan_check_is_exact(values):
    """The check's fast path (a finite sum) and its exact path agree: NaN raises, infinities alone do not."""
    from circuitop.knc import check_input

    u = torch.zeros(1, 4, 2)
    u[0, 1, 0], u[0, 3, 1] = values
    if any(np.isnan(values)):
        with pytest.raises(ValueError, match="found NaN"):
            check_input(u, 2, "u")
    else:
        check_input(u, 2, "u")


def test_constructor_validates():
    with pytest.raises(ValueError, match="dt_min"):
        KirchhoffCell(4, dt_min=0.1, dt_max=0.01)
    with pytest.raises(ValueError, match="d_state"):
        KirchhoffCell(4, d_state=0)
