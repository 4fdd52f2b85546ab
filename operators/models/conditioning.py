"""Field models conditioned per sample on their PDE's parameters: an embedding that modulates every layer (FiLM).

Each sample's parameters ``p`` (``(batch, P)``, scaled to ``[0, 1]`` on the training range by the run's processor)
become one embedding ``e`` by sinusoidal features and an MLP (as a diffusion model embeds its time, Ho et al.
2020; pdearena's U-Nets embed one scalar so)::

    φ(p) = [p, sin(2^k π p), cos(2^k π p)]_{k < K}        e = W₂ σ(W₁ φ(p) + b₁) + b₂

and every layer output ``h`` of the backbone (``(batch, C, *spatial)``) is modulated by a scale and shift read from
``e`` (FiLM, Perez et al. 2018)::

    h ← h ⊙ (1 + γ_l(e)) + β_l(e)                         (γ_l, β_l) = A_l e + c_l,  A_l = 0, c_l = 0 at start

so a conditioned model starts as its unconditioned backbone. The layers: each Fourier layer's output of ``fno``
(neuraloperator's ``FNOBlocks``, after its activation) and of the host FNO (``chonn_fno``, ``nac_fno``: before the
activation); each encoder stage, the neck and each decoder stage of the U-Nets (``unet``, ``chonn_unet``,
``nac_unet``).

The parameters also act on the time constants of every Kirchhoff cell a model hosts (``chonn_fno``,
``chonn_unet``): in each Cascaded Kirchhoff Block ``l`` every cell's step size (CHONN Eq. 33) is scaled per sample,

    Δ_k ← Δ_k · exp(τ_l(e))                               τ_l = a_l · e + t_l,  a_l = 0, t_l = 0 at start

so its decay per step ``ᾱ_k = exp(−Δ_k e^{τ_l} λ)`` (Eq. 34) is that of time constants ``1/λ`` divided by
``e^{τ_l}``: a parameter that speeds the physics up can shorten the cells' memory (the cells' real step sizes
``dt``, as for irregular sampling). NAC's time constants are not modulated.

Example:
    >>> model = Conditioned(build("fno", 1, 1, n_modes=8), parameters=1)
    >>> model(torch.zeros(4, 1, 32, 32), torch.rand(4, 1)).shape
    torch.Size([4, 1, 32, 32])
"""

from __future__ import annotations

import math
from functools import partial

import torch
from neuralop.models import FNO
from torch import nn

from circuitop.ckb import CascadedKirchhoffBlock
from operators.models.hosts import SpectralFNO
from operators.models.unet import UNet

__all__ = ["Conditioned", "ParameterEmbedding", "film_sites", "CONDITIONED"]

#: the registry's models that take parameters (:func:`film_sites` finds layers in them)
CONDITIONED = ("fno", "chonn_fno", "nac_fno", "unet", "chonn_unet", "nac_unet")

#: sinusoidal frequencies ``2^k π``, ``k < FREQUENCIES``, of each parameter
FREQUENCIES = 6


class ParameterEmbedding(nn.Module):
    """``(batch, P)`` parameters in ``[0, 1]`` → ``(batch, dim)``: sinusoidal features, then a two-layer MLP."""

    def __init__(self, parameters: int, dim: int):
        super().__init__()
        self.register_buffer("frequencies", math.pi * 2.0 ** torch.arange(FREQUENCIES), persistent=False)
        self.mlp = nn.Sequential(nn.Linear(parameters * (1 + 2 * FREQUENCIES), dim), nn.GELU(), nn.Linear(dim, dim))

    def forward(self, p: torch.Tensor) -> torch.Tensor:
        angles = (p[..., None] * self.frequencies).flatten(1)  # (batch, P·K)
        return self.mlp(torch.cat([p, angles.sin(), angles.cos()], dim=1))


def film_sites(model: nn.Module) -> list[tuple[nn.Module, int, int]]:
    """``(module, channels, calls)`` of every layer output a conditioned ``model`` modulates: the module whose
    output it is, its channels, and how many layers one module computes (neuraloperator's ``FNOBlocks`` runs every
    Fourier layer, its second argument the layer's index; 1 elsewhere). Empty for a model with none."""
    sites = []
    for module in model.modules():
        if isinstance(module, FNO):
            sites.append((module.fno_blocks, module.hidden_channels, module.n_layers))
        elif isinstance(module, SpectralFNO):
            sites += [(out, module.config.width, 1) for out in module.layer_outputs]
        elif isinstance(module, UNet):
            widths = [module.config.channel_multiplier * 2**i for i in range(module.config.n_layers + 1)]
            stages = [*zip(module.encoders, widths), (module.neck, widths[-1]), *zip(module.decoders, widths)]
            sites += [(stage, width, 1) for stage, width in stages]
    return sites


def _zero_linear(dim: int, out: int) -> nn.Linear:
    """``nn.Linear(dim, out)`` with weights and bias zero: a modulation that starts as none."""
    layer = nn.Linear(dim, out)
    nn.init.zeros_(layer.weight)
    nn.init.zeros_(layer.bias)
    return layer


class Conditioned(nn.Module):
    """``model`` modulated per sample by ``parameters`` PDE parameters (module docstring): ``forward(x, p)``,
    ``x`` what ``model`` takes, ``p`` ``(batch, parameters)`` in ``[0, 1]`` on the training range.

    Args:
        model: a field model with layers to modulate (:func:`film_sites`).
        parameters: how many parameters each sample has.
        dim: the embedding's width (default: the widest modulated layer's channels, at least 32).

    Raises:
        ValueError: ``model`` has no layer to modulate.
    """

    def __init__(self, model: nn.Module, parameters: int, dim: int | None = None):
        super().__init__()
        sites = film_sites(model)
        if not sites:
            raise ValueError(f"model: expected a field model with layers to condition ({', '.join(CONDITIONED)}), "
                             f"found a {type(model).__name__}")
        self.model, self.parameters_count = model, parameters
        dim = dim or max(32, *(channels for _, channels, _ in sites))
        self.embed = ParameterEmbedding(parameters, dim)
        self.films = nn.ModuleList()
        self.time_scales = nn.ModuleList()  # τ_l of each hosted Cascaded Kirchhoff Block
        self._embedding: torch.Tensor | None = None
        for module, channels, calls in sites:
            module.register_forward_hook(partial(self._modulate, len(self.films), calls > 1))
            self.films.extend(_zero_linear(dim, 2 * channels) for _ in range(calls))
        for block in (m for m in model.modules() if isinstance(m, CascadedKirchhoffBlock)):
            block.register_forward_pre_hook(partial(self._time_scale, len(self.time_scales)))
            self.time_scales.append(_zero_linear(dim, 1))

    def forward(self, x: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
        """``x`` as ``model`` takes it, ``p`` ``(batch, parameters)`` → ``model``'s output, modulated by ``p``."""
        if p.ndim != 2 or p.shape != (x.shape[0], self.parameters_count):
            raise ValueError(f"parameters: expected shape ({x.shape[0]}, {self.parameters_count}) for a batch of "
                             f"{x.shape[0]}, found {tuple(p.shape)}")
        self._embedding = self.embed(p.to(x.dtype))
        try:
            return self.model(x)
        finally:
            self._embedding = None

    def _modulate(self, first: int, indexed: bool, module: nn.Module, args: tuple, out: torch.Tensor) -> torch.Tensor:
        """The forward hook of one site: ``out ⊙ (1 + γ) + β`` from this call's embedding."""
        if self._embedding is None:
            raise RuntimeError("a conditioned model's layers ran without parameters: call the Conditioned model")
        film = self.films[first + (args[1] if indexed else 0)]
        gamma, beta = film(self._embedding).to(out.dtype).chunk(2, dim=1)
        shape = (*gamma.shape, *(1,) * (out.ndim - 2))
        return out * (1 + gamma.view(shape)) + beta.view(shape)

    def _time_scale(self, index: int, block: nn.Module, args: tuple) -> tuple:
        """The forward pre-hook of one Cascaded Kirchhoff Block: its sequences ``(orders · batch, length, d)`` (a
        field's scan orders stacked order-major) get the real step sizes ``exp(τ(e))`` of their sample."""
        x, dt = (*args, None)[:2]
        scale = self.time_scales[index](self._embedding).exp()[:, 0].to(x.dtype)  # (batch,)
        steps = scale.repeat(x.shape[0] // scale.shape[0])[:, None].expand(x.shape[:2])
        return x, steps if dt is None else dt * steps

