"""Training: the run spec, the tasks, the trainer, streaming loaders, checkpoints, scale-out and the run-level
API (``train_run``, ``load_run``, ``evaluate_run``)."""

from operators.training.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from operators.training.evaluate import evaluate_run, predict_run
from operators.training.loader import Loader
from operators.training.run import LoadedRun, load_run, stored_spec, train_run
from operators.training.runfolder import RunFolderError
from operators.training.spec import (DataSpec, LoadingSpec, ModelSpec, OptimSpec, RunSpec, SpecError, Splits,
                                     TaskSpec)
from operators.training.tasks import Classify, Normalizers, Sequence, Steady, Task, Window, make_task, resolve
from operators.training.trainer import NonFiniteLossError, Trainer, epoch_order
from pde_data.datasets.batch import Batch

__all__ = ["RunSpec", "DataSpec", "TaskSpec", "ModelSpec", "OptimSpec", "LoadingSpec", "Splits", "SpecError",
           "Task", "Steady", "Window", "Classify", "Sequence", "Normalizers", "resolve", "make_task",
           "Trainer", "NonFiniteLossError", "epoch_order", "train_run", "load_run", "stored_spec", "LoadedRun",
           "evaluate_run", "predict_run", "Loader", "Batch", "RunFolderError", "save_checkpoint", "load_checkpoint", "CheckpointError"]
