"""NCP wiring as masked maps: sparsity removes synapses (zero weight, zero gradient, no effect on output)."""

import pytest
import torch

from circuitop.ncp import NCPBackbone, NCPProjection, ncp_wiring


def test_wiring_group_sizes_and_fanout():
    w = ncp_wiring(6, 10, 4, 2, sparsity=0.5, seed=3)
    assert [len(w.get_neurons_of_layer(i)) for i in range(3)] == [10, 4, 2]
    sensory = abs(w.sensory_adjacency_matrix)
    # every sensory input reaches int(n_inter * 0.5) inter neurons, and nothing else
    inter = w.get_neurons_of_layer(0)
    assert (sensory[:, inter].sum(1) >= 5).all()
    assert sensory.sum() == sensory[:, inter].sum()


@pytest.mark.parametrize("bad", [-0.1, 1.0, 1.5])
def test_wiring_rejects_bad_sparsity(bad):
    with pytest.raises(ValueError, match="sparsity"):
        ncp_wiring(4, 4, 2, 1, sparsity=bad)


@pytest.mark.parametrize("sparsity", [0.0, 0.5, 0.8])
def test_projection_mask_density_follows_sparsity(sparsity):
    proj = NCPProjection(32, 40, sparsity=sparsity, seed=1)
    density = proj.mask.mean().item()
    assert density == pytest.approx(max(int(40 * (1 - sparsity)), 1) / 40, abs=0.08)
    assert (proj.weight[proj.mask == 0] == 0).all()


def test_projection_masked_weights_out_of_computation_and_gradient():
    torch.manual_seed(0)
    proj = NCPProjection(16, 24, sparsity=0.5)
    x = torch.randn(3, 7, 16)
    y = proj(x)
    y.square().sum().backward()
    off = proj.mask == 0
    assert off.sum() > 0
    assert (proj.weight.grad[off] == 0).all()
    assert (proj.weight.grad[~off] != 0).any()
    with torch.no_grad():
        proj.weight[off] = torch.randn(int(off.sum()))  # even if a masked entry were set, it has no effect
    torch.testing.assert_close(proj(x), y.detach())


def _backbone(sparsity=0.5):
    torch.manual_seed(0)
    return NCPBackbone(4, 3, units=14, n_motor=3, sparsity=sparsity, seed=5)


def test_backbone_split_first_layer_equals_concatenated_pass():
    bb = _backbone()
    q, k = torch.randn(2, 3, 5, 4), torch.randn(2, 3, 6, 4)
    u = torch.cat([q[:, :, :, None].expand(-1, -1, -1, 6, -1), k[:, :, None].expand(-1, -1, 5, -1, -1)], -1)
    phi_ref, omega_ref = bb(u)
    phi, omega = bb.gates(bb.query_part(q)[:, :, :, None] + bb.key_part(k)[:, :, None])
    torch.testing.assert_close(phi, phi_ref)
    torch.testing.assert_close(omega, omega_ref)
    assert ((phi > 0) & (phi < 1)).all() and (omega > bb.eps).all()
    assert phi.std() > 1e-3 and omega.std() > 1e-3  # the heads depend on the pair


def test_backbone_masks_per_head_and_zero_gradient_off_mask():
    bb = _backbone()
    assert not torch.equal(bb.mask_in[0], bb.mask_in[1])  # each head has its own wiring
    for key in ("in", "ic", "cm"):
        assert 0 < getattr(bb, f"mask_{key}").mean() < 1
    phi, omega = bb(torch.randn(2, 3, 4, 5, 8))
    (phi.sum() + omega.sum()).backward()
    for key in ("in", "ic", "cm"):
        mask, grad = getattr(bb, f"mask_{key}"), getattr(bb, f"w_{key}").grad
        assert (grad[mask == 0] == 0).all() and (grad[mask == 1] != 0).any()


def test_backbone_units_too_few():
    with pytest.raises(ValueError, match="units"):
        NCPBackbone(4, 1, units=3, n_motor=2)
