"""Backbones: shapes at two resolutions, the FNO-paper mode convention, order 0 = host, the registry."""

import math

import pytest
import torch

import operators
from operators.models import SpectralFNO, SpectralFNOConfig, UNet, UNetConfig
from operators.models.fno import neuralop_modes
from operators.models.hosts import Coarsened
from neuralop.layers.spectral_convolution import SpectralConv

TINY_FNO = dict(n_modes=4, width=8, n_layers=2)
TINY_UNET = dict(n_layers=2, n_res=1, n_res_neck=1, channel_multiplier=8)
TINY_ORDER = dict(d_model=8, d_state=4, expand=2)

CASES = [
    ("fno", TINY_FNO, 2),
    ("unet", TINY_UNET, 2),
    ("chonn_fno", {**TINY_FNO, "order": 2, "d_state": 4}, 2),
    ("chonn_unet", {**TINY_UNET, "order": 2, "d_state": 4}, 2),
    ("nac_fno", {**TINY_FNO, "num_heads": 2, "topk": 4}, 2),
    ("nac_unet", {**TINY_UNET, "num_heads": 2, "topk": 4}, 2),
    ("fno", {**TINY_FNO, "n_dim": 1}, 1),
    ("unet", {**TINY_UNET, "n_dim": 1}, 1),
    ("ckb_chain", {**TINY_ORDER, "order": 3}, 1),
    ("depth_stack", {**TINY_ORDER, "depth": 2}, 1),
    ("ckb_stack", {**TINY_ORDER, "order": 2, "n_blocks": 2}, 1),
]


@pytest.mark.parametrize("name,config,n_dim", CASES, ids=[f"{c[0]}-{c[2]}d" for c in CASES])
def test_model_runs_at_two_resolutions(name, config, n_dim):
    torch.manual_seed(0)
    model = operators.build(name, 3, 2, **config)
    for n in (16, 32):
        x = torch.randn(2, 3, *([n] * n_dim))
        y = model(x)
        assert y.shape == (2, 2, *([n] * n_dim))
        assert torch.isfinite(y).all()
    y.square().mean().backward()
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)


def test_n_modes_means_modes_per_dimension_as_in_the_fno_paper():
    """k = 4 keeps wavenumbers -4..3 on x and 0..3 on y (last, real-FFT axis)."""
    torch.manual_seed(0)
    conv = SpectralConv(1, 1, neuralop_modes((4, 4)), bias=False)
    with torch.no_grad():
        for p in conv.parameters():  # the dense spectral weight (a tltorch DenseTensor's one tensor)
            p.fill_(1.0)
    n = 16
    x, y = torch.meshgrid(torch.arange(n) / n, torch.arange(n) / n, indexing="ij")

    def passes(a, b):
        wave = torch.cos(2 * math.pi * (a * x + b * y))[None, None]
        return torch.allclose(conv(wave), wave, atol=1e-5)

    def blocked(a, b):
        wave = torch.cos(2 * math.pi * (a * x + b * y))[None, None]
        return conv(wave).abs().max() < 1e-5

    assert passes(3, 3) and passes(-3, 2) and passes(0, 0) and passes(1, 3)
    assert blocked(5, 0) and blocked(0, 4) and blocked(2, 6)
    assert conv.weight.shape[-2:] == (8, 4)


@pytest.mark.parametrize("name,host_cls,host_config,config", [
    ("chonn_fno", SpectralFNO, SpectralFNOConfig(**TINY_FNO), TINY_FNO),
    ("chonn_unet", UNet, UNetConfig(**TINY_UNET), TINY_UNET),
])
def test_order_zero_equals_host(name, host_cls, host_config, config):
    torch.manual_seed(1)
    host = host_cls(3, 2, host_config)
    chonn = operators.build(name, 3, 2, **config, order=0)
    assert type(chonn) is host_cls
    assert chonn.state_dict().keys() == host.state_dict().keys()
    chonn.load_state_dict(host.state_dict(), strict=True)
    x = torch.randn(2, 3, 16, 16)
    assert torch.equal(chonn(x), host(x))


def test_positive_order_adds_ckb_parameters():
    base = operators.build("chonn_fno", 1, 1, **TINY_FNO, order=0)
    counts = [sum(p.numel() for p in operators.build("chonn_fno", 1, 1, **TINY_FNO, order=k, d_state=4).parameters())
              for k in (1, 2)]
    n0 = sum(p.numel() for p in base.parameters())
    assert n0 < counts[0] < counts[1]


def test_unknown_model_and_key_errors_name_the_choices():
    with pytest.raises(ValueError, match="expected one of.*'fno'"):
        operators.build("fnoo", 1, 1)
    with pytest.raises(ValueError, match="model.config.widht: expected a field of FNOConfig among \\[.*'width'"):
        operators.build("fno", 1, 1, widht=8)
    with pytest.raises(ValueError, match="n_modes"):
        operators.build("fno", 1, 1, n_modes=(4, 4, 4))
    with pytest.raises(ValueError, match="expected shape"):
        operators.build("unet", 2, 1, **TINY_UNET)(torch.zeros(1, 3, 16, 16))


def test_rebuild_from_a_stored_spec_gives_same_architecture():
    from operators.training import ModelSpec, RunSpec

    stored = RunSpec(model=ModelSpec("unet", TINY_UNET, in_channels=2, out_channels=1)).to_dict()  # plain values
    a, b = RunSpec.from_dict(stored).model.build(), operators.build("unet", 2, 1, **TINY_UNET)
    assert a.state_dict().keys() == b.state_dict().keys()
    assert all(isinstance(v, (int, float, str, bool, list)) for v in stored["model"]["config"].values())


def test_coarsened_block_is_a_residual_on_the_coarse_grid():
    v = torch.randn(2, 3, 16, 12)
    assert torch.equal(Coarsened(torch.nn.Identity(), 2)(v), v)  # B(c) - c = 0 adds nothing
    shift = Coarsened(_AddOne(), 4)
    torch.testing.assert_close(shift(v), v + 1)
    assert Coarsened(_AddOne(), 2)(torch.zeros(1, 2, 15)).shape == (1, 2, 15)


class _AddOne(torch.nn.Module):
    def forward(self, v):
        return v + 1


@pytest.mark.parametrize("bidirectional", [True, False])
def test_order_models_see_both_directions_unless_causal(bidirectional):
    """The order-benchmark targets are symmetric smoothing operators: the default model must use inputs
    on both sides of a point; ``bidirectional=False`` is the causal block (no dependence on the future)."""
    torch.manual_seed(0)
    net = operators.build("ckb_chain", 1, 1, order=2, d_model=4, d_state=2, expand=2, bidirectional=bidirectional)
    x = torch.randn(1, 1, 32, requires_grad=True)
    net(x)[0, 0, 10].backward()
    future = x.grad[0, 0, 11:].abs().sum().item()
    assert (future > 0) if bidirectional else (future == 0)
    assert x.grad[0, 0, :10].abs().sum().item() > 0


def test_nac_fno_over_time_reads_stacked_frames():
    """tokens="time": (batch, frames·channels, x, y) → (batch, out, x, y) at two resolutions, every
    frame reaches the output, and the encoder keeps grid points apart (a NAC over frames per point)."""
    torch.manual_seed(0)
    model = operators.build("nac_fno", 3 * 2, 2, **TINY_FNO, tokens="time", frames=3, num_heads=2, topk=2)
    for n in (16, 32):
        assert model(torch.randn(2, 6, n, n)).shape == (2, 2, n, n)
    x = torch.randn(1, 6, 8, 8, requires_grad=True)
    encoder = model[0]
    out = encoder(x)
    assert out.shape == (1, TINY_FNO["width"], 8, 8)
    grad = torch.autograd.grad(out[0, :, 3, 5].sum(), x)[0].reshape(3, 2, 8, 8)
    assert all(grad[f, :, 3, 5].abs().sum() > 0 for f in range(3))  # every frame of that point
    grad[:, :, 3, 5] = 0
    assert torch.count_nonzero(grad) == 0  # and no other point


def test_nac_fno_over_time_rejects_a_channel_count_that_is_not_frames_times_channels():
    with pytest.raises(ValueError, match="frames: expected a divisor of the 7 input channels"):
        operators.build("nac_fno", 7, 1, **TINY_FNO, tokens="time", frames=3)
    with pytest.raises(ValueError, match="tokens: expected 'space' or 'time'"):
        operators.build("nac_fno", 6, 1, **TINY_FNO, tokens="pixels")
    model = operators.build("nac_fno", 6, 1, **TINY_FNO, tokens="time", frames=3)
    with pytest.raises(ValueError, match="expected 3 frames x 2 channels = 6 channels, found 4"):
        model(torch.randn(1, 4, 8, 8))


AMP_CASES = [c for c in CASES if c[2] == 2]


@pytest.mark.parametrize("name,config,n_dim", AMP_CASES, ids=[c[0] for c in AMP_CASES])
def test_model_trains_under_bfloat16_autocast(name, config, n_dim):
    """What ``--amp`` does on GPU, checked with CPU autocast: forward and backward run, the output is
    finite and within bfloat16 error of the full-precision output (scans stay in float32), and every spectral
    convolution gets float32 (cuFFT has no bfloat16: on a GPU, fno failed here before)."""
    torch.manual_seed(0)
    model = operators.build(name, 3, 2, **config)
    x = torch.randn(2, 3, 16, 16)
    full = model(x)
    seen = []
    for module in model.modules():
        if isinstance(module, SpectralConv):
            module.register_forward_pre_hook(lambda m, args: seen.append(args[0].dtype))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        mixed = model(x)
    assert set(seen) <= {torch.float32} and (bool(seen) or "fno" not in name)
    mixed.float().square().mean().backward()
    assert torch.isfinite(mixed).all()
    assert (mixed.float() - full).norm() <= 0.1 * full.norm()
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)


def _assert_same_values_and_grads(fast_fn, ref_fn, shape, *, grad_tol):
    """fast_fn = ref_fn on a float64 input of ``shape``: values to 1e-14, input gradients to grad_tol."""
    x = torch.randn(*shape, dtype=torch.float64, requires_grad=True)
    fast, ref = fast_fn(x), ref_fn(x)
    torch.testing.assert_close(fast, ref, rtol=1e-14, atol=1e-14)
    weight = torch.randn_like(ref)
    grads = [torch.autograd.grad((y * weight).sum(), x)[0] for y in (fast, ref)]
    torch.testing.assert_close(grads[0], grads[1], rtol=grad_tol, atol=grad_tol)


@pytest.mark.parametrize("shape", [(2, 3, 5), (2, 3, 4, 6), (1, 2, 1, 3), (1, 1, 3, 4, 5), (2, 3, 1)])
def test_upsample2x_equals_interpolate_in_values_and_gradients(shape):
    """The hand-written 2× (bi/tri)linear stencil = F.interpolate(align_corners=False), edges included."""
    from operators.models.resample import upsample2x, upsample2x_ref

    _assert_same_values_and_grads(upsample2x, upsample2x_ref, shape, grad_tol=1e-13)


@pytest.mark.parametrize("shape", [(2, 3, 6), (2, 3, 4, 6), (1, 2, 2, 2), (1, 1, 4, 2, 6)])
def test_pool2x_equals_adaptive_avg_pool_in_values_and_gradients(shape):
    from operators.models.resample import pool2x, pool2x_ref

    _assert_same_values_and_grads(pool2x, pool2x_ref, shape, grad_tol=1e-14)
    with pytest.raises(ValueError, match="even spatial sizes"):
        pool2x(torch.zeros(1, 1, 5))


def test_coarsened_by_two_uses_the_exact_stencil():
    """Factor 2 on even sizes takes upsample2x; the result equals the F.interpolate formulation."""
    torch.manual_seed(0)
    block = torch.nn.Conv2d(3, 3, 3, padding=1).double()
    v = torch.randn(2, 3, 8, 6, dtype=torch.float64)
    coarse = torch.nn.functional.adaptive_avg_pool2d(v, (4, 3))
    delta = block(coarse) - coarse
    expected = v + torch.nn.functional.interpolate(delta, size=(8, 6), mode="bilinear", align_corners=False)
    torch.testing.assert_close(Coarsened(block, 2)(v), expected, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("shape", [(2, 3, 6), (2, 3, 4, 6), (1, 2, 2, 2), (3, 1, 2, 8)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_resample_native_kernels_equal_torch_formulation(resample_native, monkeypatch, shape, dtype):
    """pool2x, upsample2x and their adjoints (their backward): the native kernels = the torch formulation
    (what pool2x and upsample2x run with CIRCUITOP_NATIVE=0)."""
    from operators.models.resample import pool2x, upsample2x

    def adjoint(fn, grad, in_shape):
        x = grad.new_zeros(in_shape, requires_grad=True)
        return torch.autograd.grad(fn(x), x, grad)[0]

    ops, x = resample_native, torch.randn(*shape, dtype=dtype)
    tol = {"rtol": 1e-6, "atol": 1e-6} if dtype == torch.float32 else {"rtol": 1e-14, "atol": 1e-14}
    monkeypatch.setenv("CIRCUITOP_NATIVE", "0")
    up = upsample2x(x)
    torch.testing.assert_close(ops.upsample2x(x), up, **tol)
    torch.testing.assert_close(ops.upsample2x_adjoint(up), adjoint(upsample2x, up, x.shape), **tol)
    torch.testing.assert_close(ops.pool2x(x), pool2x(x), **tol)
    torch.testing.assert_close(ops.pool2x_adjoint(x), adjoint(pool2x, x, up.shape), **tol)


@pytest.mark.parametrize("shape", [(2, 2, 4), (1, 2, 4, 6), (1, 1, 2, 2, 4)])
def test_resample_differentiates_twice(shape):
    """Each map's backward is its adjoint, itself differentiable: gradgradcheck passes."""
    from operators.models.resample import pool2x, upsample2x

    x = torch.randn(*shape, dtype=torch.float64, requires_grad=True)
    for fn in (pool2x, upsample2x):
        assert torch.autograd.gradcheck(fn, (x,))
        assert torch.autograd.gradgradcheck(fn, (x,))


@pytest.mark.parametrize("shape", [(2, 3, 5), (2, 3, 4, 6), (1, 1, 2, 3, 2)])
def test_upsample2x_add_to_is_the_residual_in_one_pass(shape):
    """upsample2x(x, add_to=v) = v + upsample2x(x) in values and in the gradients of x and v."""
    from operators.models.resample import upsample2x

    x = torch.randn(*shape, dtype=torch.float64, requires_grad=True)
    v = torch.randn(*shape[:2], *(2 * n for n in shape[2:]), dtype=torch.float64, requires_grad=True)
    weight = torch.randn_like(v)
    fused, plain = upsample2x(x, add_to=v), v + upsample2x(x)
    torch.testing.assert_close(fused, plain, rtol=0, atol=0)
    grads = [torch.autograd.grad((y * weight).sum(), (x, v)) for y in (fused, plain)]
    for g_fused, g_plain in zip(*grads):
        torch.testing.assert_close(g_fused, g_plain, rtol=0, atol=0)
    assert torch.autograd.gradgradcheck(lambda x, v: upsample2x(x, add_to=v), (x, v))
    with pytest.raises(ValueError, match="add_to: expected the output's shape"):
        upsample2x(x, add_to=x)


def test_replace_placement_puts_the_ckb_in_place_of_the_local_branch():
    """``placement="replace"``: v ← σ(K v + CKB(v)) (CHONN, Methods: the CKB "replaces the w0 convolutional
    branch"), so the layers' 1×1 local convolutions are gone; order 0 is still the host exactly."""
    wrap = operators.build("chonn_fno", 1, 1, **TINY_FNO, order=1, d_state=4, placement="wrap")
    replace = operators.build("chonn_fno", 1, 1, **TINY_FNO, order=1, d_state=4, placement="replace")
    width, layers = wrap.config.width, wrap.config.n_layers
    n = [sum(p.numel() for p in m.parameters()) for m in (wrap, replace)]
    assert n[0] - n[1] == layers * (width * width + width)
    assert all(isinstance(skip, torch.nn.Identity) for skip in replace.skips)
    torch.manual_seed(0)
    x = torch.randn(2, 1, 16, 16)
    v = replace.lift(replace.grid(x))
    layer0 = torch.nn.functional.gelu(replace.spectral[0](v) + replace.blocks[0](v))
    assert torch.allclose(replace.spectral[1](layer0) + replace.blocks[1](layer0),
                          _after_two_layers(replace, x), atol=1e-6)
    host = operators.build("chonn_fno", 1, 1, **TINY_FNO, order=0, placement="replace")
    plain = operators.build("chonn_fno", 1, 1, **TINY_FNO, order=0, placement="wrap")
    host.load_state_dict(plain.state_dict(), strict=True)
    assert torch.equal(host(x), plain(x))
    with pytest.raises(ValueError, match="placement: expected one of"):
        operators.build("chonn_fno", 1, 1, **TINY_FNO, placement="around")


def test_chonn_fno_places_the_ckb_as_the_paper_does_by_default():
    """The default is the paper's placement, the CKB in place of w0 ("replace"); order 0 (the demo's and the
    examples' "FNO host") keeps every layer's 1×1 branch, so it is the host minus the CKB, not minus W too."""
    from operators.models.chonn import ChonnFNOConfig

    assert ChonnFNOConfig().placement == "replace"
    torch.manual_seed(0)
    default = operators.build("chonn_fno", 1, 1, **TINY_FNO, order=1, d_state=4)
    torch.manual_seed(0)
    replace = operators.build("chonn_fno", 1, 1, **TINY_FNO, order=1, d_state=4, placement="replace")
    assert all(isinstance(skip, torch.nn.Identity) for skip in default.skips)
    x = torch.randn(2, 1, 16, 16)
    assert torch.equal(default(x), replace(x))
    host = operators.build("chonn_fno", 1, 1, **TINY_FNO, order=0)
    assert all(isinstance(skip, torch.nn.Conv2d) for skip in host.skips)
    assert all(isinstance(block, torch.nn.Identity) for block in host.blocks)


def _after_two_layers(model, x):
    """The latent after the second Fourier layer (before its activation), via the model's own loop."""
    captured = {}
    handle = model.spectral[1].register_forward_hook(lambda mod, inp, out: captured.update(k=out))
    block_handle = model.blocks[1].register_forward_hook(lambda mod, inp, out: captured.update(b=out))
    model(x)
    handle.remove(), block_handle.remove()
    return captured["k"] + captured["b"]
