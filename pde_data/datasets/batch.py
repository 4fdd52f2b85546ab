"""The one batch every dataset of ``pde_data`` reads (``read_batch``) and every route of ``operators`` passes on.

===========  ===================================================  ==============================================
field        shape                                                of
===========  ===================================================  ==============================================
``inputs``   ``(batch, in_channels, *spatial)``                   pairs and images (:class:`PairDataset`, labels)
             ``(batch, window, channels, *spatial)``              windows: the given frames, in time order
             ``(batch, time, in_channels)``                       sequences (:class:`SequenceDataset`)
``targets``  ``(batch, out_channels, *spatial)``                  pairs
             ``(batch, horizon, channels, *spatial)``             windows: the next frames, in time order
             ``(batch,)`` int64                                   labels: one class per sample
             ``(batch, out_channels)``, ``(batch, time, out_ch)``  sequences: per sequence, per step
             None                                                 the inputs read alone (prediction)
``dt``       ``(batch, time)`` float, else None                   sequences: step sizes (1.0 on padding)
``mask``     ``(batch, time)`` bool, else None                    sequences: True on valid steps
``params``   ``(batch, parameters)`` float, else None             fields read with ``params``: each sample's PDE
                                                                  parameters (:func:`pde_data.parameter_table`)
===========  ===================================================  ==============================================

A plain ``torch.utils.data.DataLoader`` with its default collate stacks items that are ``Batch``es into a
``Batch`` (registered in torch's ``default_collate_fn_map``; None fields stay None), and its pinning thread
pins one (:meth:`Batch.pin_memory`).

Example:
    >>> batch = WindowDataset(source, ["u"], window=10).read_batch([0, 1]).to("cuda", non_blocking=True)
    >>> batch.inputs.shape, batch.targets.shape, batch.mask
    (torch.Size([2, 10, 1, 64, 64]), torch.Size([2, 1, 1, 64, 64]), None)
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import torch
from torch.utils.data._utils.collate import collate, default_collate_fn_map

__all__ = ["Batch"]


@dataclasses.dataclass(frozen=True)
class Batch:
    """Tensors of one batch by name (shapes in the module docstring); a field a dataset does not read is None."""

    inputs: torch.Tensor
    targets: torch.Tensor | None = None
    dt: torch.Tensor | None = None
    mask: torch.Tensor | None = None
    params: torch.Tensor | None = None

    def tensors(self) -> tuple[torch.Tensor, ...]:
        """The tensors there are (None fields left out), in field order."""
        return tuple(t for t in vars(self).values() if t is not None)

    def map(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> "Batch":
        """``fn`` of every tensor there is, in field order (None fields stay None)."""
        return Batch(**{name: None if t is None else fn(t) for name, t in vars(self).items()})

    def to(self, device: torch.device | str, *, non_blocking: bool = False) -> "Batch":
        return self.map(lambda t: t.to(device, non_blocking=non_blocking))

    def pin_memory(self) -> "Batch":
        return self.map(torch.Tensor.pin_memory)


def _collate(items: list[Batch], *, collate_fn_map) -> Batch:
    """Items' ``Batch``es stacked field by field (torch's default collate of each field; None stays None)."""
    stack = lambda name: collate([getattr(b, name) for b in items], collate_fn_map=collate_fn_map)  # noqa: E731
    return Batch(**{name: None if t is None else stack(name) for name, t in vars(items[0]).items()})


default_collate_fn_map[Batch] = _collate
