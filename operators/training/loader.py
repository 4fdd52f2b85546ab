"""Streaming batches: a torch ``DataLoader`` over a map-style dataset, in the seeded per-epoch order.

Batch composition is a function of ``(seed, epoch)`` alone (:func:`epoch_order`), never of the number
of workers, processes or whether the data is cached, so a resumed run, a run with other ``--workers``
and a ``torchrun`` run see the same global batches. Under ``torchrun`` each process fetches only its
contiguous slice of every global batch. Within a slice the items are sorted, so a batch's reads follow
the file (sample-major, frames in order).

Worker processes (``workers > 0``) are persistent and prefetch ``prefetch`` batches each; every worker
opens its own file handle after it starts (the datasets hold a path, not a handle) and runs one torch
thread. A read error in a worker comes back as one line naming the file and sample. A worker reads a
``pde_data`` dataset's batches into shared memory it reuses (:class:`pde_data.datasets.batches.BatchBuffers`): the
tensors handed out here release their buffer back to the worker when nothing here references them any
more. On a CUDA device the main process reads into page-locked memory, copied to the device without
blocking.

Example:
    >>> loader = Loader(dataset, batch_size=20, seed=0, workers=2)
    >>> sizes = loader.global_sizes(3)          # of each global batch of epoch 3
    >>> for k, batch in enumerate(loader.epoch(3)):
    ...     pred = model(batch.inputs)          # a pde_data Batch, this process's part of a batch of sizes[k]
"""

from __future__ import annotations

import weakref
from typing import Iterator

import torch
from torch.utils.data import DataLoader, Dataset, Sampler, get_worker_info

from operators.training.distributed import DistInfo
from pde_data import DataReadError
from pde_data.datasets.batch import Batch
from pde_data.datasets.batches import pinned_batches, release
from pde_data.core.errors import one_line

__all__ = ["Loader", "epoch_order", "global_batches"]


def epoch_order(n: int, seed: int, epoch: int) -> torch.Tensor:
    """The sample order of ``epoch``: a permutation of ``range(n)`` determined by ``(seed, epoch)``."""
    gen = torch.Generator().manual_seed(int(seed) * 1_000_003 + int(epoch))
    return torch.randperm(n, generator=gen)


def global_batches(n: int, batch_size: int, *, seed: int, epoch: int, shuffle: bool, min_size: int = 1) -> list[torch.Tensor]:
    """The global batches of one epoch (items in order; batches smaller than ``min_size`` dropped)."""
    order = epoch_order(n, seed, epoch) if shuffle else torch.arange(n)
    return [b for b in order.split(batch_size) if len(b) >= min_size]


class _EpochSampler(Sampler):
    """Yields this rank's sorted slice of each global batch of the current epoch."""

    def __init__(self, n: int, batch_size: int, seed: int, shuffle: bool, rank: int, world: int):
        self.n, self.batch_size, self.seed, self.shuffle = n, batch_size, seed, shuffle
        self.rank, self.world, self.epoch = rank, world, 0

    def batches(self) -> list[torch.Tensor]:
        return global_batches(self.n, self.batch_size, seed=self.seed, epoch=self.epoch, shuffle=self.shuffle,
                              min_size=self.world)

    def __iter__(self) -> Iterator[list[int]]:
        for batch in self.batches():
            yield sorted(batch.tensor_split(self.world)[self.rank].tolist())

    def __len__(self) -> int:
        return len(self.batches())


class _ReadFailure:
    """A read error passed back from a DataLoader worker as a value (its message is one line naming
    the file and sample), so the main process raises :class:`DataReadError` with that line alone."""

    def __init__(self, message: str):
        self.message = message


class _Lent:
    """A batch read by a worker into its reused shared memory (:class:`pde_data.datasets.batches.BatchBuffers`), with
    the flags the main process sets once it holds no copy of a buffer (the worker then reads into it again)."""

    def __init__(self, batch: Batch, flags: torch.Tensor, slots: list[int]):
        self.batch, self.flags, self.slots = batch, flags, slots  # slots: of batch.tensors(), in order

    def unwrap(self) -> Batch:
        """The batch, each buffer released when every tensor and view over it here is gone. This process
        unmaps a buffer with its last tensor (it maps it again, faulting its pages in, when the worker sends
        it next): keeping every worker's buffers mapped here held ``workers × slots`` batches in this
        process's resident memory, per loader (issue #41)."""
        slots = iter(self.slots)  # Batch.map visits the tensors in the order of Batch.tensors
        return self.batch.map(lambda t: t if (k := next(slots)) < 0 else _released_when_gone(t, self.flags, k))

    def pin_memory(self) -> Batch:
        """Page-locked copies (the DataLoader's pinning thread); the shared buffers released right away."""
        pinned = self.batch.pin_memory()
        for k in self.slots:
            if k >= 0:
                release(self.flags, k)
        return pinned


def _released_when_gone(t: torch.Tensor, flags: torch.Tensor, slot: int) -> torch.Tensor:
    """``t`` as a tensor whose memory is a NumPy array that calls :func:`release` when it is collected."""
    array = t.view(torch.uint8).reshape(-1).numpy()
    weakref.finalize(array, release, flags, slot)
    return torch.from_numpy(array).view(t.dtype).view(t.shape)


class _WholeBatches(Dataset):
    """``dataset`` read a whole batch at a time (its ``read_batch``), without unstacking into items; with
    ``pinned``, into page-locked memory when read in the main process (workers' batches are pinned by the
    DataLoader's own thread)."""

    def __init__(self, dataset: Dataset, pinned: bool = False):
        self.dataset, self.pinned = dataset, pinned

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitems__(self, items: list[int]):
        buffers = getattr(self.dataset, "buffers", None)
        try:
            if get_worker_info() is None:
                with pinned_batches(self.pinned):
                    return self.dataset.read_batch(items)
            if buffers is None:
                return self.dataset.read_batch(items)
            with buffers.lending():
                batch = self.dataset.read_batch(items)
                flags, slots = buffers.lend(batch.tensors())
                return _Lent(batch, flags, slots) if max(slots, default=-1) >= 0 else batch
        except DataReadError as exc:
            return _ReadFailure(str(exc))
        except OSError as exc:  # e.g. a worker opening a file that changed since the run opened it
            return _ReadFailure(f"{one_line(exc)} (while reading samples of a batch)")


def _whole(batch):
    return batch


def _one_thread(_worker_id: int) -> None:
    torch.set_num_threads(1)


class Loader:
    """Batches of ``dataset`` for one process.

    Args:
        dataset: a map-style dataset with ``read_batch(items) -> Batch`` of stacked tensors (every
            ``pde_data`` dataset; :class:`pde_data.datasets.batches.BatchReads`).
        batch_size: global batch size (split over processes).
        seed: seed of the per-epoch order. shuffle: ``False`` keeps the item order (validation).
        dist: this process's place; ``world_size`` processes split every global batch.
        workers: DataLoader worker processes (0: read in this process). prefetch: batches per worker.
    """

    def __init__(self, dataset: Dataset, *, batch_size: int, seed: int = 0, shuffle: bool = True,
                 dist: DistInfo | None = None, workers: int = 0, prefetch: int = 2):
        if batch_size < 1:
            raise ValueError(f"batch size: expected a positive integer, found {batch_size}")
        if workers < 0 or prefetch < 1:
            raise ValueError(f"workers/prefetch: expected workers >= 0 and prefetch >= 1, found {workers}, {prefetch}")
        self.dist, self.dataset, self.workers = dist or DistInfo(), dataset, workers
        self._sampler = _EpochSampler(len(dataset), batch_size, seed, shuffle, self.dist.rank, self.dist.world_size)
        extra = dict(persistent_workers=True, prefetch_factor=prefetch, worker_init_fn=_one_thread) if workers else {}
        # the loader's own generator: creating an iterator draws a base seed, which must not come from
        # (and shift) the global RNG, or the number of workers and resuming would change a run's randomness
        cuda = self.dist.device.type == "cuda"
        self._loader = DataLoader(_WholeBatches(dataset, pinned=cuda), batch_sampler=self._sampler, num_workers=workers,
                                  collate_fn=_whole, pin_memory=cuda,
                                  generator=torch.Generator().manual_seed(seed), **extra)

    def __len__(self) -> int:
        """Number of items (windows or pairs) in the dataset."""
        return len(self.dataset)

    def global_sizes(self, epoch: int) -> list[int]:
        """The size of each global batch of ``epoch`` (this process reads its slice of each)."""
        self._sampler.epoch = epoch
        return [len(b) for b in self._sampler.batches()]

    def epoch(self, epoch: int) -> Iterator[Batch]:
        """This process's batches of ``epoch``, moved to the device (non-blocking from pinned memory)."""
        self._sampler.epoch = epoch
        for batch in self._loader:
            if isinstance(batch, _ReadFailure):
                raise DataReadError(batch.message)
            if isinstance(batch, _Lent):
                batch = batch.unwrap()
            yield batch.to(self.dist.device, non_blocking=True)
