"""Per-channel normalizers fitted on the training split only, storable in ``weights_only`` checkpoints.

``gaussian``: ``encode(x) = (x - mean) / (std + eps)``; ``minmax``: ``encode(x) = (x - min) / (max - min + eps)``
(to [0, 1]). Statistics are per data variable (channel), over samples, time and space. They are kept
with shape ``(channels, 1, ..., 1)`` (one 1 per spatial axis) so they broadcast against an item
``(channels, *spatial)``, a batch ``(batch, channels, *spatial)`` and a rollout
``(batch, time, channels, *spatial)`` alike.

Example:
    >>> norm = fit_normalizer(ds, ["a"], indices=splits["train"])
    >>> z = norm.encode(x); torch.save({"norm": norm.state_dict()}, "ckpt.pt")
    >>> Normalizer.from_state_dict(torch.load("ckpt.pt", weights_only=True)["norm"]).decode(z)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch
import xarray as xr

from pde_data.model import SAMPLE, TIME, kind_of, spatial_dims, to_tensor

__all__ = ["Normalizer", "fit_normalizer", "KINDS"]

KINDS = ("gaussian", "minmax")


@dataclass
class Normalizer:
    """An affine per-channel map ``encode(x) = (x - shift) / scale``; ``decode`` is its inverse.

    Args:
        kind: ``"gaussian"`` (shift = mean, scale = std + eps) or ``"minmax"`` (shift = min, scale = range + eps).
        shift, scale: ``(channels, 1, ..., 1)`` float tensors.
    """

    kind: str
    shift: torch.Tensor
    scale: torch.Tensor

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.shift.to(x)) / self.scale.to(x)

    def decode(self, z: torch.Tensor) -> torch.Tensor:
        return z * self.scale.to(z) + self.shift.to(z)

    def state_dict(self) -> dict[str, object]:
        """Plain tensors and strings only (loads with ``torch.load(..., weights_only=True)``)."""
        return {"kind": self.kind, "shift": self.shift.clone(), "scale": self.scale.clone()}

    @classmethod
    def from_state_dict(cls, state: dict[str, object]) -> "Normalizer":
        missing = {"kind", "shift", "scale"} - set(state)
        if missing:
            raise ValueError(f"normalizer state: expected keys kind, shift, scale; missing {sorted(missing)}")
        if state["kind"] not in KINDS:
            raise ValueError(f"normalizer state: expected kind in {KINDS}, found {state['kind']!r}")
        return cls(str(state["kind"]), torch.as_tensor(state["shift"]), torch.as_tensor(state["scale"]))


def _chunk_stats(t: torch.Tensor, channel_axis: int) -> tuple[torch.Tensor, ...]:
    flat = t.movedim(channel_axis, 0).reshape(t.shape[channel_axis], -1)
    return flat.sum(1), (flat * flat).sum(1), flat.amin(1), flat.amax(1), torch.tensor(flat.shape[1])


def fit_normalizer(
    ds: xr.Dataset,
    variables: Sequence[str],
    *,
    indices: Sequence[int] | None = None,
    kind: str = "gaussian",
    chunk_size: int = 64,
    eps: float = 1e-8,
) -> Normalizer:
    """Fit per-variable statistics on the samples ``indices`` (the training split), reading in chunks.

    Args:
        ds: a (possibly lazy) Dataset of the data model; each variable is one channel.
        variables: the variables (channels) to normalize, in channel order.
        indices: sample indices to fit on (default: all); the statistics see no other sample.
        kind: ``"gaussian"`` or ``"minmax"``.
        chunk_size: samples read at a time (memory stays bounded by one chunk).
    """
    if kind not in KINDS:
        raise ValueError(f"kind: expected one of {KINDS}, found {kind!r}")
    idx = np.arange(ds.sizes[SAMPLE]) if indices is None else np.asarray(indices)
    if idx.size == 0:
        raise ValueError("indices: expected at least one training sample, found none")
    sub = ds[list(variables)]
    channel_axis = 2 if TIME in sub.dims else 1
    totals = None
    for start in range(0, idx.size, chunk_size):
        t = to_tensor(sub.isel({SAMPLE: idx[start:start + chunk_size]}), variables, dtype=torch.float64)
        stats = _chunk_stats(t, channel_axis)
        totals = stats if totals is None else (
            totals[0] + stats[0], totals[1] + stats[1], torch.minimum(totals[2], stats[2]),
            torch.maximum(totals[3], stats[3]), totals[4] + stats[4])
    total, squares, low, high, count = totals
    mean = total / count
    std = (squares / count - mean * mean).clamp_min(0).sqrt()
    shift, scale = (mean, std + eps) if kind == "gaussian" else (low, high - low + eps)
    ones = (1,) * (len(spatial_dims(sub)) if kind_of(sub) == "field" else 0)
    return Normalizer(kind, shift.float().reshape(-1, *ones), scale.float().reshape(-1, *ones))
