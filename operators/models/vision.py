"""The CHONN vision backbone (``chonn_vision``) and its convolutional twin (``conv_vision``).

A four-stage hierarchical classifier, as CHONN's Methods ("Large-scale visual recognition") describe it:

- **stem**: two 3×3 convolutions of stride 2 (width/2, then width) with channel-wise normalisation and a
  GELU between them: patch size (effective stride) 4;
- **stages** of widths ``[w, 2w, 4w, 8w]``; between them a 3×3 convolution of stride 2 and a
  channel-wise normalisation;
- **blocks**: ``X + DropPath(Routing(Norm(X)))``, then ``X + DropPath(MLP(Norm(X)))`` with an MLP of
  ratio 4 (1×1 convolutions, GELU); drop-path rates rise linearly from 0 to ``drop_path`` (0.2) over
  the blocks;
- **head**: channel-wise normalisation of every token, then global average pooling, then a linear classifier
  (in this order, as the paper lists them and VMamba's classifier applies them).

``chonn_vision``'s routing is :class:`circuitop.routing.KirchhoffRouting2d` (a depthwise convolution,
then the Cascaded Kirchhoff Block; ``routing`` picks the ablation variant, default the paper's final
``serial_constrained``). ``conv_vision`` is the same network with the routing replaced by a plain
convolutional mixer (1×1, depthwise k×k, GELU, 1×1): the baseline of the same size and training that
differs only in the routing. Channel-wise normalisation is a LayerNorm over the channels of a
channel-first field.

Sizes (``size``): ``tiny`` (96, [2, 2, 6, 2]), ``small`` (128, [2, 2, 4, 2]) and ``base``
(128, [2, 2, 9, 2]) as in the paper; ``cpu`` (32, [1, 1, 3, 1], d_state 8) trains on a CPU.
Inputs of any size are accepted (sizes that are not multiples of 32 are rounded by the strided convolutions).

Example:
    >>> model = build_chonn_vision(3, 1000, VisionConfig(size="tiny"))
    >>> model(torch.randn(1, 3, 224, 224)).shape
    torch.Size([1, 1000])
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from circuitop.routing import ROUTINGS, ChannelNorm, KirchhoffRouting2d

__all__ = ["SIZES", "VisionConfig", "ConvVisionConfig", "HierarchicalClassifier", "build_chonn_vision",
           "build_conv_vision", "count_flops", "Flops"]

#: size → (embedding width, stage depths, d_state of the cells)
SIZES = {"tiny": (96, (2, 2, 6, 2), 16), "small": (128, (2, 2, 4, 2), 16), "base": (128, (2, 2, 9, 2), 16),
         "cpu": (32, (1, 1, 3, 1), 8)}


@dataclass(frozen=True)
class VisionConfig:
    """``chonn_vision``: ``size`` (:data:`SIZES`), ``routing`` (:data:`circuitop.routing.ROUTINGS`),
    the maximum ``drop_path`` rate and the MLP ratio. ``d_state`` 0 takes the size's."""

    size: str = "tiny"
    routing: str = "serial_constrained"
    drop_path: float = 0.2
    mlp_ratio: float = 4.0
    d_state: int = 0


@dataclass(frozen=True)
class ConvVisionConfig:
    """``conv_vision``: ``size`` and the rates of :class:`VisionConfig`; the mixer's depthwise ``kernel``."""

    size: str = "tiny"
    drop_path: float = 0.2
    mlp_ratio: float = 4.0
    kernel: int = 7


def _drop_path(x: torch.Tensor, rate: float, training: bool) -> torch.Tensor:
    """Stochastic depth: each sample's branch is dropped with probability ``rate`` (kept ones scaled)."""
    if not training or rate == 0.0:
        return x
    keep = x.new_empty((x.shape[0],) + (1,) * (x.dim() - 1)).bernoulli_(1.0 - rate)
    return x * keep / (1.0 - rate)


class ConvMixer2d(nn.Module):
    """The convolutional baseline's routing: 1×1, depthwise ``kernel``², GELU, 1×1 (same shape)."""

    def __init__(self, dim: int, kernel: int):
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(dim, dim, 1), nn.Conv2d(dim, dim, kernel, padding=kernel // 2, groups=dim),
                                 nn.GELU(), nn.Conv2d(dim, dim, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class _Block(nn.Module):
    def __init__(self, dim: int, mixer: nn.Module, mlp_ratio: float, drop_path: float):
        super().__init__()
        hidden = int(round(dim * mlp_ratio))
        self.norm1, self.mixer, self.norm2 = ChannelNorm(dim), mixer, ChannelNorm(dim)
        self.mlp = nn.Sequential(nn.Conv2d(dim, hidden, 1), nn.GELU(), nn.Conv2d(hidden, dim, 1))
        self.drop_path = drop_path

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + _drop_path(self.mixer(self.norm1(x)), self.drop_path, self.training)
        return x + _drop_path(self.mlp(self.norm2(x)), self.drop_path, self.training)


class HierarchicalClassifier(nn.Module):
    """Images ``(batch, in_channels, h, w)`` → logits ``(batch, num_classes)`` (module docstring).

    Args:
        in_channels, num_classes: image channels in, classes out.
        width: the first stage's width (the embedding dimension); stage ``s`` has ``width · 2^s``.
        depths: blocks per stage (four stages).
        mixer: ``mixer(dim)`` builds a block's routing module ``(batch, dim, h, w)`` → same.
        mlp_ratio, drop_path: the MLP's hidden width over the block's; the largest drop-path rate.
    """

    def __init__(self, in_channels: int, num_classes: int, *, width: int, depths: tuple[int, ...], mixer,
                 mlp_ratio: float = 4.0, drop_path: float = 0.2):
        super().__init__()
        if len(depths) != 4 or min(depths) < 1 or width < 2:
            raise ValueError(f"expected four stage depths >= 1 and a width >= 2, found {depths}, {width}")
        if not 0.0 <= drop_path < 1.0 or mlp_ratio <= 0:
            raise ValueError(f"drop_path, mlp_ratio: expected [0, 1) and > 0, found {drop_path}, {mlp_ratio}")
        dims = [width * 2 ** s for s in range(4)]
        self.stem = nn.Sequential(nn.Conv2d(in_channels, width // 2, 3, stride=2, padding=1), ChannelNorm(width // 2),
                                  nn.GELU(), nn.Conv2d(width // 2, width, 3, stride=2, padding=1), ChannelNorm(width))
        rates = torch.linspace(0.0, drop_path, sum(depths)).tolist()
        self.stages, self.downsample = nn.ModuleList(), nn.ModuleList()
        for s, (dim, depth) in enumerate(zip(dims, depths)):
            first = sum(depths[:s])
            self.stages.append(nn.Sequential(*(_Block(dim, mixer(dim), mlp_ratio, rates[first + k])
                                               for k in range(depth))))
            if s < 3:
                self.downsample.append(nn.Sequential(nn.Conv2d(dim, 2 * dim, 3, stride=2, padding=1), ChannelNorm(2 * dim)))
        # the head normalises every token, then pools, then classifies (CHONN Methods: "normalization, global
        # average pooling and a linear classifier"; VMamba's classifier: norm, avgpool, flatten, head)
        self.head_norm = ChannelNorm(dims[-1])
        self.head = nn.Linear(dims[-1], num_classes)
        self.dims, self.depths = tuple(dims), tuple(depths)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """The last stage's feature map ``(batch, 8·width, h/32, w/32)``."""
        if x.dim() != 4:
            raise ValueError(f"x: expected images (batch, channels, h, w), found shape {tuple(x.shape)}")
        x = self.stem(x)
        for s, stage in enumerate(self.stages):
            x = stage(x)
            if s < 3:
                x = self.downsample[s](x)
        return x

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.head_norm(self.features(x)).mean((2, 3)))


def _size(size: str) -> tuple[int, tuple[int, ...], int]:
    if size not in SIZES:
        raise ValueError(f"size: expected one of {sorted(SIZES)}, found {size!r}")
    return SIZES[size]


def build_chonn_vision(in_channels: int, num_classes: int, config: VisionConfig) -> HierarchicalClassifier:
    """``chonn_vision``: the backbone with Kirchhoff routing (``config.routing``)."""
    width, depths, d_state = _size(config.size)
    if config.routing not in ROUTINGS:
        raise ValueError(f"routing: expected one of {ROUTINGS}, found {config.routing!r}")
    d_state = config.d_state or d_state
    return HierarchicalClassifier(in_channels, num_classes, width=width, depths=depths,
                                  mixer=lambda dim: KirchhoffRouting2d(dim, routing=config.routing, d_state=d_state),
                                  mlp_ratio=config.mlp_ratio, drop_path=config.drop_path)


def build_conv_vision(in_channels: int, num_classes: int, config: ConvVisionConfig) -> HierarchicalClassifier:
    """``conv_vision``: the same backbone with the convolutional mixer (the baseline)."""
    width, depths, _ = _size(config.size)
    if config.kernel < 1 or config.kernel % 2 == 0:
        raise ValueError(f"kernel: expected an odd positive size (the mixer keeps the map's size), found {config.kernel}")
    return HierarchicalClassifier(in_channels, num_classes, width=width, depths=depths,
                                  mixer=lambda dim: ConvMixer2d(dim, config.kernel), mlp_ratio=config.mlp_ratio,
                                  drop_path=config.drop_path)


@dataclass(frozen=True)
class Flops:
    """Forward FLOPs of one batch: ``counted`` by :class:`torch.utils.flop_counter.FlopCounterMode`
    (convolutions and matrix products, a multiply-add counted as 2), and ``scan``, the Kirchhoff scans,
    which run in the fused kernel that the counter does not see
    (:meth:`circuitop.KirchhoffRouting2d.scan_flops`). Papers that quote fvcore's numbers count a multiply-add
    as 1: compare ``total / 2`` with them."""

    counted: int
    scan: int

    @property
    def total(self) -> int:
        return self.counted + self.scan


def count_flops(model: nn.Module, input_shape: tuple[int, ...]) -> Flops:
    """The forward :class:`Flops` of ``model`` on zeros of ``input_shape`` (e.g. ``(1, 3, 224, 224)``)."""
    # imported here: the counter imports triton, which must not be loaded before a test or user sets
    # TRITON_INTERPRET (the Triton kernels' CPU interpreter)
    from torch.utils.flop_counter import FlopCounterMode

    scan = 0

    def count_scan(module: KirchhoffRouting2d, args, _output) -> None:
        nonlocal scan
        scan += module.scan_flops(args[0].shape)

    routings = [m for m in model.modules() if isinstance(m, KirchhoffRouting2d)]
    hooks = [m.register_forward_hook(count_scan) for m in routings]
    was_training = model.training
    try:
        model.eval()
        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            model(torch.zeros(input_shape, device=next(model.parameters()).device))
    finally:
        model.train(was_training)
        for hook in hooks:
            hook.remove()
    return Flops(int(counter.get_total_flops()), int(scan))
