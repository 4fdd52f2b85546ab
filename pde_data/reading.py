"""Reading samples of any data (a Source, a path, a Dataset) in one call, and the one-line read errors.

:func:`read_samples` is :meth:`pde_data.Source.read` for whatever :func:`pde_data.open_source` takes.
A failed read of a dataset's batch is a :class:`DataReadError` whose message is one line naming the
file, the samples and the frames.

Example:
    >>> frames = read_samples(ds, ["u"], [3, 4, 9], time=slice(0, 11))   # (3, 11, 1, x, y)
"""

from __future__ import annotations

from typing import Sequence

import torch

from pde_data.source import SourceLike, open_source, sample_runs

__all__ = ["read_samples", "sample_runs", "DataReadError", "one_line"]


class DataReadError(RuntimeError):
    """Reading a sample of a data file failed (truncated file, I/O error, NaN where the reader checks)."""


def read_samples(data: SourceLike, variables: Sequence[str], samples: Sequence[int], *,
                 time: slice | None = None, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Samples ``samples`` of ``variables`` in the torch layout of :func:`pde_data.to_tensor`
    (:meth:`pde_data.Source.read`: any order, repeats allowed).

    Returns:
        ``(len(samples), channels, *spatial)`` or ``(len(samples), time, channels, *spatial)``; sequences
        ``(len(samples), time, channels)``.
    """
    return open_source(data).read(variables, samples, time, dtype=dtype)


def one_line(exc: BaseException) -> str:
    """The first line of an exception's message (its type name if it has none)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
