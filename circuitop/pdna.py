"""PDNA: a CfC whose hidden states receive a learnable pulse and a self-attend term.

Following PDNA (Eqs. 3-6), for CfC hidden states ``h_t``::

    pulse(t, h)     = A * sin(omega t + W_phi h + b_phi)            (Eq. 3)
    h'              = h + alpha * pulse(t, h)                         (Eq. 4)
    self_attend(h)  = W_self sigmoid(h)                              (Eq. 5)
    h''             = h' + beta * self_attend(h')                    (Eq. 6)

with ``alpha = beta = 0.01`` at initialisation, ``A = 1`` and ``omega`` log-uniformly spaced in
``[0.1, 10]`` (one frequency per hidden unit). The five ablation variants of the paper's Table 1:

=======  =====================  ===========  ============
variant  name                   pulse        self-attend
=======  =====================  ===========  ============
``A``    baseline CfC           --           --
``B``    CfC + noise (control)  random       --
``C``    CfC + pulse            yes          --
``D``    CfC + self-attend      --           yes
``E``    full PDNA              yes          yes
=======  =====================  ===========  ============

Variant ``B`` adds ``s * eps`` with ``eps ~ N(0, 1)`` and a learnable scale ``s`` (initialised like
``alpha``) in training and in evaluation, as the paper's control perturbs the state whenever the pulse
would act (PDNA Sec. 3.5, Table 1). Training draws from one seeded generator that moves on from call to
call; evaluation restarts it from ``seed`` at every call, so a gapped evaluation is reproducible. As in
the paper (Sec. 3.4) the modules act on the CfC states of all steps at once; ``feedback=True`` instead feeds the augmented state back into the recurrence.
``t`` is the elapsed time ``t_k = dt_1 + ... + dt_k`` (the step index ``k`` for unit steps).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from circuitop.cfc import CfC
from circuitop.sequence import check_sequence

__all__ = ["PDNA", "VARIANTS"]

#: variant -> (perturbation: None / "noise" / "pulse", self-attend), the paper's Table 1.
VARIANTS = {"A": (None, False), "B": ("noise", False), "C": ("pulse", False), "D": (None, True),
            "E": ("pulse", True)}


class PDNA(nn.Module):
    """A CfC with the pulse / noise / self-attend augmentations of variant ``A``-``E``.

    Args:
        in_channels: input features. hidden: CfC state size.
        variant: ``"A"``-``"E"`` (see the module docstring).
        alpha_init / beta_init: initial pulse (and noise) and self-attend strengths.
        omega_range: the frequencies' log-uniform spacing range. seed: the noise generator's seed.
        feedback: feed augmented states back into the CfC recurrence (default: post-hoc, as the paper).
        **cfc_kwargs: keyword settings of :class:`circuitop.CfC` (``mode``, ``backbone_units``, ...).
    """

    def __init__(self, in_channels: int, hidden: int, *, variant: str = "E", alpha_init: float = 0.01,
                 beta_init: float = 0.01, omega_range: tuple[float, float] = (0.1, 10.0), seed: int = 0,
                 feedback: bool = False, **cfc_kwargs):
        super().__init__()
        if variant not in VARIANTS:
            raise ValueError(f"variant: expected one of {sorted(VARIANTS)}, found {variant!r}")
        self.variant, self.feedback = variant, feedback
        self.perturbation, self.self_attend = VARIANTS[variant]
        self.cfc = CfC(in_channels, hidden, **cfc_kwargs)
        self.in_channels, self.out_channels, self.hidden = in_channels, self.cfc.out_channels, hidden
        if self.perturbation == "pulse":
            self.amplitude = nn.Parameter(torch.ones(hidden))
            low, high = (math.log10(v) for v in omega_range)
            self.omega = nn.Parameter(torch.logspace(low, high, hidden))
            self.phase = nn.Linear(hidden, hidden)  # phi(h) = W_phi h + b_phi
            self.alpha = nn.Parameter(torch.tensor(float(alpha_init)))
        elif self.perturbation == "noise":
            self.noise_scale = nn.Parameter(torch.tensor(float(alpha_init)))
            self.seed, self.generator = seed, torch.Generator().manual_seed(seed)
        if self.self_attend:
            self.w_self = nn.Linear(hidden, hidden, bias=False)
            self.beta = nn.Parameter(torch.tensor(float(beta_init)))

    def _noise(self) -> torch.Generator | None:
        """Variant B's generator for one call: the moving training stream, or a fresh one from ``seed``."""
        if self.perturbation != "noise":
            return None
        return self.generator if self.training else torch.Generator().manual_seed(self.seed)

    def augment(self, h: torch.Tensor, t: torch.Tensor, noise: torch.Generator | None = None) -> torch.Tensor:
        """Eqs. 4 and 6 for states ``h`` ``(..., hidden)`` at times ``t`` ``(...)``; variant B draws from
        ``noise`` (default: :meth:`_noise`)."""
        if self.perturbation == "pulse":
            h = h + self.alpha * self.amplitude * torch.sin(self.omega * t.unsqueeze(-1) + self.phase(h))
        elif self.perturbation == "noise":
            eps = torch.randn(h.shape, generator=noise or self._noise(), dtype=h.dtype).to(h.device)
            h = h + self.noise_scale * eps
        if self.self_attend:
            h = h + self.beta * self.w_self(torch.sigmoid(h))
        return h

    def states(self, x: torch.Tensor, dt: torch.Tensor | None = None,
               h0: torch.Tensor | None = None) -> torch.Tensor:
        """Augmented states ``(batch, time, hidden)`` for ``x`` ``(batch, time, in)``, ``dt`` ``(batch, time)``."""
        dt = check_sequence(x, dt, self.in_channels)
        t, noise = dt.cumsum(1), self._noise()
        if not self.feedback:
            return self.augment(self.cfc.states(x, dt, h0), t, noise)
        return self.cfc.states(x, dt, h0, feedback=lambda h, k: self.augment(h, t[:, k], noise))

    def forward(self, x: torch.Tensor, dt: torch.Tensor | None = None,
                h0: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Returns ``(outputs (batch, time, out_channels), last augmented state (batch, hidden))``."""
        states = self.states(x, dt, h0)
        return self.cfc.proj(states), states[:, -1]
