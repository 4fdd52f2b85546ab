"""Torch's dataset contract on top of whole-batch reads.

Every dataset of ``pde_data`` reads a batch at once, ``read_batch(items) -> Batch`` of stacked tensors
(:class:`pde_data.datasets.batch.Batch`; one read per sample and frame range, however many of its items a
batch holds). :class:`BatchReads` derives torch's two fetch methods from it, so the datasets work in a plain
``torch.utils.data.DataLoader`` with the default collate and any number of workers:

- ``__getitem__(k)``: item ``k``'s ``Batch`` (its tensors without the batch axis);
- ``__getitems__(items)``: one batched read, returned as a list of per-item ``Batch``es (views of the
  stacked tensors), which ``default_collate`` stacks into one ``Batch`` again.

:class:`operators.training.Loader` skips the unstacking: it calls ``read_batch`` itself. The datasets
read into :class:`BatchBuffers`: batch memory reused once nothing references an earlier batch.

Example:
    >>> loader = torch.utils.data.DataLoader(PairDataset("darcy.nc", ["a"], ["u"]), batch_size=8, num_workers=2)
    >>> batch = next(iter(loader))             # batch.inputs, batch.targets: (8, 1, 64, 64) each
"""

from __future__ import annotations

import math
import threading
import weakref
from contextlib import contextmanager
from typing import Iterator, Sequence

import numpy as np
import torch
from torch.utils.data import Dataset, get_worker_info

from pde_data.datasets.batch import Batch

__all__ = ["BatchReads", "BatchBuffers", "pinned_batches", "release"]

_PINNED = threading.local()


@contextmanager
def pinned_batches(pinned: bool = True) -> Iterator[None]:
    """Within the block, :class:`BatchBuffers` of this thread hand out page-locked memory (for a copy to a
    CUDA device that overlaps the next read) from torch's caching host allocator, which reuses it itself."""
    before = getattr(_PINNED, "on", False)
    _PINNED.on = pinned
    try:
        yield
    finally:
        _PINNED.on = before


class BatchBuffers:
    """Memory for the batch tensors of one reader, reused once no tensor of an earlier batch holds it.

    A new batch tensor costs a page fault for every 4 KiB page its read first touches (on a VM more than
    the read itself; new shared memory in a DataLoader worker costs more still). Here a batch tensor stays
    valid for as long as anything references it (the tensor, a view, a NumPy array of it): a buffer is
    handed out again only after all of them are gone, so a caller keeping every batch sees no change, and
    a training loop that drops each batch reuses a few buffers. At most ``slots`` buffers are kept (beyond:
    new memory each time). Under :func:`pinned_batches`: page-locked memory, from torch's caching host
    allocator.

    In a DataLoader worker the tensors are in shared memory (handing them over copies nothing). The worker
    cannot see when the main process lets go of them, so they are new per batch, except within
    :meth:`lending`, whose caller sends the batch with :meth:`lend` and has the main process set the lent
    buffers' flags back (:func:`release`) when its copies are gone.

    Not shared between threads' concurrent reads; pickles as an empty pool (a worker fills its own).
    """

    def __init__(self, slots: int = 8):
        self.slots = slots
        self._memory: list[np.ndarray] = []  # flat uint8 buffers (this process's)
        self._lent: list[weakref.ref | None] = []  # the array each buffer's last tensor was built on
        self._lock = threading.Lock()
        self._shared: list[torch.Tensor] = []  # flat uint8 shared-memory buffers (a worker's)
        self._flags: torch.Tensor | None = None  # shared: 1 where the main process holds no copy of a buffer
        self._used: set[int] | None = None  # the shared buffers of the batch being read (None: not lending)

    def tensor(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        """An uninitialised C-contiguous CPU tensor of ``shape`` and ``dtype``."""
        if get_worker_info() is not None:
            return _shared_tensor(shape, dtype) if self._used is None else self._lendable(shape, dtype)
        if getattr(_PINNED, "on", False):
            return torch.empty(shape, dtype=dtype, pin_memory=True)
        nbytes = math.prod(shape) * dtype.itemsize
        with self._lock:
            k = _pick(self._memory, self._free(), nbytes, self.slots, lambda n: np.empty(n, dtype=np.uint8))
            if k is None:
                return torch.empty(shape, dtype=dtype)
            self._lent += [None] * (len(self._memory) - len(self._lent))
            view = self._memory[k][:nbytes]
            self._lent[k] = weakref.ref(view)  # dies with the last tensor over it (torch.from_numpy holds it)
        return torch.from_numpy(view).view(dtype).view(shape)

    def _free(self) -> list[int]:
        return [k for k, lent in enumerate(self._lent) if lent is None or lent() is None]

    @contextmanager
    def lending(self) -> Iterator[None]:
        """In a DataLoader worker: the block's tensors come from reused shared memory. Those of the block's
        result are to be sent with :meth:`lend`; every other tensor of the block must be gone at its end."""
        self._used = set()
        if self._flags is None:
            self._flags = _shared_tensor((self.slots,), torch.uint8).fill_(1)
        try:
            yield
        finally:
            self._used = None

    def lend(self, tensors: Sequence[torch.Tensor]) -> tuple[torch.Tensor, list[int]]:
        """The shared flags and the buffer of each of ``tensors`` (a batch's :meth:`Batch.tensors`; -1: none of
        this pool's), marked as held by the main process until it calls :func:`release` on them."""
        storages = [buf.untyped_storage().data_ptr() for buf in self._shared]
        slots = [storages.index(t.untyped_storage().data_ptr()) if t.untyped_storage().data_ptr() in storages
                 else -1 for t in tensors]
        for k in slots:
            if k >= 0:
                self._flags[k] = 0
        return self._flags, slots

    def _lendable(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        nbytes = math.prod(shape) * dtype.itemsize
        free = [k for k in range(len(self._shared)) if self._flags[k] and k not in self._used]
        k = _pick(self._shared, free, nbytes, self.slots, lambda n: _shared_tensor((n,), torch.uint8))
        if k is None:
            return _shared_tensor(shape, dtype)
        self._used.add(k)
        return self._shared[k][:nbytes].view(dtype).view(shape)

    def __getstate__(self) -> dict:
        return {"slots": self.slots}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["slots"])


def release(flags: torch.Tensor, slot: int) -> None:
    """The main process holds no copy of buffer ``slot`` of a worker's :class:`BatchBuffers` any more."""
    flags[slot] = 1


def _pick(buffers: list, free: list[int], nbytes: int, slots: int, new) -> int | None:
    """A free buffer of at least ``nbytes`` (the smallest), else a ``new(nbytes)`` one appended while fewer than
    ``slots`` or replacing the largest free one; None when all ``slots`` are taken."""
    fits = [k for k in free if len(buffers[k]) >= nbytes]
    if fits:
        return min(fits, key=lambda k: len(buffers[k]))
    if len(buffers) < slots:
        buffers.append(new(nbytes))
        return len(buffers) - 1
    if free:
        k = max(free, key=lambda k: len(buffers[k]))
        buffers[k] = new(nbytes)
        return k
    return None


def _shared_tensor(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """An uninitialised tensor in shared memory (as torch's ``default_collate`` makes in a worker)."""
    proto = torch.empty(0, dtype=dtype)
    storage = proto._typed_storage()._new_shared(math.prod(shape), device=proto.device)
    return proto.new(storage).resize_(shape)


class BatchReads(Dataset):
    """A map-style dataset defined by ``read_batch(items) -> Batch`` (each tensor ``(len(items), ...)``)."""

    def read_batch(self, items: Sequence[int]) -> Batch:
        raise NotImplementedError

    def __getitem__(self, k: int) -> Batch:
        return self.read_batch([k]).map(lambda t: t[0])

    def __getitems__(self, items: Sequence[int]) -> list[Batch]:
        stacked = self.read_batch(items)
        return [stacked.map(lambda t: t[k]) for k in range(len(items))]
