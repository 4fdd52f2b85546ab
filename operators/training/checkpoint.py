"""Checkpoints: written atomically (temporary file + rename), read with ``weights_only=True`` only.

A checkpoint holds plain values and tensors: model/optimizer/scheduler state dicts, normalizer
statistics, the resolved run spec as plain values (:meth:`operators.training.RunSpec.to_dict`) and the
RNG states as tensors. Nothing in it needs a custom class to be unpickled, and a file that does is refused.

A write that fills the disk removes its temporary file, so the checkpoint it was to replace stays whole, and
raises a :class:`~pde_data.core.room.NoRoomError` naming the folder, the bytes needed and the bytes free.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import shutil
import signal
import threading
from pathlib import Path

import torch

from pde_data import atomic_path
from pde_data.core.room import NoRoomError, format_bytes, free_bytes, is_disk_full

__all__ = ["save_checkpoint", "link_checkpoint", "load_checkpoint", "rng_state", "set_rng_state", "tensor_state",
           "ema_weights", "state_bytes", "estimate_bytes", "CheckpointError"]


class CheckpointError(ValueError):
    """A checkpoint file is missing, unreadable or not a plain-values checkpoint."""


def save_checkpoint(path: str | os.PathLike, state: dict) -> Path:
    """``torch.save(state)`` to a temporary file beside ``path``, then rename it into place; a failed write
    removes the temporary file and leaves what was at ``path``.

    Raises:
        NoRoomError: the disk filled up (its ``needed`` is :func:`state_bytes` of ``state``).
    """
    path = Path(path)
    writer = None
    try:
        with _interrupts_held(), atomic_path(path) as tmp, tmp.open("wb") as fh:
            writer = _Writer(fh)
            torch.save(state, writer)
    except (OSError, RuntimeError) as exc:
        if not is_disk_full(exc) and not (writer is not None and is_disk_full(writer.error)):
            raise
        needed, free = state_bytes(state), free_bytes(path.parent)
        raise NoRoomError(f"expected room for a checkpoint of about {format_bytes(needed)} ({needed:,} bytes), "
                          f"found {format_bytes(free)} free in {path.parent}", path.parent, needed, free) from None
    return path


@contextlib.contextmanager
def _interrupts_held():
    """Hold Ctrl-C (SIGINT) until the block is done, then deliver it. Raised inside torch's writer, the
    interrupt would leave torch's C++ archive writing its end to a closed file, and the process would abort
    (SIGABRT, "terminate called") instead of stopping with the last checkpoint whole. Signals reach only the
    main thread, so elsewhere this holds nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: caught.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if caught:
            os.kill(os.getpid(), signal.SIGINT)


class _Writer:
    """The file ``torch.save`` writes to, keeping the error of a failed write: torch reports a full disk as its
    own ``RuntimeError`` ("unexpected pos ..."), raised while it closes the archive after the failed write."""

    def __init__(self, fh):
        self.fh, self.error = fh, None

    def write(self, data) -> int:
        try:
            return self.fh.write(data)
        except OSError as exc:
            self.error = exc
            raise

    def flush(self) -> None:
        try:
            self.fh.flush()
        except OSError as exc:
            self.error = exc
            raise


def link_checkpoint(source: str | os.PathLike, path: str | os.PathLike) -> Path:
    """``path`` holding what the checkpoint ``source`` holds, put in place atomically: a hard link to the same
    file (nothing written again), or a copy where the file system has no hard links. Checkpoints are only ever
    replaced by a rename (:func:`save_checkpoint`), never rewritten in place, so each name keeps its content
    when the other is replaced."""
    with atomic_path(path) as tmp:
        tmp.unlink()
        try:
            os.link(source, tmp)
        except OSError:
            shutil.copyfile(source, tmp)
    return Path(path)


def load_checkpoint(path: str | os.PathLike, *, map_location: str | torch.device = "cpu") -> dict:
    """Load a checkpoint with ``torch.load(weights_only=True)``; never unpickles arbitrary objects.

    Raises:
        CheckpointError: the file is missing, truncated, or holds objects that need unpickling.
    """
    p = Path(path)
    if not p.is_file():
        raise CheckpointError(f"no checkpoint at {p}")
    try:
        state = torch.load(p, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError:  # torch's own message advises weights_only=False: never pass that on
        raise CheckpointError(f"{p}: expected a checkpoint of tensors and plain values, found objects that "
                              "would need arbitrary unpickling; refusing to load it") from None
    except Exception as exc:  # noqa: BLE001 - a junk or truncated file raises anything from KeyError to OSError
        raise CheckpointError(f"{p}: expected a checkpoint written by circuitop train, found an unreadable "
                              f"file ({type(exc).__name__})") from None
    if not isinstance(state, dict) or "model" not in state:
        raise CheckpointError(f"{p}: expected a dict with a 'model' state, found {type(state).__name__}")
    return state


def state_bytes(state) -> int:
    """The bytes of the tensors in ``state`` (nested dicts, lists and tuples): about the size of its checkpoint,
    whose other values (spec, history) take a few kB."""
    if torch.is_tensor(state):
        return state.numel() * state.element_size()
    if isinstance(state, dict):
        return sum(state_bytes(v) for v in state.values())
    if isinstance(state, (list, tuple)):
        return sum(state_bytes(v) for v in state)
    return 0


def estimate_bytes(state: dict, optimizer: torch.optim.Optimizer) -> int:
    """About the bytes of the checkpoint of ``state``: :func:`state_bytes`, with the two moments per parameter
    of ``optimizer`` (Adam, AdamW) counted before its first step makes them."""
    if optimizer.state:
        return state_bytes(state)
    params = [p for group in optimizer.param_groups for p in group["params"]]
    return state_bytes(state) + 2 * sum(p.numel() * p.element_size() for p in params)


def tensor_state(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """``module.state_dict()`` without non-tensor entries.

    neuraloperator's models add a ``_metadata`` entry holding their constructor arguments, among them
    functions and classes (``gelu``, ``SpectralConv``) that only arbitrary unpickling could restore;
    their ``load_state_dict`` accepts a state without it.
    """
    return {k: v for k, v in module.state_dict().items() if torch.is_tensor(v)}


def ema_weights(ema: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The model's state from the state of its average (``torch.optim.swa_utils.AveragedModel``: ``module.*`` and
    the count of updates)."""
    return {k[len("module."):]: v for k, v in ema.items() if k.startswith("module.")}


def rng_state() -> dict:
    """The torch CPU (and CUDA) RNG states as tensors."""
    state = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = [s for s in torch.cuda.get_rng_state_all()]
    return state


def set_rng_state(state: dict) -> None:
    """Restore what :func:`rng_state` returned."""
    torch.set_rng_state(state["torch"].cpu())
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([s.cpu() for s in state["cuda"]])
