"""Training: the trainer, streaming loaders, checkpoints, scale-out and the run-level API
(``train_run``, ``load_run``, ``evaluate_run``)."""

from operators.training.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from operators.training.data import LoaderConfig
from operators.training.evaluate import evaluate_run
from operators.training.loader import Batch, Loader, TensorPairs
from operators.training.run import LoadedRun, load_run, train_run
from operators.training.runfolder import RunFolderError
from operators.training.rundata import RunData, Splits, describe
from operators.training.trainer import NonFiniteLossError, TrainConfig, Trainer, epoch_order

__all__ = ["TrainConfig", "Trainer", "NonFiniteLossError", "epoch_order", "train_run", "load_run", "LoadedRun",
           "evaluate_run", "LoaderConfig", "Loader", "Batch", "TensorPairs", "RunData", "Splits", "describe",
           "RunFolderError",
           "save_checkpoint", "load_checkpoint", "CheckpointError"]
