"""Scale-out on torch.distributed: one process per device under ``torchrun``, DistributedDataParallel,
gloo on CPU and NCCL on GPU. Without ``torchrun`` (no ``WORLD_SIZE``) everything is a no-op."""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

__all__ = ["DistInfo", "setup", "cleanup", "wrap", "unwrap", "all_reduce_sum"]


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


def setup(device: str | None = None) -> DistInfo:
    """Join the process group ``torchrun`` describes in the environment (if any) and pick the device.

    ``device`` None: ``cuda:LOCAL_RANK`` when CUDA is available, else CPU.
    """
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if device is None:
        dev = torch.device(f"cuda:{local}") if torch.cuda.is_available() else torch.device("cpu")
    else:
        dev = torch.device(device)
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
    """Sum of ``t`` over all processes (a copy; ``t`` itself when not distributed)."""
    if not info.distributed:
        return t
    out = t.detach().clone()
    dist.all_reduce(out, op=dist.ReduceOp.SUM)
    return out
