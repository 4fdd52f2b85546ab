"""Cascaded Kirchhoff Block (CKB): ``order`` serial Kirchhoff cells inside one residual block.

Following CHONN, Eqs. 29–38 (and Eqs. 5–7 / 24–28 for why a cascade of N first-order
cells is an N-th-order operator):

    X̃ = Norm(X);  u = SiLU(DSConv(W_u X̃));  g = SiLU(W_g X̃)                    (Eq. 31)
    y⁽¹⁾ = K₁(u),  y⁽ʳ⁾ = K_r(y⁽ʳ⁻¹⁾), r = 2..N                                  (Eq. 35)
    ȳ = Σ_r y⁽ʳ⁾ (Eq. 36);   Y = X + W_out(ȳ ⊙ g)                               (Eqs. 37–38)

The output projection W_out maps the expanded width ``expand · d_model`` back to ``d_model``
(the paper writes Y = X + ȳ ⊙ g, which needs ``expand = 1``; W_out is Mamba's out_proj).
The depthwise-separable convolution is causal (left padding), so the block is causal along the
sequence. ``order = 0`` is the 0-order baseline of the Poisson ablation (Fig. 4g): no cell at all,
and the block is exactly the identity Y = X.

:class:`CascadedKirchhoffBlock1d` and :class:`CascadedKirchhoffBlock2d` apply the block to fields
``(batch, channels, *spatial)`` by scanning the flattened (row-major) spatial length, as the paper does.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from . import _native
from .knc import KirchhoffCell, check_steps, check_input

__all__ = ["CascadedKirchhoffBlock", "CascadedKirchhoffBlock1d", "CascadedKirchhoffBlock2d", "causal_depthwise_conv",
           "gated_sum", "to_scan_sequences", "from_scan_sequences"]


class CascadedKirchhoffBlock(nn.Module):
    """Residual block of ``order`` cascaded Kirchhoff cells on ``(batch, length, d_model)`` (Eqs. 29–38).

    Args:
        d_model: channels in and out.
        order: number N of serial Kirchhoff cells; 0 makes the block the identity.
        d_state: latent potentials per channel in each cell.
        expand: inner width is ``expand * d_model``.
        conv_kernel: kernel of the causal depthwise convolution.
        dt_min, dt_max: range of the cells' initial step sizes.

    Example:
        >>> block = CascadedKirchhoffBlock(16, order=2, d_state=8)
        >>> block(torch.randn(2, 64, 16)).shape
        torch.Size([2, 64, 16])
    """

    def __init__(self, d_model: int, *, order: int = 2, d_state: int = 16, expand: int = 2, conv_kernel: int = 4,
                 dt_min: float = 1e-3, dt_max: float = 1e-1):
        super().__init__()
        if order < 0:
            raise ValueError(f"order: expected a non-negative number of cells, found {order}")
        if d_model < 1 or expand < 1 or conv_kernel < 1:
            raise ValueError(f"d_model, expand, conv_kernel: expected positive, found {d_model}, {expand}, "
                             f"{conv_kernel}")
        self.d_model, self.order = d_model, order
        if order == 0:
            return
        d_inner = expand * d_model
        self.norm = nn.LayerNorm(d_model)
        self.in_proj = nn.Linear(d_model, 2 * d_inner)  # W_u and W_g, fused
        self.conv_depthwise = nn.Conv1d(d_inner, d_inner, conv_kernel, groups=d_inner)
        self.conv_pointwise = nn.Conv1d(d_inner, d_inner, 1)
        cell = dict(d_state=d_state, dt_min=dt_min, dt_max=dt_max)
        self.cells = nn.ModuleList(KirchhoffCell(d_inner, **cell) for _ in range(order))
        self.out_proj = nn.Linear(d_inner, d_model)

    def forward(self, x: torch.Tensor, dt: torch.Tensor | None = None) -> torch.Tensor:
        """Map ``x (batch, length, d_model)`` to the same shape; ``dt (batch, length)`` is passed to
        every cell as the real step sizes (irregular sampling)."""
        check_input(x, self.d_model, "x")
        check_steps(dt, x.shape[:2])
        if self.order == 0:
            return x
        return x + self.out_proj(self._cascade(x, dt))

    def _cascade(self, x: torch.Tensor, dt: torch.Tensor | None) -> torch.Tensor:
        """ȳ ⊙ g of Eqs. 31–37, ``(batch, length, expand * d_model)``."""
        x_norm, d_inner = self.norm(x), self.conv_pointwise.in_channels
        # W_u and W_g applied separately: two contiguous outputs (chunks of one would be strided views)
        weight, bias = self.in_proj.weight, self.in_proj.bias
        u = F.linear(x_norm, weight[:d_inner], bias[:d_inner])
        g = F.linear(x_norm, weight[d_inner:], bias[d_inner:])
        u = causal_depthwise_conv(u, self.conv_depthwise.weight, self.conv_depthwise.bias)
        u = F.silu(F.linear(u, self.conv_pointwise.weight[..., 0], self.conv_pointwise.bias))
        outputs = [u]
        for cell in self.cells:  # x was checked once in forward; the cells skip their own checks
            outputs.append(cell.forward_unchecked(outputs[-1], dt))
        return gated_sum(outputs[1:], g)


def causal_depthwise_conv(u: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """``nn.Conv1d(groups=channels)`` with ``kernel - 1`` zeros of left padding, on ``(batch, length,
    channels)`` without transposing: y_t = bias + Σ_k weight[:, 0, k] · u_{t - (kernel - 1) + k}.

    Both paths keep the sequence layout of the cells (the Conv1d route needs a transposed copy in and
    out, which cost more than the convolution itself): CPU float32/float64 tensors take one native
    pass forward and one backward (``csrc/kirchhoff.cpp``); other devices and dtypes a multiply-add
    per tap on shifted views, whose backward accumulates the taps into one buffer.

    Args:
        u: ``(batch, length, channels)``.
        weight: ``(channels, 1, kernel)``, as ``nn.Conv1d.weight``.
        bias: ``(channels,)`` or None.
    """
    taps = weight[:, 0, :]  # (channels, kernel)
    bias = torch.zeros_like(taps[:, 0]) if bias is None else bias
    ops = _native.kirchhoff_for(u, taps, bias)
    if ops is not None:
        return _NativeCausalDepthwiseFn.apply(ops, u, taps, bias)
    return _CausalDepthwiseFn.apply(u, taps, bias)


class _NativeCausalDepthwiseFn(torch.autograd.Function):
    """:class:`_CausalDepthwiseFn` in one pass forward and one backward of the compiled ``ops``
    (``csrc/kirchhoff.cpp``; the backward uses the module the forward used)."""

    @staticmethod
    def forward(ctx, ops, u, taps, bias):
        u = u.contiguous()
        ctx.save_for_backward(u, taps)
        ctx.ops = ops
        return ops.conv_forward(u, taps, bias)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        u, taps = ctx.saved_tensors
        return (None, *ctx.ops.conv_backward(u, taps, grad.contiguous()))


class _CausalDepthwiseFn(torch.autograd.Function):
    """y = bias + Σ_k taps[:, k] · shift_k(u) on ``(batch, length, channels)``; see :func:`causal_depthwise_conv`."""

    @staticmethod
    def forward(ctx, u, taps, bias):
        kernel, length = taps.shape[1], u.shape[1]
        padded = F.pad(u, (0, 0, kernel - 1, 0))
        out = torch.addcmul(bias, padded[:, :length], taps[:, 0])
        for k in range(1, kernel):
            out.addcmul_(padded[:, k:k + length], taps[:, k])
        ctx.save_for_backward(padded, taps)
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        padded, taps = ctx.saved_tensors
        kernel, length = taps.shape[1], grad.shape[1]
        grad_padded = torch.zeros_like(padded)
        for k in range(kernel):
            grad_padded[:, k:k + length].addcmul_(grad, taps[:, k])
        grad_taps = torch.stack([(grad * padded[:, k:k + length]).sum((0, 1)) for k in range(kernel)], 1)
        return grad_padded[:, kernel - 1:], grad_taps, grad.sum((0, 1))


def gated_sum(outputs: list[torch.Tensor], g: torch.Tensor) -> torch.Tensor:
    """ȳ ⊙ SiLU(g) with ȳ = Σ_r y⁽ʳ⁾ (Eqs. 36–37): the stage outputs and the gate pre-activation all
    ``(batch, length, d_inner)``; on CPU one native pass (``csrc/kirchhoff.cpp``) forward and one
    backward instead of torch's sum, SiLU and product and their gradients."""
    ops = _native.kirchhoff_for(g, *outputs)
    if ops is not None:
        return _NativeGatedSumFn.apply(ops, g, *outputs)
    return sum(outputs[1:], outputs[0]) * F.silu(g)


class _NativeGatedSumFn(torch.autograd.Function):
    """:func:`gated_sum` in the compiled ``ops`` (the backward uses the module the forward used);
    every stage output receives the same gradient."""

    @staticmethod
    def forward(ctx, ops, g, *outputs):
        g, outputs = g.contiguous(), [y.contiguous() for y in outputs]
        ctx.save_for_backward(g, *outputs)
        ctx.ops = ops
        return ops.gate_forward(g, outputs)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        g, *outputs = ctx.saved_tensors
        grad_total, grad_g = ctx.ops.gate_backward(g, outputs, grad.contiguous())
        return (None, grad_g, *[grad_total] * len(outputs))


class _FieldBlock(nn.Module):
    """A :class:`CascadedKirchhoffBlock` on fields ``(batch, channels, *spatial)`` with ``n_spatial`` axes.

    The field is flattened row-major (last spatial axis fastest) into a sequence of length
    prod(spatial). With ``transpose`` the reversed axis order (column-major for 2D) is scanned too;
    with ``bidirectional`` every order is also scanned backwards. The block (shared weights) runs on
    every scan order and the outputs are averaged, so Y = X + mean of the branch outputs.
    """

    n_spatial = 0

    def __init__(self, d_model: int, *, bidirectional: bool = False, transpose: bool = False, **block):
        super().__init__()
        self.block = CascadedKirchhoffBlock(d_model, **block)
        self.bidirectional, self.transpose = bidirectional, transpose

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Map ``x (batch, d_model, *spatial)`` to the same shape."""
        n, d_model = self.n_spatial, self.block.d_model
        if x.dim() != 2 + n or x.shape[1] != d_model:
            dims = ", ".join(["batch", str(d_model)] + [f"s{i}" for i in range(n)])
            raise ValueError(f"x: expected shape ({dims}), found {tuple(x.shape)}")
        orders = dict(transpose=self.transpose, bidirectional=self.bidirectional)
        # every scan order in one call of the block (stacked along the batch): the block treats each
        # sequence on its own, so this is the same as one call per order
        fields = from_scan_sequences(self.block(to_scan_sequences(x, **orders)), x.shape, **orders)
        return fields[0] if len(fields) == 1 else fields.mean(0)


def _axis_orders(n_spatial: int, transpose: bool) -> list[list[int]]:
    axes = list(range(2, 2 + n_spatial))
    return [axes] + ([axes[::-1]] if transpose and n_spatial > 1 else [])


def to_scan_sequences(x: torch.Tensor, *, transpose: bool = False, bidirectional: bool = False) -> torch.Tensor:
    """The scan orders of a field as sequences stacked along the batch, in one contiguous tensor.

    Orders: row-major (last spatial axis fastest); with ``transpose`` also the reversed axis order
    (column-major in 2D); with ``bidirectional`` each order is followed by itself backwards. So 2D with
    both gives rows, rows reversed, columns, columns reversed (the four scans of visual state-space models).

    Args:
        x: ``(batch, channels, *spatial)``.

    Returns:
        ``(orders · batch, prod(spatial), channels)``, order-major.
    """
    batch, channels = x.shape[:2]
    sequences = []
    for axes in _axis_orders(x.dim() - 2, transpose):
        seq = x.permute([0, *axes, 1]).reshape(batch, -1, channels)
        sequences += [seq, seq.flip(1)] if bidirectional else [seq]
    return torch.cat(sequences)


def from_scan_sequences(y: torch.Tensor, shape: torch.Size, *, transpose: bool = False,
                        bidirectional: bool = False) -> torch.Tensor:
    """Inverse of :func:`to_scan_sequences`: ``y (orders · batch, length, channels)`` back to fields
    ``(orders, batch, channels, *spatial)`` of the field shape ``shape``, each order in place."""
    batch, n_spatial = shape[0], len(shape) - 2
    chunks = iter(y.split(batch))
    fields = []
    for axes in _axis_orders(n_spatial, transpose):
        perm = [0, *axes, 1]
        inverse = sorted(range(len(perm)), key=perm.__getitem__)  # the permutation undoing perm
        for flip in ([False, True] if bidirectional else [False]):
            seq = next(chunks)
            fields.append((seq.flip(1) if flip else seq).reshape([shape[i] for i in perm]).permute(inverse))
    return torch.stack(fields)


class CascadedKirchhoffBlock1d(_FieldBlock):
    """Cascaded Kirchhoff Block on 1D fields ``(batch, d_model, length)`` (scan along the length).

    Keyword arguments are those of :class:`CascadedKirchhoffBlock` plus ``bidirectional``
    (also scan right-to-left and average).
    """

    n_spatial = 1


class CascadedKirchhoffBlock2d(_FieldBlock):
    """Cascaded Kirchhoff Block on 2D fields ``(batch, d_model, x, y)``, scanning the row-major
    flattened length x·y (Eq. 29: L is the flattened spatial length).

    Keyword arguments are those of :class:`CascadedKirchhoffBlock` plus ``transpose`` (also scan
    the column-major order) and ``bidirectional`` (also scan each order backwards); outputs are averaged.

    Example:
        >>> block = CascadedKirchhoffBlock2d(8, order=2, d_state=4, transpose=True)
        >>> block(torch.randn(2, 8, 16, 16)).shape
        torch.Size([2, 8, 16, 16])
    """

    n_spatial = 2
