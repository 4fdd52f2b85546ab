"""The Kirchhoff routing module of CHONN's vision blocks, and the four routings of its ablation.

CHONN (Methods, "Large-scale visual recognition") replaces the first-order routing module of a
hierarchical visual state-space backbone by a Cascaded Kirchhoff Block: a lightweight depthwise
convolution, then two Kirchhoff cells in series, "the second cell receives the current block input
together with the response produced by the previous cell", and "the two stage responses are then
merged". On an (already normalised) field X ``(batch, d_model, h, w)``:

    u = SiLU(DWConv₃ₓ₃(W_u X)),   g = W_g X                                   (CHONN Eq. 31, in 2D)
    y⁽¹⁾ = K₁(u)                                                                (Eq. 35)
    ȳ = routing(u, y⁽¹⁾)                                                        (below)
    Y = W_out(LN(ȳ) ⊙ SiLU(g))                                                  (Eqs. 37–38; the host adds X)

The routings of the ablation (CHONN Fig. 5i and Methods, "Large-scale visual recognition"):

============================  ========================================================  ==============
routing                       ȳ                                                         λ
============================  ========================================================  ==============
``first_order``               y⁽¹⁾ (one cell: the original first-order routing)          exp(log λ) > 0
``parallel``                  y⁽¹⁾ + K₂(u) (a second branch, no stage-to-stage path)     free
``serial``                    y⁽¹⁾ + K₂(u + y⁽¹⁾)                                        free
``serial_constrained``        ½ (y⁽¹⁾ + K₂((1 − γ) u + γ y⁽¹⁾)),  γ = σ(a) ∈ (0, 1)      exp(log λ) > 0
============================  ========================================================  ==============

``first_order`` is the paper's "original baseline", "the standard visual state-space routing block",
whose decay is positive by construction: VMamba's (and Mamba's) A = −exp(A_log), initialised at
A_log = log n (n = 1..d_state, the S4D-real spread). Its cell stores log λ with that initialisation and reads
λ = exp(log λ), the same parametrisation (:class:`circuitop.knc.KirchhoffCell` with ``positive_decay``,
which also floors λ at LAMBDA_MIN = 10⁻⁴: our exact ZOH injection divides by λ, where VMamba's Euler
injection Δ·B does not, so an underflow to 0 would be 0/0; above the floor the two are identical).
``parallel`` and ``serial`` add a second cell, with a free λ in both cells and plain-sum couplings (so
``first_order`` → ``parallel`` changes the branch count and the decay's parametrisation); ``serial_constrained``
adds the circuit constraints to ``serial``.

The circuit constraints of the last row are the KNC's stability and dissipation conditions made
structural: λ = exp(log λ) > 0 (the RC cell's retention 0 < ᾱ ≤ 1 for every step size, CHONN Eq. 20)
and bounded gains (per channel): the interconnection injects no energy: the second cell's
input is a convex combination of its two sources and the merge a mean, so neither exceeds the larger of
its parts. The unconstrained rows store λ itself (initialised at the same λ_n = n), which an update may
drive through zero; their couplings are plain sums. The paper names the constraints but not their form;
this is our reading of them.

The cells scan ``u`` in four orders (rows, rows reversed, columns, columns reversed;
:func:`circuitop.ckb.to_scan_sequences`), as visual state-space models do: a causal scan only sees
what precedes a pixel in its order, and the four orders together let every pixel see the whole image.
The cells' weights are shared by the four orders, which run as one batch through the fused kernel;
their mean is ȳ.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from .ckb import from_scan_sequences, to_scan_sequences
from .knc import KirchhoffCell

__all__ = ["ROUTINGS", "KirchhoffRouting2d", "ChannelNorm"]

#: the routings of the ablation (CHONN Fig. 5i), the paper's final model last
ROUTINGS = ("first_order", "parallel", "serial", "serial_constrained")
_ORDERS = dict(transpose=True, bidirectional=True)
_N_ORDERS = 4  # _ORDERS in 2D: rows and columns, each both ways
#: operations per scan step, channel and state (the count VMamba uses for its selective scan)
_SCAN_FLOPS = 9


class ChannelNorm(nn.LayerNorm):
    """LayerNorm over the channels of a channel-first field ``(batch, channels, *spatial)``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x.movedim(1, -1)).movedim(-1, 1)


class KirchhoffRouting2d(nn.Module):
    """Routing module ``(batch, d_model, h, w)`` → same shape (module docstring).

    Args:
        d_model: channels in and out (the cells keep this hidden width).
        routing: one of :data:`ROUTINGS`.
        d_state: latent potentials per channel in each cell.
        conv_kernel: kernel of the depthwise convolution.

    Example:
        >>> routing = KirchhoffRouting2d(16, routing="serial_constrained", d_state=4)
        >>> routing(torch.randn(2, 16, 8, 8)).shape
        torch.Size([2, 16, 8, 8])
    """

    def __init__(self, d_model: int, *, routing: str = "serial_constrained", d_state: int = 16,
                 conv_kernel: int = 3):
        super().__init__()
        if routing not in ROUTINGS:
            raise ValueError(f"routing: expected one of {ROUTINGS}, found {routing!r}")
        if d_model < 1 or d_state < 1 or conv_kernel < 1 or conv_kernel % 2 == 0:
            raise ValueError(f"d_model, d_state, conv_kernel: expected positive sizes and an odd kernel, "
                             f"found {d_model}, {d_state}, {conv_kernel}")
        self.routing, self.d_model = routing, d_model
        constrained = routing == "serial_constrained"
        positive = constrained or routing == "first_order"  # the λ column of the module docstring
        self.in_proj = nn.Conv2d(d_model, 2 * d_model, 1)  # W_u and W_g
        self.conv = nn.Conv2d(d_model, d_model, conv_kernel, padding=conv_kernel // 2, groups=d_model)
        n_cells = 1 if routing == "first_order" else 2
        self.cells = nn.ModuleList(KirchhoffCell(d_model, d_state=d_state, positive_decay=positive)
                                   for _ in range(n_cells))
        if constrained:
            self.coupling = nn.Parameter(torch.zeros(d_model))  # γ = σ(a), ½ at initialisation
        self.out_norm = ChannelNorm(d_model)
        self.out_proj = nn.Conv2d(d_model, d_model, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x (batch, d_model, h, w)`` → ``(batch, d_model, h, w)``."""
        if x.dim() != 4 or x.shape[1] != self.d_model:
            raise ValueError(f"x: expected shape (batch, {self.d_model}, h, w), found {tuple(x.shape)}")
        u, g = self.in_proj(x).chunk(2, dim=1)
        u = F.silu(self.conv(u))
        merged = self.merge(to_scan_sequences(u, **_ORDERS))
        y = self.out_norm(from_scan_sequences(merged, u.shape, **_ORDERS).mean(0))
        return self.out_proj(y * F.silu(g))

    def scan_flops(self, shape: torch.Size) -> int:
        """FLOPs of the cells' scans on an input of ``shape`` (batch, d_model, h, w), which the fused
        kernel hides from :class:`torch.utils.flop_counter.FlopCounterMode`."""
        batch, channels, h, w = shape
        return _SCAN_FLOPS * _N_ORDERS * len(self.cells) * batch * h * w * channels * self.cells[0].d_state

    def merge(self, u: torch.Tensor) -> torch.Tensor:
        """ȳ of the routing (module docstring) on sequences ``u (batch, length, d_model)``."""
        first = self.cells[0].forward_unchecked(u, None)
        if self.routing == "first_order":
            return first
        if self.routing == "parallel":
            return first + self.cells[1].forward_unchecked(u, None)
        if self.routing == "serial":
            return first + self.cells[1].forward_unchecked(u + first, None)
        gain = torch.sigmoid(self.coupling)
        return 0.5 * (first + self.cells[1].forward_unchecked(u + gain * (first - u), None))  # (1 - γ) u + γ y⁽¹⁾
