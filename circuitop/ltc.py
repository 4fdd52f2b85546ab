"""Liquid time-constant (LTC) cell and sequence model with the fused solver and irregular steps.

The LTC ODE (LTC, Eq. 1) is ``dx/dt = -[1/tau + f(x, I)] x + f(x, I) A``; the fused
semi-implicit step (Eq. 3) ``x <- (x + dt f A) / (1 + dt (1/tau + f))`` is repeated ``ode_unfolds`` times
per input step with ``dt = elapsed / ode_unfolds``. In the biophysical form used by ``ncps``::

    v <- (c_m/dt v + g_leak v_leak + sum_i w_ij s_ij(v) E_ij) / (c_m/dt + g_leak + sum_i w_ij s_ij(v) + eps)
    s_ij(v) = sigmoid(sigma_ij (v_i - mu_ij))

with the sensory synapses (inputs -> neurons) entering the same sums. The sensory terms depend only on the
inputs, so :class:`LTC` computes them for all time steps at once, outside the time loop.

=================  ======================  ==========================================
name               shape                   meaning
=================  ======================  ==========================================
``x``              ``(batch, time, in)``   inputs (``in = wiring.input_dim``)
``dt``             ``(batch, time)``       elapsed time per step, > 0 (default 1)
``h``              ``(batch, units)``      membrane potentials
``outputs``        ``(batch, time, out)``  affine map of the first ``out`` (motor) neurons
=================  ======================  ==========================================
"""

from __future__ import annotations

import ncps.wirings
import torch
import torch.nn.functional as F
from torch import nn

from circuitop.sequence import check_sequence, check_step, initial_state

__all__ = ["LTCCell", "LTC", "ltc_scan", "ltc_scan_ref"]

_INIT_RANGES = {  # the ncps initialisation ranges, so our cells start where the reference does
    "gleak": (0.001, 1.0), "vleak": (-0.2, 0.2), "cm": (0.4, 0.6), "w": (0.001, 1.0),
    "sigma": (3.0, 8.0), "mu": (0.3, 0.8), "sensory_w": (0.001, 1.0),
    "sensory_sigma": (3.0, 8.0), "sensory_mu": (0.3, 0.8),
}
_POSITIVE = ("gleak", "cm", "w", "sensory_w")


def _synapse_sums(post: torch.Tensor, w: torch.Tensor, erev: torch.Tensor, units: int) -> torch.Tensor:
    """``(n_syn, 2 units)``: ``act @`` it gives ``[sum w act E, sum w act]`` per postsynaptic neuron."""
    onehot = F.one_hot(post, units).to(w.dtype)
    return torch.cat([onehot * (w * erev).unsqueeze(1), onehot * w.unsqueeze(1)], 1)


def _wiring(wiring: ncps.wirings.Wiring, in_channels: int) -> ncps.wirings.Wiring:
    if not wiring.is_built():
        wiring.build(in_channels)
    if wiring.input_dim != in_channels:
        raise ValueError(f"in_channels: expected the wiring's input_dim {wiring.input_dim}, found {in_channels}")
    if wiring.output_dim is None or not 0 < wiring.output_dim <= wiring.units:
        raise ValueError(f"wiring: expected output size <= units = {wiring.units}, found output_dim "
                         f"{wiring.output_dim}")
    return wiring


class LTCCell(nn.Module):
    """One LTC input step: ``ode_unfolds`` fused-solver updates (LTC, Eq. 3).

    Args:
        wiring: an ``ncps.wirings`` object (``AutoNCP``, ``FullyConnected``, ...) giving synapse masks,
            reversal-potential signs and the motor (output) neurons.
        in_channels: input features (builds the wiring if it is not built yet).
        input_mapping / output_mapping: ``"affine"``, ``"linear"`` or ``None`` (elementwise maps).
        ode_unfolds: solver updates per input step. epsilon: added to the denominator.
        implicit_param_constraints: if True, ``softplus`` keeps ``w, sensory_w, cm, gleak`` positive;
            otherwise they are used as stored (call :meth:`apply_weight_constraints` after optimiser steps).
    """

    def __init__(self, wiring: ncps.wirings.Wiring, in_channels: int, *, input_mapping: str | None = "affine",
                 output_mapping: str | None = "affine", ode_unfolds: int = 6, epsilon: float = 1e-8,
                 implicit_param_constraints: bool = False):
        super().__init__()
        self.wiring = _wiring(wiring, in_channels)
        self.in_channels, self.units, self.out_channels = in_channels, wiring.units, wiring.output_dim
        self.input_mapping, self.output_mapping = input_mapping, output_mapping
        self.ode_unfolds, self.epsilon = ode_unfolds, epsilon
        self.implicit_param_constraints = implicit_param_constraints
        shapes = {"gleak": (self.units,), "vleak": (self.units,), "cm": (self.units,)}
        shapes.update(dict.fromkeys(("sigma", "mu", "w"), (self.units, self.units)))
        shapes.update(dict.fromkeys(("sensory_sigma", "sensory_mu", "sensory_w"), (in_channels, self.units)))
        for name, shape in shapes.items():
            low, high = _INIT_RANGES[name]
            self.register_parameter(name, nn.Parameter(torch.rand(*shape) * (high - low) + low))
        for prefix, matrix in (("", wiring.adjacency_matrix), ("sensory_", wiring.sensory_adjacency_matrix)):
            adjacency = torch.as_tensor(matrix, dtype=torch.float32)
            self.register_parameter(f"{prefix}erev", nn.Parameter(adjacency.clone()))
            self.register_buffer(f"{prefix}sparsity_mask", adjacency.abs())
        for prefix, size, mapping in (("input", in_channels, input_mapping), ("output", self.out_channels, output_mapping)):
            if mapping not in ("affine", "linear", None):
                raise ValueError(f"{prefix}_mapping: expected 'affine', 'linear' or None, found {mapping!r}")
            if mapping in ("affine", "linear"):
                self.register_parameter(f"{prefix}_w", nn.Parameter(torch.ones(size)))
            if mapping == "affine":
                self.register_parameter(f"{prefix}_b", nn.Parameter(torch.zeros(size)))

    @classmethod
    def from_ncps(cls, cell) -> "LTCCell":
        """Our cell with the same wiring, settings and parameter values as an ``ncps.torch.LTCCell``."""
        ours = cls(cell._wiring, cell._wiring.input_dim, input_mapping=cell._input_mapping,
                   output_mapping=cell._output_mapping, ode_unfolds=cell._ode_unfolds, epsilon=cell._epsilon,
                   implicit_param_constraints=cell._implicit_param_constraints)
        ours.load_state_dict({k: v.detach().clone() for k, v in cell.state_dict().items()})
        return ours

    def positive(self, name: str) -> torch.Tensor:
        """Parameter ``name`` after the positivity map (softplus in implicit mode, identity otherwise)."""
        value = getattr(self, name)
        return F.softplus(value) if self.implicit_param_constraints else value

    @torch.no_grad()
    def apply_weight_constraints(self) -> None:
        """Clamp ``w, sensory_w, cm, gleak`` at zero (explicit mode only), as ncps does after each step."""
        if not self.implicit_param_constraints:
            for name in _POSITIVE:
                getattr(self, name).clamp_(min=0.0)

    def map_inputs(self, x: torch.Tensor) -> torch.Tensor:
        """The elementwise input map ``x * input_w + input_b``; any leading dims."""
        if self.input_mapping in ("affine", "linear"):
            x = x * self.input_w
        return x + self.input_b if self.input_mapping == "affine" else x

    def map_outputs(self, h: torch.Tensor) -> torch.Tensor:
        """Motor neurons ``h[..., :out]`` through the elementwise output map."""
        y = h[..., : self.out_channels]
        if self.output_mapping in ("affine", "linear"):
            y = y * self.output_w
        return y + self.output_b if self.output_mapping == "affine" else y

    def sensory(self, x: torch.Tensor, dt: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Input-only terms of the fused step for any leading dims (e.g. all time steps at once).

        Args:
            x: mapped inputs ``(..., in_channels)``. dt: elapsed time ``(...)``.

        Returns:
            ``cm_t = c_m / (dt / L)``, numerator ``g_leak v_leak + sum_i w s(x_i) E`` and denominator
            ``cm_t + g_leak + sum_i w s(x_i) + eps``, each ``(..., units)``.
        """
        pre, post = self.sensory_sparsity_mask.nonzero(as_tuple=True)  # only the wiring's synapses
        act = torch.sigmoid(self.sensory_sigma[pre, post] * (x.index_select(-1, pre) - self.sensory_mu[pre, post]))
        w = self.positive("sensory_w")[pre, post]
        sums = act @ _synapse_sums(post, w, self.sensory_erev[pre, post], self.units)
        numer, denom = sums[..., : self.units], sums[..., self.units:]
        gleak = self.positive("gleak")
        cm_t = self.positive("cm") * (self.ode_unfolds / dt.unsqueeze(-1))
        return cm_t, numer + gleak * self.vleak, denom + cm_t + gleak + self.epsilon

    def recurrent_weights(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Loop-invariant recurrent tensors restricted to the wiring's ``n_syn`` synapses.

        Returns ``(pre, sigma, sigma*mu, out)``: presynaptic indices ``(n_syn,)``, the sigmoid slopes and
        offsets ``(n_syn,)``, and ``out`` ``(n_syn, 2*units)`` whose columns scatter each synapse's
        activation, weighted by ``w E`` and ``w``, onto its postsynaptic neuron, so that one matmul gives
        both sums of the fused step. Absent synapses contribute exactly zero in the dense form too.
        """
        pre, post = self.sparsity_mask.nonzero(as_tuple=True)
        w = self.positive("w")[pre, post]
        out = _synapse_sums(post, w, self.erev[pre, post], self.units)
        sigma = self.sigma[pre, post]
        return pre, sigma, sigma * self.mu[pre, post], out

    def step(self, h: torch.Tensor, cm_t: torch.Tensor, numer: torch.Tensor, denom: torch.Tensor,
             weights: tuple[torch.Tensor, ...]) -> torch.Tensor:
        """``ode_unfolds`` fused updates from ``h`` ``(batch, units)`` given this step's sensory terms
        ``cm_t, numer, denom`` ``(batch, units)`` (see :meth:`sensory`) and :meth:`recurrent_weights`."""
        pre, sigma, sigma_mu, out = weights
        for _ in range(self.ode_unfolds):
            act = torch.sigmoid(torch.addcmul(-sigma_mu, h.index_select(1, pre), sigma))  # (batch, n_syn)
            sums = act @ out
            h = (torch.addcmul(numer, cm_t, h) + sums[:, : self.units]) / (denom + sums[:, self.units:])
        return h

    def forward(self, x: torch.Tensor, h: torch.Tensor, dt: torch.Tensor | float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
        """One input step: ``x`` ``(batch, in)``, ``h`` ``(batch, units)``, ``dt`` scalar or ``(batch,)``.

        Returns ``(output (batch, out), new state (batch, units))``.
        """
        h = self.step(h, *self.sensory(self.map_inputs(x), check_step(x, dt)), self.recurrent_weights())
        return self.map_outputs(h), h


class _FusedScan(torch.autograd.Function):
    """The time loop of :meth:`LTCCell.step` with a hand-written backward (no per-op autograd graph).

    Backward of one update ``h' = (numer + cm_t h + a @ out[:, :U]) / (denom + a @ out[:, U:])`` with
    ``a = sigmoid(sigma h[pre] - sigma mu)`` and ``den`` the denominator: ``g_num = g/den``,
    ``g_den = -g_num h'``, ``g_a = g_num[post] (w E - w h'[post])``,
    ``g_h = cm_t g_num + scatter_pre(g_a a (1-a) sigma)``; parameter gradients are summed after the loop.
    """

    @staticmethod
    def forward(ctx, h, cm_t, numer, denom, sigma, sigma_mu, out, pre, post, unfolds, store):
        (batch, _, units), steps = cm_t.shape, cm_t.shape[1] * unfolds
        cm_k = cm_t.transpose(0, 1).contiguous()
        base = torch.cat([numer, denom], 2).transpose(0, 1).contiguous()  # (time, batch, 2 units)
        n_buf = steps if store else 1  # without backward, one scratch buffer is reused
        hs, sums = h.new_empty(steps + 1, batch, units), h.new_empty(n_buf, batch, 2 * units)
        acts, neg_sigma_mu = h.new_empty(n_buf, batch, pre.numel()), -sigma_mu
        hs[0] = h
        scratch = [v.unbind(0) * (steps // n_buf) for v in (acts, sums, sums[:, :, :units], sums[:, :, units:])]
        views = zip(hs.unbind(0), hs[1:].unbind(0), *scratch)
        cm_k, base = cm_k.unbind(0), base.unbind(0)
        for i, (h_in, h_out, act, sum_, numer_i, denom_i) in enumerate(views):
            k = i // unfolds
            torch.sigmoid(torch.addcmul(neg_sigma_mu, h_in.index_select(1, pre), sigma), out=act)
            torch.addmm(base[k], act, out, out=sum_)  # [numerator - cm_t h, denominator]
            torch.div(torch.addcmul(numer_i, cm_k[k], h_in), denom_i, out=h_out)
        dens = sums[:, :, units:]
        ctx.save_for_backward(hs, acts, dens, cm_t, sigma, out, pre, post)
        ctx.unfolds = unfolds
        return hs[unfolds::unfolds].transpose(0, 1)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, g_states):
        hs, acts, dens, cm_t, sigma, out, pre, post = ctx.saved_tensors
        unfolds, (batch, n_time, units), steps = ctx.unfolds, cm_t.shape, len(acts)
        n_syn = pre.numel()
        scatter = F.one_hot(pre, units).to(sigma.dtype) * sigma.unsqueeze(1)  # (n_syn, units)
        # g_a = g_num[post] * (w E - w h'[post]) * a (1 - a): all but g_num known before the loop
        w_erev, w = out[:, :units].sum(1), out[:, units:].sum(1)  # one non-zero per row
        h_post = (hs[1:].reshape(-1, units) @ F.one_hot(post, units).to(w.dtype).T).view(steps, batch, n_syn)
        slope = (w_erev - w * h_post).mul_(acts * (1 - acts))
        inv_den = 1 / dens
        carry = cm_t.transpose(0, 1).repeat_interleave(unfolds, 0) * inv_den  # (steps, batch, units)
        g_nums, g_zs = torch.empty_like(dens), torch.empty_like(acts)
        g_h, g_in = torch.zeros_like(hs[0]), g_states.transpose(0, 1).unbind(0)
        views = list(zip(inv_den.unbind(0), carry.unbind(0), slope.unbind(0), g_nums.unbind(0), g_zs.unbind(0)))
        for i in reversed(range(steps)):
            inv_den_i, carry_i, slope_i, g_num, g_z = views[i]
            if (i + 1) % unfolds == 0:
                g_h = g_h + g_in[i // unfolds]
            torch.mul(g_h, inv_den_i, out=g_num)
            torch.mul(g_num.index_select(1, post), slope_i, out=g_z)
            g_h = torch.addmm(g_h * carry_i, g_z, scatter)
        g_dens = -g_nums * hs[1:]
        per_step = lambda v: v.view(n_time, unfolds, batch, units).sum(1).transpose(0, 1)  # noqa: E731
        g_out = acts.view(-1, n_syn).T @ torch.cat([g_nums, g_dens], 2).view(-1, 2 * units)
        g_gather = hs[:-1].reshape(-1, units).T @ g_zs.view(-1, n_syn)  # (units, n_syn)
        g_sigma = g_gather.gather(0, pre.unsqueeze(0)).squeeze(0)
        return (g_h, per_step(g_nums * hs[:-1]), per_step(g_nums), per_step(g_dens), g_sigma,
                -g_zs.sum((0, 1)), g_out, None, None, None, None)


def ltc_scan(cell: LTCCell, h: torch.Tensor, cm_t: torch.Tensor, numer: torch.Tensor,
             denom: torch.Tensor) -> torch.Tensor:
    """All states ``(batch, time, units)`` from ``h`` ``(batch, units)`` and the sensory terms
    ``(batch, time, units)`` of :meth:`LTCCell.sensory`; fast path with a hand-written backward.
    Under autocast (``--amp``) the scan runs in float32, as the Kirchhoff scan does (its matmuls mix the
    16-bit inputs with float32 weights)."""
    device = h.device.type
    if torch.is_autocast_enabled(device):
        with torch.autocast(device, enabled=False):
            return ltc_scan(cell, h.float(), cm_t.float(), numer.float(), denom.float())
    pre, sigma, sigma_mu, out = cell.recurrent_weights()
    post = cell.sparsity_mask.nonzero(as_tuple=True)[1]  # same order as pre
    inputs = (h, cm_t, numer, denom, sigma, sigma_mu, out)
    store = torch.is_grad_enabled() and any(t.requires_grad for t in inputs)
    return _FusedScan.apply(*inputs, pre, post, cell.ode_unfolds, store)


def ltc_scan_ref(cell: LTCCell, h: torch.Tensor, cm_t: torch.Tensor, numer: torch.Tensor,
                 denom: torch.Tensor) -> torch.Tensor:
    """Reference twin of :func:`ltc_scan`: a plain loop over :meth:`LTCCell.step` under autograd."""
    weights, states = cell.recurrent_weights(), []
    for k in range(cm_t.shape[1]):
        h = cell.step(h, cm_t[:, k], numer[:, k], denom[:, k], weights)
        states.append(h)
    return torch.stack(states, 1)


class LTC(nn.Module):
    """An LTC network over a sequence with per-sample irregular step sizes.

    Args:
        in_channels: input features. units: an ``ncps.wirings.Wiring`` or an int (fully connected).
        out_channels: motor neurons when ``units`` is an int (default: all units).
        **cell_kwargs: keyword-only settings of :class:`LTCCell` (``ode_unfolds``, ...);
            ``implicit_param_constraints`` defaults to True as in ``ncps.torch.LTC``.
        fused: use :func:`ltc_scan` (hand-written backward) rather than :func:`ltc_scan_ref`.

    Example:
        >>> ltc = LTC(16, ncps.wirings.AutoNCP(64, 8))
        >>> y, h = ltc(torch.randn(8, 100, 16), dt=torch.rand(8, 100) + 0.1)   # y: (8, 100, 8)
    """

    def __init__(self, in_channels: int, units: int | ncps.wirings.Wiring, *, out_channels: int | None = None,
                 implicit_param_constraints: bool = True, fused: bool = True, **cell_kwargs):
        super().__init__()
        self.fused = fused
        if isinstance(units, int):
            if out_channels is not None and out_channels > units:
                raise ValueError(f"out_channels: expected <= units = {units}, found {out_channels}")
            units = ncps.wirings.FullyConnected(units, out_channels)
        self.cell = LTCCell(units, in_channels, implicit_param_constraints=implicit_param_constraints, **cell_kwargs)
        self.in_channels, self.out_channels, self.units = in_channels, self.cell.out_channels, self.cell.units

    @classmethod
    def from_ncps(cls, model) -> "LTC":
        """Our sequence model with the parameters of an ``ncps.torch.LTC`` (no mixed memory)."""
        if model.use_mixed:
            raise ValueError("model: expected an ncps LTC without mixed_memory, found mixed_memory=True")
        ours = cls(model.input_size, model.rnn_cell._wiring)
        ours.cell = LTCCell.from_ncps(model.rnn_cell)  # same wiring, so the same widths
        return ours

    def forward(self, x: torch.Tensor, dt: torch.Tensor | None = None,
                h0: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Run over ``x`` ``(batch, time, in)`` with steps ``dt`` ``(batch, time)``.

        Returns ``(outputs (batch, time, out), last state (batch, units))``.
        """
        dt = check_sequence(x, dt, self.in_channels)
        cm_t, numer, denom = self.cell.sensory(self.cell.map_inputs(x), dt)  # all steps at once
        h = initial_state(x, h0, self.units)
        states = (ltc_scan if self.fused else ltc_scan_ref)(self.cell, h, cm_t, numer, denom)
        return self.cell.map_outputs(states), states[:, -1]
