"""CHONN metrics (Eqs. 48-50, 55, 59-61): analytic cases, properties, input types, bad input."""

import math

import numpy as np
import pytest
import torch
import xarray as xr
from torch.overrides import TorchFunctionMode

from evaluation import (max_mse, nrmse_range, phm_score, rel_h1, rel_l1, rel_l2, rel_l2_derivative, rel_l2_spectral,
                        rollout_errors)

N = 32
GRID = np.arange(N) / N
ALL = [rel_l2, rel_l2_spectral, rel_l2_derivative, rel_l1, nrmse_range, max_mse]
RELATIVE = [rel_l2, rel_l2_spectral, rel_l2_derivative, rel_l1, nrmse_range]


def _random(shape, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=shape), rng.normal(size=shape) + 2.0


# --- analytic cases -----------------------------------------------------------------------------

def test_single_fourier_mode_rel_l2_and_spectral():
    """true = 1 + cos(2πkx), e = a·sin(2πkx): ‖e‖/‖true‖ = a/√3, one-sided spectra give a/√5."""
    a, k = 0.3, 3
    true = (1 + np.cos(2 * np.pi * k * GRID))[None]
    pred = true + a * np.sin(2 * np.pi * k * GRID)
    assert rel_l2(pred, true) == pytest.approx(a / np.sqrt(3), rel=1e-12)
    assert rel_l2_spectral(pred, true) == pytest.approx(a / np.sqrt(5), rel=1e-12)


def test_spectral_matches_two_sided_spectrum_with_rfft_weighting():
    """‖rfftn(e)‖² is the two-sided ‖fftn(e)‖² restricted to last-axis modes 0..n//2."""
    pred, true = _random((3, 6, 9, 10))
    axes = (1, 2, 3)

    def one_sided_norm(x):
        full = np.fft.fftn(x, axes=axes)[..., : x.shape[-1] // 2 + 1]
        return np.sqrt((np.abs(full) ** 2).sum(axis=axes))

    expected = one_sided_norm(pred - true) / one_sided_norm(true)
    got = rel_l2_spectral(pred, true, reduce="none")
    np.testing.assert_allclose(got, expected, rtol=1e-12)
    # ... and it differs from rel_l2, which equals the two-sided ratio (Parseval).
    two_sided = np.sqrt((np.abs(np.fft.fftn(pred - true, axes=axes)) ** 2).sum(axis=axes)
                        / (np.abs(np.fft.fftn(true, axes=axes)) ** 2).sum(axis=axes))
    np.testing.assert_allclose(rel_l2(pred, true, reduce="none"), two_sided, rtol=1e-12)
    assert np.all(np.abs(got - two_sided) > 1e-4)


def test_derivative_of_periodic_mode_and_offset():
    """e = a·cos(θi) against true = sin(θi): central differences scale both by sin θ, ratio a."""
    theta, a = 2 * np.pi * 2 / N, 0.25
    true = np.sin(theta * np.arange(N))[None]
    pred = true + a * np.cos(theta * np.arange(N))
    assert rel_l2_derivative(pred, true) == pytest.approx(a, rel=1e-12)
    assert rel_l2_derivative(true + 5.0, true) == pytest.approx(0.0, abs=1e-14)
    assert rel_l2(true + 5.0, true) > 1


def test_derivative_non_periodic_ramp_is_exact():
    """true = x², e = x (a linear ramp): edge_order=2 differences are exact, ∇e = 1, ∇true = 2x."""
    x = np.linspace(0.0, 1.0, N)
    true, pred = (x**2)[None], (x**2 + x)[None]
    h = x[1] - x[0]
    expected = np.sqrt(N * h**2 / np.sum((2 * x * h) ** 2))
    assert rel_l2_derivative(pred, true, periodic=False) == pytest.approx(expected, rel=1e-10)
    ref = np.linalg.norm(np.gradient(pred[0] - true[0], edge_order=2)) / np.linalg.norm(
        np.gradient(true[0], edge_order=2))
    assert rel_l2_derivative(pred, true, periodic=False) == pytest.approx(ref, rel=1e-12)


def test_derivative_2d_matches_numpy_gradient():
    pred, true = _random((2, 7, 9))
    for b in range(2):
        ref_e = np.stack(np.gradient(pred[b] - true[b], edge_order=2))
        ref_t = np.stack(np.gradient(true[b], edge_order=2))
        got = rel_l2_derivative(pred, true, periodic=False, reduce="none")[b]
        assert got == pytest.approx(np.linalg.norm(ref_e) / np.linalg.norm(ref_t), rel=1e-12)


def test_rel_l1_nrmse_range_max_mse_by_hand():
    true = np.linspace(0.0, 2.0, N)[None]          # a linear ramp: range 2
    pred = true + 0.1
    assert nrmse_range(pred, true) == pytest.approx(0.1 / 2.0)
    ones = np.ones((1, 8))
    half = ones.copy()
    half[0, :4] += 0.5
    assert rel_l1(half, ones) == pytest.approx(0.25)
    spike = np.zeros((2, 5))
    spike[0, 2], spike[1, 4] = -3.0, 1.0
    assert max_mse(spike, np.zeros((2, 5)), reduce="none").tolist() == [9.0, 1.0]


# --- properties ---------------------------------------------------------------------------------

@pytest.mark.parametrize("metric", ALL)
def test_metric_of_identical_inputs_is_zero(metric):
    _, true = _random((3, 8, 8))
    assert metric(true, true) == 0.0


@pytest.mark.parametrize("metric", RELATIVE)
def test_relative_metrics_are_invariant_to_scaling_both(metric):
    pred, true = _random((3, 8, 8))
    np.testing.assert_allclose(metric(3.7 * pred, 3.7 * true, reduce="none"),
                               metric(pred, true, reduce="none"), rtol=1e-12)


def test_max_mse_scales_quadratically():
    pred, true = _random((3, 8, 8))
    assert max_mse(2 * pred, 2 * true) == pytest.approx(4 * max_mse(pred, true))


def test_reductions():
    pred, true = _random((5, 8))
    values = rel_l2(pred, true, reduce="none")
    assert values.shape == (5,)
    assert rel_l2(pred, true, reduce="mean") == pytest.approx(values.mean())
    assert rel_l2(pred, true, reduce="median") == pytest.approx(np.median(values))
    t = rel_l2(torch.tensor(pred[:4]), torch.tensor(true[:4]), reduce="median")
    assert float(t) == pytest.approx(np.median(values[:4]))  # even count: numpy's midpoint rule


# --- numpy / torch / xarray ---------------------------------------------------------------------

@pytest.mark.parametrize("metric", ALL)
def test_numpy_torch_xarray_agree(metric):
    pred, true = _random((4, 8, 10))
    expected = metric(pred, true, reduce="none")
    got_torch = metric(torch.tensor(pred), torch.tensor(true), reduce="none")
    assert isinstance(got_torch, torch.Tensor) and got_torch.dtype == torch.float64
    np.testing.assert_allclose(got_torch.numpy(), expected, rtol=1e-12)
    got32 = metric(torch.tensor(pred, dtype=torch.float32), true, reduce="none")
    assert got32.dtype == torch.float32
    np.testing.assert_allclose(got32.numpy(), expected, rtol=1e-4)
    dims = ("sample", "x", "y")
    got_xr = metric(xr.DataArray(pred, dims=dims), xr.DataArray(true, dims=dims), reduce="none")
    np.testing.assert_allclose(got_xr, expected, rtol=1e-12)


def test_dataset_variables_are_channels_and_order_is_by_name():
    pred, true = _random((3, 2, 8))
    dims = ("sample", "x")
    ds_pred = xr.Dataset({"u": (dims, pred[:, 0]), "v": (dims, pred[:, 1])})
    ds_true = xr.Dataset({"v": (dims, true[:, 1]), "u": (dims, true[:, 0])})  # other order
    assert rel_l2(ds_pred, ds_true) == pytest.approx(rel_l2(pred, true))
    assert rel_l1(ds_pred.transpose("x", "sample"), ds_true) == pytest.approx(rel_l1(pred, true))


# --- torch as a training loss -------------------------------------------------------------------

@pytest.mark.parametrize("metric", [rel_l2, rel_l1])
def test_gradients_flow_and_match_finite_differences(metric):
    gen = torch.Generator().manual_seed(0)
    pred = torch.randn(3, 4, 5, dtype=torch.float64, generator=gen, requires_grad=True)
    true = torch.randn(3, 4, 5, dtype=torch.float64, generator=gen)
    loss = metric(pred, true)
    assert loss.ndim == 0 and loss.requires_grad
    loss.backward()
    assert torch.isfinite(pred.grad).all() and pred.grad.abs().sum() > 0
    assert torch.autograd.gradcheck(lambda p: metric(p, true), (pred.detach().requires_grad_(),))


def test_rel_l2_gradient_at_a_perfect_prediction_is_finite():
    true = torch.randn(2, 6, dtype=torch.float64)
    pred = true.clone().requires_grad_()
    rel_l2(pred, true).backward()
    assert torch.isfinite(pred.grad).all()


# --- bad input ----------------------------------------------------------------------------------

def test_shape_mismatch_names_both_shapes():
    with pytest.raises(ValueError, match=r"pred shape \(2, 8\).*true shape \(2, 9\)"):
        rel_l2(np.ones((2, 8)), np.ones((2, 9)))


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_non_finite_values_name_the_argument(bad):
    x = np.ones((2, 8))
    y = x.copy()
    y[1, 3] = bad
    with pytest.raises(ValueError, match=r"pred: expected finite.*\(2, 8\)"):
        rel_l1(y, x)
    with pytest.raises(ValueError, match=r"true: expected finite"):
        rel_l2(torch.tensor(x), torch.tensor(y))


def test_empty_and_mismatched_xarray_and_bad_reduce():
    with pytest.raises(ValueError, match=r"non-empty.*\(0, 4\)"):
        rel_l2(np.ones((0, 4)), np.ones((0, 4)))
    a = xr.DataArray(np.ones((2, 8)), dims=("sample", "x"))
    b = xr.DataArray(np.ones((2, 8)), dims=("sample", "y"))
    with pytest.raises(ValueError, match=r"pred dims \{'sample': 2, 'x': 8\}.*true dims \{'sample': 2, 'y': 8\}"):
        rel_l2(a, b)
    with pytest.raises(ValueError, match="both xarray or both arrays"):
        rel_l2(a, np.ones((2, 8)))
    with pytest.raises(ValueError, match=r"reduce: expected one of.*'sum'"):
        rel_l2(np.ones((2, 8)), np.ones((2, 8)), reduce="sum")
    with pytest.raises(ValueError, match="at least 3 points"):
        rel_l2_derivative(np.ones((2, 2)), np.ones((2, 2)))


# --- PHM score (NAC Eq. 58) and rollouts --------------------------------------------------------

def test_phm_score_by_hand():
    true = np.array([50.0, 50.0, 50.0, 50.0])
    pred = np.array([37.0, 50.0, 60.0, 48.0])          # d = -13, 0, 10, -2
    expected = (np.e - 1) + 0.0 + (np.e - 1) + (np.exp(2 / 13) - 1)
    assert phm_score(pred, true) == pytest.approx(expected, rel=1e-12)
    assert phm_score(pred, true, reduce="mean") == pytest.approx(expected / 4, rel=1e-12)
    terms = phm_score(torch.tensor(pred), torch.tensor(true), reduce="none")
    np.testing.assert_allclose(terms.numpy(), [np.e - 1, 0.0, np.e - 1, np.exp(2 / 13) - 1], rtol=1e-12)
    assert phm_score(np.array([55.0]), np.array([50.0])) > phm_score(np.array([45.0]), np.array([50.0]))
    with pytest.raises(ValueError, match="reduce"):
        phm_score(pred, true, reduce="median")


def test_rollout_errors_per_step():
    _, true = _random((3, 6, 8, 8))
    growth = 0.01 * np.arange(6)[None, :, None, None]
    per_step, mean = rollout_errors(true * (1 + growth), true)
    np.testing.assert_allclose(per_step, 0.01 * np.arange(6), atol=1e-14)
    assert mean == pytest.approx(0.025)
    pred = true + np.random.default_rng(3).normal(size=true.shape)
    per_step, _ = rollout_errors(pred, true, metric=rel_l1, reduce="median")
    expected = [rel_l1(pred[:, t], true[:, t], reduce="median") for t in range(6)]
    np.testing.assert_allclose(per_step, expected, rtol=1e-12)
    dims = ("sample", "time", "x", "y")
    got_xr, _ = rollout_errors(xr.DataArray(pred, dims=dims), xr.DataArray(true, dims=dims))
    np.testing.assert_allclose(got_xr, rollout_errors(pred, true)[0], rtol=1e-12)
    got_t, mean_t = rollout_errors(torch.tensor(pred), torch.tensor(true))
    assert isinstance(got_t, torch.Tensor) and got_t.shape == (6,) and mean_t.ndim == 0
    with pytest.raises(ValueError, match="'time' dim"):
        rollout_errors(xr.DataArray(pred[:, 0], dims=dims[::2] + ("y",)),
                       xr.DataArray(true[:, 0], dims=dims[::2] + ("y",)))


class _LeavesTheDevice(TorchFunctionMode):
    """Records every torch call that takes a tensor out of torch or off ``device``: ``.cpu()``, ``.cuda()``,
    ``.numpy()``, ``np.asarray``, ``.tolist()``, ``.item()``, and any call whose tensor result lies elsewhere.
    Under ``torch.device("meta")`` a tensor made without ``device=`` lands on "meta", so it is caught too."""

    _EXITS = {torch.Tensor.cpu, torch.Tensor.cuda, torch.Tensor.numpy, torch.Tensor.__array__,
              torch.Tensor.tolist, torch.Tensor.item}

    def __init__(self, device: torch.device):
        super().__init__()
        self.device, self.found = device, []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        results = out if isinstance(out, (tuple, list)) else (out,)
        elsewhere = [r.device for r in results if isinstance(r, torch.Tensor) and r.device != self.device]
        if func in self._EXITS or elsewhere:
            self.found.append(f"{getattr(func, '__name__', func)} -> {elsewhere or 'out of torch'}")
        return out


def _h1_periodic(pred, true):
    return rel_h1(pred, true, periodic=True)


def _rollout_mean(pred, true):
    return rollout_errors(pred, true)[1]


ON_TENSORS = [*ALL, rel_h1, _h1_periodic, phm_score, _rollout_mean]
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(),
                                                                 reason="needs a CUDA device"))]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=str)
@pytest.mark.parametrize("metric", ON_TENSORS, ids=lambda m: m.__name__)
def test_tensors_stay_on_their_device_dtype_and_graph(metric, dtype, device):
    """Tensors in: every step stays in torch on the inputs' device (no numpy round trip, no tensor made
    without ``device=``), the result keeps their dtype and its gradient reaches ``pred``; a numpy ``true``
    joins ``pred``'s device and dtype. Checked on the CPU as well: ``_LeavesTheDevice`` under a "meta"
    default device sees what a CUDA run would trip over."""
    pred, true = _random((3, 4, 8, 8))  # (sample, time or channel, x, y)
    expected = metric(pred, true)
    tensor_pred = torch.tensor(pred, dtype=dtype, device=device, requires_grad=True)
    tensor_true = torch.tensor(true, dtype=dtype, device=device)
    with _LeavesTheDevice(tensor_pred.device) as spy, torch.device("meta"):
        value = metric(tensor_pred, tensor_true)
        with_numpy = metric(tensor_pred, true)
        value.backward()
    assert spy.found == []
    for result in (value, with_numpy):
        assert isinstance(result, torch.Tensor) and result.device == tensor_pred.device and result.dtype == dtype
        assert result.ndim == 0 and result.grad_fn is not None
        assert result.item() == pytest.approx(expected, rel=1e-12 if dtype == torch.float64 else 1e-4)
    grad = tensor_pred.grad
    assert grad.device == tensor_pred.device and grad.dtype == dtype and bool(grad.abs().sum() > 0)


def test_finite_checks_can_be_turned_off_for_a_training_loop():
    """The trainer's losses skip the NaN/Inf refusal (it checks the losses itself, every 20 steps, without a device
    sync per step): inside the block a NaN reaches the value; outside it is refused again."""
    import evaluation

    pred, true = torch.tensor([[1.0, math.nan]]), torch.ones(1, 2)
    with pytest.raises(ValueError, match="pred: expected finite values"):
        rel_l2(pred, true)
    with evaluation.finite_checks(False):
        assert math.isnan(float(rel_l2(pred, true)))
    with pytest.raises(ValueError, match="pred: expected finite values"):
        rel_l2(pred, true)
