"""Scale-out on torch.distributed: one process per device under ``torchrun``, DistributedDataParallel,
gloo on CPU and NCCL on GPU. Without ``torchrun`` (no ``WORLD_SIZE``) everything is a no-op."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Sequence

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from operators.training.spec_values import SpecError

__all__ = ["DistInfo", "setup", "cleanup", "wrap", "unwrap", "all_reduce_sum", "all_gather_rows", "device_of"]


@dataclass(frozen=True)
class DistInfo:
    """This process's place: ``rank`` of ``world_size`` on ``device``; rank 0 logs and checkpoints."""

    rank: int = 0
    world_size: int = 1
    device: torch.device = torch.device("cpu")

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def device_of(device: str | torch.device | None, *, local_rank: int = 0) -> torch.device:
    """The torch device ``device`` names, with an index: None (CUDA available) and ``"cuda"`` mean
    ``cuda:local_rank``, the GPU of this process under ``torchrun``; None without CUDA means the CPU.

    Raises:
        SpecError: one line naming ``device`` when it is not a device name, or names one this machine lacks
        (also a GPU per process that the node does not have: more ``torchrun`` processes than GPUs).
    """
    if device is None and not torch.cuda.is_available():
        return torch.device("cpu")
    try:
        dev = torch.device("cuda" if device is None else device)
    except (RuntimeError, TypeError):
        raise SpecError("device", f"expected a torch device such as 'cpu', 'cuda' or 'cuda:1', found {device!r}") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise SpecError("device", f"expected a device this machine has; found {device!r}, but torch "
                        f"{torch.__version__} sees no CUDA device here (use cpu)")
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", local_rank)
        if local_rank >= torch.cuda.device_count():
            raise SpecError("device", f"expected a GPU for each process on this node: local rank {local_rank} of "
                            f"{torch.cuda.device_count()} CUDA device(s); start at most {torch.cuda.device_count()} "
                            "processes per node, or use device 'cpu'")
    if dev.type == "cuda" and dev.index >= torch.cuda.device_count():
        raise SpecError("device", f"expected one of the {torch.cuda.device_count()} CUDA devices, found {device!r}")
    return dev


def setup(device: str | None = None) -> DistInfo:
    """Join the process group ``torchrun`` describes in the environment (if any) and pick the device.

    ``device`` None: ``cuda:LOCAL_RANK`` when CUDA is available, else CPU.
    """
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    dev = device_of(device, local_rank=local)
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    if world > 1 and not dist.is_initialized():
        dist.init_process_group(backend="nccl" if dev.type == "cuda" else "gloo")
    rank = dist.get_rank() if dist.is_initialized() else 0
    return DistInfo(rank=rank, world_size=world, device=dev)


def cleanup() -> None:
    """Leave the process group if one was joined."""
    if dist.is_initialized():
        dist.destroy_process_group()


def wrap(model: nn.Module, info: DistInfo) -> nn.Module:
    """``DistributedDataParallel(model)`` in a distributed run, else ``model``."""
    if not info.distributed:
        return model
    ids = [info.device.index] if info.device.type == "cuda" else None
    return DistributedDataParallel(model, device_ids=ids)


def unwrap(model: nn.Module) -> nn.Module:
    """The module inside a DDP wrapper (or ``model`` itself)."""
    return model.module if isinstance(model, DistributedDataParallel) else model


def all_reduce_sum(t: torch.Tensor, info: DistInfo) -> torch.Tensor:
    """Sum of ``t`` over all processes (a copy on ``t``'s device, reduced on the run's; ``t`` itself when not
    distributed)."""
    if not info.distributed:
        return t
    out = t.detach().to(info.device, copy=True)  # NCCL reduces CUDA tensors only
    dist.all_reduce(out, op=dist.ReduceOp.SUM)
    return out.to(t.device)


def all_gather_rows(t: torch.Tensor, counts: Sequence[int], info: DistInfo) -> torch.Tensor:
    """Every process's ``t`` concatenated in rank order: ``(sum(counts), *rest)`` from ``(counts[rank], *rest)``
    (the same ``rest`` and dtype on every process), on ``t``'s device, gathered on the run's; ``t`` itself when
    not distributed."""
    if len(counts) != info.world_size or len(t) != counts[info.rank]:
        raise ValueError(f"t: expected counts[{info.rank}] rows of one count per process ({info.world_size}), found "
                         f"{len(t)} rows and counts {list(counts)}")
    if not info.distributed:
        return t
    padded = t.new_zeros((max(counts), *t.shape[1:]), device=info.device)  # all_gather needs equal shapes
    padded[:len(t)] = t
    parts = [torch.empty_like(padded) for _ in counts]
    dist.all_gather(parts, padded)
    return torch.cat([part[:n] for part, n in zip(parts, counts)]).to(t.device)
