"""NCP wiring as sparse masked maps: the NAC sensory gate and the layered NAC backbone.

The wiring is the ``ncps`` Neural Circuit Policy (Lechner et al. 2020) built with AutoNCP's fan-out rules
(NAC, Appendix A.1 and Algorithm 1): neurons ``[motor | command | inter]``, sensory → inter
fan-out ``int(n_inter·ρ)``, inter → command ``int(n_command·ρ)``, command → motor fan-in
``int(n_command·ρ)`` with density ρ = 1 − sparsity and synapse polarity ±1. Every weight below is
multiplied by the wiring's 0/1 mask, so a removed synapse is out of the computation and gets zero gradient.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from ncps.wirings import NCP
from torch import nn

__all__ = ["ncp_wiring", "NCPProjection", "NCPBackbone"]


def ncp_wiring(n_inputs: int, n_inter: int, n_command: int, n_motor: int, *, sparsity: float = 0.5,
               seed: int = 22222) -> NCP:
    """A built ``ncps.wirings.NCP`` with AutoNCP's fan-outs for density ρ = 1 − ``sparsity``.

    Unlike ``AutoNCP`` (which insists on sparsity ≥ 0.1), any sparsity in [0, 1) is accepted, so the fully
    connected case of the paper's Theorem 2 (s = 0) can be built.
    """
    if not 0.0 <= sparsity < 1.0:
        raise ValueError(f"sparsity: expected a value in [0, 1), found {sparsity}")
    for name, n in (("n_inputs", n_inputs), ("n_inter", n_inter), ("n_command", n_command), ("n_motor", n_motor)):
        if n < 1:
            raise ValueError(f"{name}: expected a positive neuron count, found {n}")
    rho = 1.0 - sparsity
    wiring = NCP(n_inter, n_command, n_motor, sensory_fanout=max(int(n_inter * rho), 1),
                 inter_fanout=max(int(n_command * rho), 1), recurrent_command_synapses=max(int(n_command * rho * 2), 1),
                 motor_fanin=max(int(n_command * rho), 1), seed=seed)
    wiring.build(n_inputs)
    return wiring


def _signed_init(polarity: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """Mask |A| and a weight with the synapse's sign and magnitude U(0, 1/√fan_in) (zero where unwired)."""
    mask = torch.as_tensor(np.abs(polarity), dtype=torch.float32)
    fan_in = mask.sum(0).clamp(min=1.0)
    magnitude = torch.rand(mask.shape) / fan_in.sqrt()
    return mask, magnitude * torch.as_tensor(polarity, dtype=torch.float32)


class NCPProjection(nn.Module):
    """Sparse per-token linear map whose mask is the NCP sensory → inter adjacency (NAC sensory gate, Eq. 13).

    y = x (W ⊙ M) + b with M = |A_sensory→inter| of a wiring whose inter group has ``out_features`` neurons:
    every input reaches ``int(out_features·(1 − sparsity))`` outputs. The authors' gate runs this as an RNN
    with no recurrent path; it is a per-token projection, and here its sparsity is real.

    Args:
        in_features: input width; x has shape ``(..., in_features)``.
        out_features: output width; y has shape ``(..., out_features)``.
        sparsity: fraction of sensory synapses removed, in [0, 1).
        seed: wiring seed.
    """

    def __init__(self, in_features: int, out_features: int, *, sparsity: float = 0.5, seed: int = 22222):
        super().__init__()
        wiring = ncp_wiring(in_features, out_features, 1, 1, sparsity=sparsity, seed=seed)
        polarity = wiring.sensory_adjacency_matrix[:, wiring.get_neurons_of_layer(0)]
        mask, weight = _signed_init(polarity)
        self.register_buffer("mask", mask)
        self.weight = nn.Parameter(weight)
        self.bias = nn.Parameter(torch.zeros(out_features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Apply the masked map to ``x`` of shape ``(..., in_features)``."""
        return x @ (self.weight * self.mask) + self.bias


def _split_units(units: int, n_motor: int) -> tuple[int, int]:
    """AutoNCP's split of ``units − n_motor`` into (inter, command): command = max(int(0.4·rest), 1)."""
    rest = units - n_motor
    n_command = max(int(0.4 * rest), 1)
    if rest - n_command < 1:
        raise ValueError(f"units: expected at least n_motor + 2 = {n_motor + 2} neurons, found {units}")
    return rest - n_command, n_command


class NCPBackbone(nn.Module):
    """Layered masked pass inputs → inter → command → motor with two heads φ and ω (NAC Eqs. 14–16).

    h_i = tanh(u (W_in ⊙ M_in) + b_i), h_c = tanh(h_i (W_ic ⊙ M_ic) + b_c), h_m = tanh(h_c (W_cm ⊙ M_cm) + b_m),
    φ = σ(h_m·w_φ + b_φ) (Eq. 15), ω = softplus(h_m·w_ω + b_ω) + ε (Eq. 16). Each attention head has its own
    weights and its own wiring (seed + head). The recurrent command synapses are not used: this is one
    feed-forward pass, as a one-step NCP from a zero state would be if its signal reached the motor group.

    Because the first layer is linear in u = [q; k], W_in u = W_q q + W_k k: :meth:`query_part` and
    :meth:`key_part` compute the two halves once per token and :meth:`gates` adds them only for the pairs.

    Args:
        d_head: per-head width D; a pair input u has 2·D entries.
        num_heads: H.
        units: inter + command + motor neurons.
        n_motor: motor neurons.
        sparsity: fraction of synapses removed, in [0, 1).
        eps: ε > 0 in Eq. 16.
    """

    def __init__(self, d_head: int, num_heads: int, *, units: int, n_motor: int, sparsity: float = 0.5,
                 eps: float = 1e-3, seed: int = 22222):
        super().__init__()
        n_inter, n_command = _split_units(units, n_motor)
        inits: dict[str, list] = {"in": [], "ic": [], "cm": []}  # per head: (mask, weight)
        for h in range(num_heads):
            w = ncp_wiring(2 * d_head, n_inter, n_command, n_motor, sparsity=sparsity, seed=seed + h)
            inter, command, motor = (w.get_neurons_of_layer(i) for i in range(3))
            for key, polarity in (("in", w.sensory_adjacency_matrix[:, inter]),
                                  ("ic", w.adjacency_matrix[np.ix_(inter, command)]),
                                  ("cm", w.adjacency_matrix[np.ix_(command, motor)])):
                inits[key].append(_signed_init(polarity))
        for key, pairs in inits.items():
            masks, weights = zip(*pairs)
            self.register_buffer(f"mask_{key}", torch.stack(masks))
            setattr(self, f"w_{key}", nn.Parameter(torch.stack(weights)))
        self.b_in = nn.Parameter(torch.zeros(num_heads, n_inter))
        self.b_ic = nn.Parameter(torch.zeros(num_heads, n_command))
        self.b_cm = nn.Parameter(torch.zeros(num_heads, n_motor))
        self.w_phi = nn.Parameter(torch.randn(num_heads, n_motor) / math.sqrt(n_motor))
        self.b_phi = nn.Parameter(torch.zeros(num_heads))
        self.w_omega = nn.Parameter(torch.randn(num_heads, n_motor) / math.sqrt(n_motor))
        # log(e − 1) so that softplus(b_ω) + ε ≈ 1 at initialisation: time constants of order one.
        self.b_omega = nn.Parameter(torch.full((num_heads,), math.log(math.e - 1.0)))
        self.d_head, self.eps = d_head, eps

    def _w(self, key: str) -> torch.Tensor:
        return getattr(self, f"w_{key}") * getattr(self, f"mask_{key}")

    def query_part(self, q: torch.Tensor) -> torch.Tensor:
        """W_q q + b_i for ``q`` of shape ``(batch, heads, T_q, D)`` → ``(batch, heads, T_q, n_inter)``."""
        return torch.einsum("bhtd,hdn->bhtn", q, self._w("in")[:, : self.d_head]) + self.b_in[:, None]

    def key_part(self, k: torch.Tensor) -> torch.Tensor:
        """W_k k for ``k`` of shape ``(batch, heads, T_k, D)`` → ``(batch, heads, T_k, n_inter)``."""
        return torch.einsum("bhtd,hdn->bhtn", k, self._w("in")[:, self.d_head:])

    def gates(self, pre: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(φ, ω) ``(batch, heads, T_q, P)`` from inter pre-activations ``(batch, heads, T_q, P, n_inter)``."""
        h = torch.tanh(pre)
        h = torch.tanh(torch.einsum("bhtpn,hnm->bhtpm", h, self._w("ic")) + self.b_ic[:, None, None])
        h = torch.tanh(torch.einsum("bhtpn,hnm->bhtpm", h, self._w("cm")) + self.b_cm[:, None, None])
        phi = torch.sigmoid(torch.einsum("bhtpm,hm->bhtp", h, self.w_phi) + self.b_phi[:, None, None])
        omega = nn.functional.softplus(
            torch.einsum("bhtpm,hm->bhtp", h, self.w_omega) + self.b_omega[:, None, None]) + self.eps
        return phi, omega

    def forward(self, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(φ, ω) for concatenated pairs ``u = [q; k]`` of shape ``(batch, heads, T_q, P, 2·D)`` (plain path)."""
        pre = torch.einsum("bhtpd,hdn->bhtpn", u, self._w("in")) + self.b_in[:, None, None]
        return self.gates(pre)
