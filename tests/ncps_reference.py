"""One comparison of our sequence cells with ncps (the reference), shared by the LTC and CfC tests."""

import copy

import torch


def grads_in_our_layout(ref, from_ncps) -> dict[str, torch.Tensor]:
    """ncps gradients mapped through ``from_ncps`` (a linear re-arrangement of the parameters)."""
    grads = copy.deepcopy(ref)
    for p, p_ref in zip(grads.parameters(), ref.parameters()):
        p.data = p_ref.grad.clone() if p_ref.grad is not None else torch.zeros_like(p)
    return dict(from_ncps(grads).named_parameters())


def assert_matches_ncps(ours, ref, x, dt, weights, from_ncps) -> None:
    """Values, input gradients and parameter gradients of ``ours`` equal ncps' ``ref`` to 1e-5.

    ncps squeezes per-sample time spans to ``(batch,)``, which only broadcasts for batch 1, so the
    reference runs one sample at a time while ours runs the whole batch with ``dt (batch, time)``.
    """
    x_ours, x_ref = x.clone().requires_grad_(), x.clone().requires_grad_()
    y, h = ours(x_ours, dt)
    ((y * weights).sum() + h.square().sum()).backward()
    for b in range(x.shape[0]):
        y_ref, h_ref = ref(x_ref[b: b + 1], timespans=dt[b: b + 1])
        torch.testing.assert_close(y[b: b + 1], y_ref, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(h[b: b + 1], h_ref, atol=1e-5, rtol=1e-5)
        ((y_ref * weights[b: b + 1]).sum() + h_ref.square().sum()).backward()
    torch.testing.assert_close(x_ours.grad, x_ref.grad, atol=1e-5, rtol=1e-5)
    expected = grads_in_our_layout(ref, from_ncps)
    for name, p in ours.named_parameters():
        torch.testing.assert_close(p.grad, expected[name], atol=1e-5, rtol=1e-4, msg=name)
