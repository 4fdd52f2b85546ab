"""Torch's dataset contract on top of whole-batch reads.

Every dataset of ``pde_data`` reads a batch at once, ``read_batch(items) -> tuple of stacked tensors``
(one read per sample and frame range, however many of its items a batch holds). :class:`BatchReads`
derives torch's two fetch methods from it, so the datasets work in a plain
``torch.utils.data.DataLoader`` with the default collate and any number of workers:

- ``__getitem__(k)``: the tuple of item ``k``'s tensors;
- ``__getitems__(items)``: one batched read, returned as a list of per-item tuples (views of the
  stacked tensors), which ``default_collate`` stacks again.

:class:`operators.training.Loader` skips the unstacking: it calls ``read_batch`` itself.

Example:
    >>> loader = torch.utils.data.DataLoader(PairDataset("darcy.nc", ["a"], ["u"]), batch_size=8, num_workers=2)
    >>> x, y = next(iter(loader))             # (8, 1, 64, 64) each
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch.utils.data import Dataset

__all__ = ["BatchReads"]


class BatchReads(Dataset):
    """A map-style dataset defined by ``read_batch(items) -> tuple[torch.Tensor, ...]`` (each ``(len(items), ...)``)."""

    def read_batch(self, items: Sequence[int]) -> tuple[torch.Tensor, ...]:
        raise NotImplementedError

    def __getitem__(self, k: int) -> tuple[torch.Tensor, ...]:
        return tuple(t[0] for t in self.read_batch([k]))

    def __getitems__(self, items: Sequence[int]) -> list[tuple[torch.Tensor, ...]]:
        stacked = self.read_batch(items)
        return [tuple(t[k] for t in stacked) for k in range(len(items))]
