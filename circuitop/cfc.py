"""Closed-form continuous-time (CfC) cell and sequence model with per-sample irregular step sizes.

CfC (Hasani et al. 2022; recalled in PDNA, Eq. 2) replaces the LTC ODE solve by
``h(t) = sigma(-f t) * g + (1 - sigma(-f t)) * h0``. As in ``ncps``, a backbone MLP reads ``[x, h]`` and
heads give ``ff1, ff2, t_a, t_b``; with ``t_i = sigmoid(t_a dt + t_b)`` the modes are

- ``"default"``: ``h' = tanh(ff1) (1 - t_i) + t_i tanh(ff2)`` (gated interpolation),
- ``"no_gate"``: ``h' = tanh(ff1) + t_i tanh(ff2)``,
- ``"pure"``:    ``h' = -A exp(-dt (|w_tau| + |ff1|)) ff1 + A`` (direct solution approximation).

The backbone's first layer is split into an input part, computed for all time steps at once outside the
loop, and a recurrent part; the four heads are one fused linear map. ``dt`` is ``(batch, time)`` and
broadcasts per sample (``ncps`` squeezes it to ``(batch,)``, which only broadcasts for batch 1).
"""

from __future__ import annotations

import torch
from torch import nn

from circuitop.sequence import check_sequence, check_step, initial_state

__all__ = ["CfCCell", "CfC", "LeCunTanh"]

MODES = ("default", "no_gate", "pure")


class LeCunTanh(nn.Module):
    """``1.7159 tanh(0.666 x)``, the ncps default backbone activation."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 1.7159 * torch.tanh(0.666 * x)


_ACTIVATIONS = {"lecun_tanh": LeCunTanh, "silu": nn.SiLU, "relu": nn.ReLU, "tanh": nn.Tanh, "gelu": nn.GELU}


class CfCCell(nn.Module):
    """One CfC step (see the module docstring for the equations).

    Args:
        in_channels: input features. hidden: state size.
        mode: ``"default"``, ``"no_gate"`` or ``"pure"``.
        backbone_units / backbone_layers / backbone_dropout / activation: the backbone MLP
            (``backbone_layers=0``: heads read ``[x, h]`` directly).
    """

    def __init__(self, in_channels: int, hidden: int, *, mode: str = "default", backbone_units: int = 128,
                 backbone_layers: int = 1, backbone_dropout: float = 0.0, activation: str = "lecun_tanh"):
        super().__init__()
        if mode not in MODES:
            raise ValueError(f"mode: expected one of {MODES}, found {mode!r}")
        if activation not in _ACTIVATIONS:
            raise ValueError(f"activation: expected one of {sorted(_ACTIVATIONS)}, found {activation!r}")
        self.in_channels, self.hidden, self.mode, self.activation = in_channels, hidden, mode, activation
        n_heads = 1 if mode == "pure" else 4
        width = backbone_units if backbone_layers > 0 else n_heads * hidden
        self.in_proj = nn.Linear(in_channels, width)  # input part of the first layer: all steps at once
        self.rec_proj = nn.Linear(hidden, width, bias=False)  # recurrent part: in the loop
        layers = []
        for _ in range(1, backbone_layers):
            layers += [nn.Linear(backbone_units, backbone_units), _ACTIVATIONS[activation]()]
            layers += [nn.Dropout(backbone_dropout)] if backbone_dropout > 0 else []
        self.backbone = nn.Sequential(_ACTIVATIONS[activation](), *layers) if backbone_layers > 0 else None
        self.heads = nn.Linear(backbone_units, n_heads * hidden) if backbone_layers > 0 else None
        if mode == "pure":
            self.w_tau = nn.Parameter(torch.zeros(1, hidden))
            self.A = nn.Parameter(torch.ones(1, hidden))
        for w in self.parameters():  # ncps: xavier-uniform on every matrix
            if w.dim() == 2 and w.shape[0] > 1:
                nn.init.xavier_uniform_(w)

    @classmethod
    def from_ncps(cls, cell) -> "CfCCell":
        """Our cell with the settings and parameter values of an ``ncps.torch.CfCCell``."""
        if cell.sparsity_mask is not None:
            raise ValueError("cell: expected an ncps CfCCell without sparsity_mask (wired cells unsupported)")
        linears = [m for m in cell.backbone if isinstance(m, nn.Linear)] if cell.backbone_layers > 0 else []
        acts = [name for name, module in _ACTIVATIONS.items() if linears and isinstance(cell.backbone[1], module)]
        dropout = [m.p for m in (cell.backbone or []) if isinstance(m, nn.Dropout)]
        ours = cls(cell.input_size, cell.hidden_size, mode=cell.mode, backbone_layers=cell.backbone_layers,
                   backbone_units=linears[0].out_features if linears else 128,
                   activation=acts[0] if acts else "lecun_tanh", backbone_dropout=dropout[0] if dropout else 0.0)
        heads = [cell.ff1] if cell.mode == "pure" else [cell.ff1, cell.ff2, cell.time_a, cell.time_b]
        head_w = torch.cat([h.weight for h in heads]).detach()
        head_b = torch.cat([h.bias for h in heads]).detach()
        first_w, first_b = (linears[0].weight.detach(), linears[0].bias.detach()) if linears else (head_w, head_b)
        with torch.no_grad():
            ours.in_proj.weight.copy_(first_w[:, : cell.input_size])
            ours.in_proj.bias.copy_(first_b)
            ours.rec_proj.weight.copy_(first_w[:, cell.input_size:])
            if linears:
                ours.heads.weight.copy_(head_w), ours.heads.bias.copy_(head_b)
                ours_linears = [m for m in ours.backbone if isinstance(m, nn.Linear)]
                for mine, theirs in zip(ours_linears, linears[1:]):
                    mine.load_state_dict(theirs.state_dict())
            if cell.mode == "pure":
                ours.w_tau.copy_(cell.w_tau), ours.A.copy_(cell.A)
        return ours

    def step(self, pre: torch.Tensor, h: torch.Tensor, dt: torch.Tensor) -> torch.Tensor:
        """New state ``(batch, hidden)`` from the input part ``pre = in_proj(x)``, ``h`` and ``dt`` ``(batch, 1)``."""
        z = torch.addmm(pre, h, self.rec_proj.weight.T)
        if self.backbone is not None:
            z = self.heads(self.backbone(z))
        if self.mode == "pure":
            return -self.A * torch.exp(-dt * (self.w_tau.abs() + z.abs())) * z + self.A
        n = self.hidden
        ff = torch.tanh(z[:, : 2 * n])
        t_interp = torch.sigmoid(torch.addcmul(z[:, 3 * n:], z[:, 2 * n: 3 * n], dt))
        if self.mode == "no_gate":
            return torch.addcmul(ff[:, :n], t_interp, ff[:, n:])
        return torch.lerp(ff[:, :n], ff[:, n:], t_interp)

    def forward(self, x: torch.Tensor, h: torch.Tensor, dt: torch.Tensor | float = 1.0) -> torch.Tensor:
        """One step: ``x`` ``(batch, in)``, ``h`` ``(batch, hidden)``, ``dt`` scalar or ``(batch,)`` -> new ``h``."""
        return self.step(self.in_proj(x), h, check_step(x, dt).unsqueeze(1))


class CfC(nn.Module):
    """A CfC network over a sequence with per-sample irregular step sizes.

    Args:
        in_channels: input features. hidden: state size.
        proj_size: optional linear output projection (as ``ncps.torch.CfC``).
        **cell_kwargs: keyword settings of :class:`CfCCell`.

    Example:
        >>> cfc = CfC(16, 32, mode="no_gate")
        >>> y, h = cfc(torch.randn(4, 50, 16), dt=torch.rand(4, 50) + 0.1)   # y: (4, 50, 32)
    """

    def __init__(self, in_channels: int, hidden: int, *, proj_size: int | None = None, **cell_kwargs):
        super().__init__()
        self.cell = CfCCell(in_channels, hidden, **cell_kwargs)
        self.proj = nn.Linear(hidden, proj_size) if proj_size is not None else nn.Identity()
        self.in_channels, self.hidden = in_channels, hidden
        self.out_channels = hidden if proj_size is None else proj_size

    @classmethod
    def from_ncps(cls, model) -> "CfC":
        """Our sequence model with the parameters of an ``ncps.torch.CfC`` (unwired, no mixed memory)."""
        if model.use_mixed:
            raise ValueError("model: expected an ncps CfC without mixed_memory, found mixed_memory=True")
        proj = model.fc if isinstance(model.fc, nn.Linear) else None
        ours = cls(model.input_size, model.state_size, proj_size=proj.out_features if proj else None)
        ours.cell = CfCCell.from_ncps(model.rnn_cell)
        if proj is not None:
            ours.proj.load_state_dict(proj.state_dict())
        return ours

    def states(self, x: torch.Tensor, dt: torch.Tensor | None = None, h0: torch.Tensor | None = None, *,
               feedback=None) -> torch.Tensor:
        """All hidden states ``(batch, time, hidden)`` for ``x`` ``(batch, time, in)``, ``dt`` ``(batch, time)``;
        ``feedback(h, k)``, if given, replaces the state ``h`` of step ``k`` before the next step reads it."""
        dt = check_sequence(x, dt, self.in_channels).unsqueeze(-1)
        pre = self.cell.in_proj(x)  # input part of the first layer, for all steps at once
        h = initial_state(x, h0, self.hidden)
        states = []
        for k in range(x.shape[1]):
            h = self.cell.step(pre[:, k], h, dt[:, k])
            h = h if feedback is None else feedback(h, k)
            states.append(h)
        return torch.stack(states, 1)

    def forward(self, x: torch.Tensor, dt: torch.Tensor | None = None,
                h0: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Returns ``(outputs (batch, time, out_channels), last state (batch, hidden))``."""
        states = self.states(x, dt, h0)
        return self.proj(states), states[:, -1]
