"""Reused batch memory (:class:`pde_data.datasets.batches.BatchBuffers`): a buffer is handed out again only once
nothing references a tensor over it, so reuse never changes a batch someone still holds."""

import pickle

import torch

from pde_data.datasets.batches import BatchBuffers


def address(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


def test_a_buffer_is_reused_only_once_every_tensor_over_it_is_gone():
    pool = BatchBuffers()
    first = pool.tensor((4, 3), torch.float32)
    where = address(first)
    row, array = first[1], first.numpy()  # a view and a NumPy array keep the memory too
    del first
    second = pool.tensor((4, 3), torch.float32)
    assert address(second) != where
    del row
    assert address(pool.tensor((4, 3), torch.float32)) != where  # the array still holds it
    del array
    again = pool.tensor((2, 3), torch.float64)  # a smaller tensor, of another dtype, in the same buffer
    assert address(again) == where and again.shape == (2, 3) and again.dtype == torch.float64
    assert again.is_contiguous() and again.device.type == "cpu"


def test_batches_kept_by_the_caller_never_change():
    pool, kept = BatchBuffers(slots=2), []
    for k in range(5):  # more batches kept than buffers: beyond the slots, new memory
        batch = pool.tensor((3, 5), torch.float32)
        batch.fill_(k)
        kept.append(batch)
    assert [float(b.mean()) for b in kept] == [0, 1, 2, 3, 4]
    assert len({address(b) for b in kept}) == 5
    del kept, batch
    assert len({address(pool.tensor((3, 5), torch.float32)) for _ in range(4)}) == 1  # dropped each time: reused


def test_a_pool_pickles_empty():
    pool = BatchBuffers(slots=3)
    held = pool.tensor((1000,), torch.uint8)
    copy = pickle.loads(pickle.dumps(pool))
    assert copy.slots == 3 and address(copy.tensor((1000,), torch.uint8)) != address(held)
