"""The affine per-channel :class:`Normalizer` and the :class:`Moments` its fits merge (float64, Chan et al.'s
parallel update): plain torch, below every reader, so a generated set's manifest computes the same moments
as a fit (:mod:`pde_data.datasets.normalize` fits them over a :class:`pde_data.Source`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["Normalizer", "Moments", "METHODS"]

METHODS = ("gaussian", "minmax")


@dataclass
class Normalizer:
    """An affine per-channel map ``encode(x) = (x - shift) / scale``; ``decode`` is its inverse.

    Args:
        method: ``"gaussian"`` (shift = mean, scale = std + eps) or ``"minmax"`` (shift = min, scale = range + eps).
        shift, scale: ``(channels, 1, ..., 1)`` float tensors.
    """

    method: str
    shift: torch.Tensor
    scale: torch.Tensor

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.shift.to(x)) / self.scale.to(x)

    def encode_(self, x: torch.Tensor) -> torch.Tensor:
        """:meth:`encode` in place: the same values, written into ``x`` (returned)."""
        return x.sub_(self.shift.to(x)).div_(self.scale.to(x))

    def decode(self, z: torch.Tensor) -> torch.Tensor:
        return z * self.scale.to(z) + self.shift.to(z)

    def state_dict(self) -> dict[str, object]:
        """Plain tensors and strings only (loads with ``torch.load(..., weights_only=True)``)."""
        return {"method": self.method, "shift": self.shift.clone(), "scale": self.scale.clone()}

    @classmethod
    def from_state_dict(cls, state: dict[str, object]) -> "Normalizer":
        """Inverse of :meth:`state_dict`; the checkpoints of runs trained before 2026-11-28 name the method ``kind``."""
        if "kind" in state and "method" not in state:
            state = {("method" if k == "kind" else k): v for k, v in state.items()}
        missing = {"method", "shift", "scale"} - set(state)
        if missing:
            raise ValueError(f"normalizer state: expected keys method, shift, scale; missing {sorted(missing)}")
        if state["method"] not in METHODS:
            raise ValueError(f"normalizer state: expected method in {METHODS}, found {state['method']!r}")
        return cls(str(state["method"]), torch.as_tensor(state["shift"]), torch.as_tensor(state["scale"]))


@dataclass(frozen=True)
class Moments:
    """Per-channel moments of some values: ``count``; ``mean``, ``m2`` (sum of squared deviations from the
    mean), ``low``, ``high``, each float64 ``(channels,)``. A fit merges the moments of its blocks and
    ends with :meth:`normalizer`.

    Example:
        >>> total = Moments.of(block_a, 1).merge(Moments.of(block_b, 1))     # blocks (n, channels, *spatial)
        >>> norm = total.normalizer("gaussian", 1e-8, n_spatial=2)           # shift, scale (channels, 1, 1)
    """

    count: int
    mean: torch.Tensor
    m2: torch.Tensor
    low: torch.Tensor
    high: torch.Tensor

    @classmethod
    def of(cls, t: torch.Tensor, channel_axis: int) -> "Moments":
        """Moments of one block ``t`` (float64, channels on ``channel_axis``), deviations from its own mean."""
        flat = t.movedim(channel_axis, 0).reshape(t.shape[channel_axis], -1)
        mean = flat.mean(1)
        m2 = (flat - mean[:, None]).square().sum(1)
        return cls(flat.shape[1], mean, m2, flat.amin(1), flat.amax(1))

    def merge(self, other: "Moments") -> "Moments":
        """Chan, Golub & LeVeque's parallel update (1979):

        ``δ = mean_b - mean_a``, ``mean_ab = mean_a + δ·n_b/n``, ``M2_ab = M2_a + M2_b + δ²·n_a·n_b/n``.
        """
        n = self.count + other.count
        delta = other.mean - self.mean
        mean = self.mean + delta * (other.count / n)
        m2 = self.m2 + other.m2 + delta.square() * (self.count * other.count / n)
        return Moments(n, mean, m2, torch.minimum(self.low, other.low), torch.maximum(self.high, other.high))

    def normalizer(self, method: str, eps: float, *, n_spatial: int = 0) -> Normalizer:
        """The :class:`Normalizer` of these moments: ``gaussian`` shift = mean, scale = std + eps with the
        population ``std = sqrt(M2 / count)``; ``minmax`` shift = min, scale = max - min + eps. ``shift`` and
        ``scale`` are float32 ``(channels, 1, ..., 1)`` with ``n_spatial`` ones (``(channels,)`` for sequences)."""
        if method not in METHODS:
            raise ValueError(f"method: expected one of {METHODS}, found {method!r}")
        if method == "gaussian":
            shift, scale = self.mean, (self.m2 / self.count).sqrt() + eps
        else:
            shift, scale = self.low, self.high - self.low + eps
        ones = (1,) * n_spatial
        return Normalizer(method, shift.float().reshape(-1, *ones), scale.float().reshape(-1, *ones))
