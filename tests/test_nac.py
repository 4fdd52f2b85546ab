"""NAC layer: pair-dependent gates, gradients in every mode, ODE solutions, Theorem 1, masks, reference, SDPA."""

import math

import numpy as np
import pytest
import torch
import xarray as xr

from circuitop import NeuronalAttentionCircuit, nac_attention_ref, sequence_timestamps
from circuitop.nac_ode import nac_logits

MODES = ["exact", "euler", "steady"]


def _layer(seed=0, **kw):
    torch.manual_seed(seed)
    kw.setdefault("topk", 4)
    return NeuronalAttentionCircuit(16, 2, **kw)


def _x(b=2, t=24, seed=1):
    return torch.randn(b, t, 16, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("mode", MODES)
def test_phi_omega_vary_across_pairs(mode):
    _, att = _layer(mode=mode)(_x(), return_attention=True)
    for name in ("phi", "omega", "logits"):
        per_query_spread = att[name].std(-1)  # across the keys of one query
        assert per_query_spread.min() > 1e-4, name
        assert att[name].std() > 1e-3, name
    assert not torch.allclose(att["weights"], torch.full_like(att["weights"], 0.25))


@pytest.mark.parametrize("topk", [4, None])
@pytest.mark.parametrize("mode", MODES)
def test_every_parameter_gets_gradient(mode, topk):
    layer = _layer(mode=mode, topk=topk)
    y = layer(_x())
    (y * torch.randn_like(y)).sum().backward()
    for name, p in layer.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_steady_is_exact_as_t_grows_and_corollary_1():
    phi, omega = torch.rand(1000) * 0.98 + 0.01, torch.rand(1000) * 3 + 1e-2
    steady = nac_logits(phi, omega, torch.ones(1), mode="steady")
    for t in [0.1, 1.0, 10.0]:
        gap = (nac_logits(phi, omega, torch.tensor(t), mode="exact") - steady).abs()
        torch.testing.assert_close(gap, steady.abs() * torch.exp(-omega * t))  # Eq. 8 with a0 = 0
    torch.testing.assert_close(nac_logits(phi, omega, torch.tensor(1e4), mode="exact"), steady)


def test_euler_converges_to_exact_first_order():
    _, att = _layer(mode="euler")(_x(), return_attention=True)
    phi, omega = att["phi"].detach().double(), att["omega"].detach().double()
    horizon = 2.5
    exact = nac_logits(phi, omega, torch.tensor(horizon, dtype=torch.float64), mode="exact")
    steps = np.array([20, 40, 80, 160, 320])
    errors = [(nac_logits(phi, omega, None, mode="euler", euler_steps=int(n), delta_t=horizon / n)
               - exact).abs().max().item() for n in steps]
    slope = np.polyfit(np.log(horizon / steps), np.log(errors), 1)[0]
    assert 0.9 < slope < 1.1, (slope, errors)


@pytest.mark.parametrize("mode", ["exact", "euler"])
def test_logits_within_theorem_1_bounds(mode):
    _, att = _layer(mode=mode, topk=None)(_x(), return_attention=True)
    a, eq = att["logits"], att["phi"] / att["omega"]
    if mode == "euler":
        assert (0.5 * att["omega"]).max() <= 1.0  # Δt·ω ≤ 1: the Euler map is monotone (Eq. 46)
    tol = 1e-6
    assert (a >= torch.minimum(torch.zeros_like(eq), eq) - tol).all()
    assert (a <= torch.maximum(torch.zeros_like(eq), eq) + tol).all()


@pytest.mark.parametrize("topk", [4, None])
def test_weights_sum_to_one_and_masked_keys_get_zero_weight(topk):
    layer, x = _layer(topk=topk), _x()
    mask = torch.ones(2, 24, dtype=torch.bool)
    mask[0, 5:9] = False
    mask[1, 20:] = False
    y, att = layer(x, mask=mask, return_attention=True)
    torch.testing.assert_close(att["weights"].sum(-1), torch.ones(att["weights"].shape[:-1]))
    key_ok = torch.gather(mask[:, None, None, :].expand(-1, 2, 24, -1), 3, att["indices"])
    assert (att["weights"][~key_ok] == 0).all()
    x2 = x.clone()
    x2[~mask] = torch.randn(int((~mask).sum()), 16) * 5  # padded content must not matter (as keys)
    y2 = layer.forward_cross(x, x2, x2, mask=mask)
    torch.testing.assert_close(y2, y)


@pytest.mark.parametrize("topk", [4, None])
def test_causal_future_keys_zero_weight_and_no_leak(topk):
    layer, x = _layer(topk=topk, causal=True), _x(t=30)
    y, att = layer(x, return_attention=True)
    query = torch.arange(30)[None, None, :, None]
    assert (att["weights"][att["indices"] > query] == 0).all()
    torch.testing.assert_close(att["weights"].sum(-1), torch.ones(att["weights"].shape[:-1]))
    x2 = x.clone()
    x2[:, 17:] = torch.randn(2, 13, 16)
    torch.testing.assert_close(layer(x2)[:, :17], y[:, :17])


@pytest.mark.parametrize("mode", MODES)
def test_all_pairs_equals_dense_reference_values_and_gradients(mode):
    layer, x = _layer(mode=mode, topk=None).double(), _x().double()
    stamps = torch.rand(2, 24, dtype=torch.float64).cumsum(1)
    mask = torch.ones(2, 24, dtype=torch.bool)
    mask[1, -3:] = False
    q, k, v = layer.project(x, x, x)
    out, att = layer.attend(q, k, v, t_sample=stamps, key_valid=mask)
    ref, ref_att = nac_attention_ref(q, k, v, layer.backbone, layer.time_map, mode=mode, t_sample=stamps,
                                     key_valid=mask)
    torch.testing.assert_close(out, ref)
    for name in ("phi", "omega", "time", "logits", "weights"):
        torch.testing.assert_close(att[name], ref_att[name])
    g = torch.randn_like(out)
    grads = torch.autograd.grad((out * g).sum(), list(layer.parameters()), allow_unused=True,
                                retain_graph=True)
    grads_ref = torch.autograd.grad((ref * g).sum(), list(layer.parameters()), allow_unused=True)
    for a, b in zip(grads, grads_ref):
        torch.testing.assert_close(a, b)


def test_topk_covering_all_keys_equals_reference():
    layer = _layer(topk=64)  # K >= T_k: every key selected, in score order
    x = _x()
    q, k, v = layer.project(x, x, x)
    out, _ = layer.attend(q, k, v)
    ref, _ = nac_attention_ref(q, k, v, layer.backbone, layer.time_map)
    torch.testing.assert_close(out, ref)


class _BilinearBackbone(torch.nn.Module):
    """Linear first layer (identity: pre = [q; k]) and a bilinear read-out φ = uᵀ M u = q·k/√D, ω = 1."""

    def __init__(self, d):
        super().__init__()
        self.d = d

    def query_part(self, q):
        return torch.cat([q, torch.zeros_like(q)], -1)

    def key_part(self, k):
        return torch.cat([torch.zeros_like(k), k], -1)

    def gates(self, u):
        m = torch.zeros(2 * self.d, 2 * self.d, dtype=u.dtype)
        m[: self.d, self.d:] = torch.eye(self.d) / (2 * math.sqrt(self.d))
        m = m + m.T
        phi = torch.einsum("...i,ij,...j->...", u, m, u)
        return phi, torch.ones_like(phi)


class _UnitTime(torch.nn.Module):
    def query_part(self, q):
        return q[..., :1]

    def key_part(self, k):
        return k[..., :1]

    def pair_time(self, pair, t_sample):
        return torch.ones_like(pair[..., 0])


def test_steady_with_bilinear_linear_backbone_is_scaled_dot_product_attention():
    layer = _layer(mode="steady", topk=None).double()
    layer.backbone, layer.time_map = _BilinearBackbone(8), _UnitTime()
    x = _x().double()
    q, k, v = layer.project(x, x, x)
    sdpa = torch.nn.functional.scaled_dot_product_attention(q, k, v)
    expected = layer.out_proj(sdpa.transpose(1, 2).reshape(2, 24, 16))
    torch.testing.assert_close(layer(x), expected)


def test_irregular_timestamps_from_xarray():
    times = np.sort(np.random.default_rng(0).uniform(0, 10, (2, 24)), axis=1)
    ds = xr.Dataset({"u": (("sample", "time"), np.zeros((2, 24)))},
                    coords={"time": (("sample", "time"), times)})
    stamps = sequence_timestamps(ds)
    torch.testing.assert_close(stamps, torch.as_tensor(times - times[:, :1], dtype=torch.float32))
    layer, x = _layer(), _x()
    assert not torch.allclose(layer(x, t=stamps), layer(x))


def test_cross_attention_shapes():
    layer = _layer()
    y, att = layer.forward_cross(_x(t=7), _x(t=19, seed=2), _x(t=19, seed=3), return_attention=True)
    assert y.shape == (2, 7, 16) and att["indices"].shape == (2, 2, 7, 4)


@pytest.mark.parametrize("kwargs, match", [
    (dict(d_model=15, num_heads=2), "d_model"),
    (dict(d_model=16, num_heads=2, topk=0), "topk"),
    (dict(d_model=16, num_heads=2, mode="rk4"), "mode"),
    (dict(d_model=16, num_heads=2, block_multiple=0.5), "block_multiple"),
])
def test_bad_configuration(kwargs, match):
    with pytest.raises(ValueError, match=match):
        NeuronalAttentionCircuit(**kwargs)


def test_bad_inputs():
    layer, x = _layer(), _x()
    with pytest.raises(ValueError, match="t: expected shape"):
        layer(x, t=torch.ones(2, 23))
    bad = x.clone()
    bad[0, 3, 2] = float("nan")
    with pytest.raises(ValueError, match="x: expected finite"):
        layer(bad)
    with pytest.raises(ValueError, match=r"x: expected shape \(2, 24, 16\)"):
        layer(torch.randn(2, 24, 12))
    with pytest.raises(ValueError, match="key: expected shape"):
        layer.forward_cross(x, x[0], x)
    with pytest.raises(ValueError, match="mask"):
        layer(x, mask=torch.ones(2, 24))


@pytest.mark.parametrize("topk", [3, None])
def test_gradcheck_float64(topk):
    torch.manual_seed(0)
    layer = NeuronalAttentionCircuit(4, 2, topk=topk, causal=True).double()
    x = torch.randn(1, 6, 4, dtype=torch.float64, requires_grad=True)
    stamps = torch.rand(1, 6, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, s: layer(a, t=s), (x, stamps))
