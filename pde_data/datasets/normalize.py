"""Per-channel normalizers fitted on the training split only, storable in ``weights_only`` checkpoints.

``gaussian``: ``encode(x) = (x - mean) / (std + eps)``; ``minmax``: ``encode(x) = (x - min) / (max - min + eps)``
(to [0, 1]). Statistics are per data variable (channel), over samples, time and space. They are kept
with shape ``(channels, 1, ..., 1)`` (one 1 per spatial axis) so they broadcast against an item
``(channels, *spatial)``, a batch ``(batch, channels, *spatial)`` and a rollout
``(batch, time, channels, *spatial)`` alike. The fit is one streaming pass over the training samples
in blocks of bounded size, merging per-block moments in float64 (Chan et al.'s parallel update).

Both fits read through a :class:`pde_data.Source` (given one, a path or a Dataset); statistics shipped
with the data (:meth:`pde_data.Source.stats`) give a normalizer without a pass (:func:`normalizer_from_stats`).

Example:
    >>> norm = fit_normalizer(source, ["a"], indices=splits["train"])
    >>> z = norm.encode(x); torch.save({"norm": norm.state_dict()}, "ckpt.pt")
    >>> Normalizer.from_state_dict(torch.load("ckpt.pt", weights_only=True)["norm"]).decode(z)
"""

from __future__ import annotations

from typing import Iterator, Sequence

import numpy as np
import torch
import xarray as xr

from pde_data.core.model import SAMPLE, TIME, family_of, spatial_dims
from pde_data.core.moments import METHODS, Moments, Normalizer
from pde_data.formats.source import Source, SourceLike, open_source

__all__ = ["Normalizer", "Moments", "fit_normalizer", "normalizer_from_stats", "training_samples", "METHODS"]

def _frame_values(sub: xr.Dataset) -> int:
    """Values in one (sample, frame) of all variables of ``sub`` (one whole sample if steady)."""
    return sum(int(np.prod([n for d, n in da.sizes.items() if d not in (SAMPLE, TIME)], dtype=np.int64))
               for da in sub.data_vars.values())


def _blocks(sub: xr.Dataset, samples: np.ndarray, max_bytes: int,
            chunk_size: int | None) -> Iterator[tuple[np.ndarray, slice | None]]:
    """``(samples, time)`` reads in order, each holding at most ``max_bytes`` of float64 values.

    Whole samples are grouped while they fit (at most ``chunk_size`` per group); a larger sample is
    read in blocks of frames; a steady sample larger than ``max_bytes`` is read whole (it cannot be split).
    """
    n_time = sub.sizes[TIME] if TIME in sub.dims else 1
    frame_bytes = max(1, 8 * _frame_values(sub))
    if frame_bytes * n_time <= max_bytes or TIME not in sub.dims:
        per_block = max(1, min(max_bytes // (frame_bytes * n_time), chunk_size or samples.size))
        for start in range(0, samples.size, per_block):
            yield samples[start:start + per_block], None
        return
    frames = max(1, max_bytes // frame_bytes)
    for i in samples:
        for t0 in range(0, n_time, frames):
            yield np.array([i]), slice(t0, t0 + frames)


def _raise_non_finite(source: Source, variables: Sequence[str], t: torch.Tensor, block: np.ndarray,
                      channel_axis: int, time: slice | None) -> None:
    """Raise a one-line ``ValueError`` naming the first non-finite value's variable, sample and frame."""
    where = (~torch.isfinite(t)).nonzero()[0].tolist()
    value = t[tuple(where)].item()
    frame = where[1] + (time.start if time is not None else 0) if channel_axis == 2 else None
    at = f"sample {int(block[where[0]])}" + ("" if frame is None else f", frame {frame}")
    raise ValueError(f"{source.name}: variable '{variables[where[channel_axis]]}', {at}: expected finite training "
                     f"data, found {value} (fix or leave out that sample before training)")


def training_samples(n: int, indices: Sequence[int] | None) -> np.ndarray:
    """The sorted, distinct sample indices to fit on, of ``n`` samples; all of them when ``indices`` is ``None``.

    Raises:
        ValueError: no index, or one outside ``[0, n)``.
    """
    samples = np.arange(n) if indices is None else np.unique(np.asarray(indices, dtype=np.int64))
    if samples.size == 0:
        raise ValueError("indices: expected at least one training sample, found none")
    if samples[0] < 0 or samples[-1] >= n:
        raise ValueError(f"indices: expected sample indices in [0, {n}), found {samples[0]} .. {samples[-1]}")
    return samples


def fit_normalizer(data: SourceLike, variables: Sequence[str], *, indices: Sequence[int] | None = None,
                   method: str = "gaussian", max_bytes: int = 64 * 2**20, chunk_size: int | None = None,
                   eps: float = 1e-8) -> Normalizer:
    """Fit per-variable statistics on the samples ``indices`` (the training split) in one streaming pass.

    The samples are read in file order, in blocks of at most ``max_bytes`` of float64 values (several
    whole samples, or one sample's frames ``[t0, t1)``); each block gives per-channel (count, mean,
    M2, min, max) in float64, merged with Chan et al.'s update (see :class:`Moments`), so memory stays
    bounded by one block and the variance has no cancellation (values 1e4 + N(0, 1e-2) are fine).
    ``std = sqrt(M2 / count)`` (population std, over samples, time and space).

    Args:
        data: a :class:`pde_data.Source` (or what :func:`pde_data.open_source` takes: a path, a Dataset);
            each variable is one channel.
        variables: the variables (channels) to normalize, in channel order.
        indices: sample indices to fit on (default: all), used as a set (sorted, duplicates once);
            the statistics see no other sample.
        method: ``"gaussian"`` or ``"minmax"``.
        max_bytes: largest block read at a time, in bytes of float64 values (default 64 MiB).
        chunk_size: at most this many samples per block (default: as many as ``max_bytes`` allows).
        eps: added to the scale (std or range) so that a constant channel does not divide by zero.

    Returns:
        A :class:`Normalizer` whose ``shift`` and ``scale`` are ``(channels, 1, ..., 1)`` float32.

    Raises:
        ValueError: a NaN or Inf in the training samples, naming the variable, sample and frame.
    """
    if method not in METHODS:
        raise ValueError(f"method: expected one of {METHODS}, found {method!r}")
    if max_bytes < 1 or (chunk_size is not None and chunk_size < 1):
        raise ValueError(f"max_bytes, chunk_size: expected positive integers, found {max_bytes}, {chunk_size}")
    source = open_source(data)
    samples = training_samples(source.sizes[SAMPLE], indices)
    sub = source.dataset[list(variables)]
    channel_axis = 2 if TIME in sub.dims else 1
    total = None
    for block, time in _blocks(sub, samples, max_bytes, chunk_size):
        t = source.read(variables, block, time, dtype=torch.float64)
        moments = Moments.of(t, channel_axis)
        if not bool(torch.isfinite(moments.mean).all()):  # a NaN/Inf anywhere makes its channel's mean non-finite
            _raise_non_finite(source, variables, t, block, channel_axis, time)
        total = moments if total is None else total.merge(moments)
    return total.normalizer(method, eps, n_spatial=_n_spatial(sub))


def _n_spatial(sub: xr.Dataset) -> int:
    """The spatial dims of fields (a normalizer's ones after ``channels``); 0 for sequences."""
    return len(spatial_dims(sub)) if family_of(sub) == "field" else 0


def normalizer_from_stats(data: SourceLike, variables: Sequence[str], *, method: str = "gaussian",
                          eps: float = 1e-8) -> Normalizer | None:
    """A gaussian :class:`Normalizer` from statistics shipped with the data (:meth:`pde_data.Source.stats`:
    The Well's ``stats.yaml``): shift = mean, scale = std + eps, shaped as :func:`fit_normalizer`'s. None
    when ``method`` is not gaussian or a variable has no entry (then the caller fits on the training split);
    always None for an in-memory Dataset (it ships none)."""
    source = open_source(data)
    stats = source.stats()
    if method != "gaussian" or not stats or not all(v in stats for v in variables):
        return None
    ones = (1,) * _n_spatial(source.dataset[list(variables)])
    shift = torch.tensor([stats[v]["mean"] for v in variables], dtype=torch.float32).reshape(-1, *ones)
    scale = torch.tensor([stats[v]["std"] + eps for v in variables], dtype=torch.float32).reshape(-1, *ones)
    return Normalizer(method, shift, scale)
