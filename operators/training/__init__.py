"""Training: the trainer, checkpoints, scale-out and the run-level API (``train_run``, ``load_run``)."""

from operators.training.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from operators.training.evaluate import evaluate_run
from operators.training.run import LoadedRun, load_run, train_run
from operators.training.trainer import NonFiniteLossError, TrainConfig, Trainer, epoch_order

__all__ = ["TrainConfig", "Trainer", "NonFiniteLossError", "epoch_order", "train_run", "load_run", "LoadedRun",
           "evaluate_run",
           "save_checkpoint", "load_checkpoint", "CheckpointError"]
