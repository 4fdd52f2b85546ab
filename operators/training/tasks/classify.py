"""Image classification: image variables ``(sample, x, y)`` → an integer label ``(sample,)``.

Cross-entropy (with ``label_smoothing``), random shifts of the training images (``shift``,
:func:`operators.training.augment.random_shift`), and top-1/top-5 accuracy and cross-entropy in
validation and ``evaluate`` (beside the majority-class baseline, :func:`majority_baseline`); ``pred.nc`` holds
the predicted classes over the source's sample indices.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

import numpy as np
import torch
import xarray as xr
from torch import nn

import evaluation
import pde_data
from operators.training.augment import random_shift
from operators.training.spec import RunSpec, SpecError
from operators.training.tasks.base import EvalOptions, MetricSums, Normalizers, Task, fit_variables
from pde_data.core.model import SAMPLE, TIME, spatial_dims

__all__ = ["Classify", "LabelTask", "CLASS_METRICS", "label_target", "label_metrics", "majority_baseline"]

#: top-1 first: the headline of a classifier (``circuitop info`` shows an evaluation's first metric)
CLASS_METRICS = {"top1": partial(evaluation.top_k_accuracy, k=1), "top5": partial(evaluation.top_k_accuracy, k=5),
                 "cross_entropy": evaluation.cross_entropy}


def label_metrics(logits: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per-sample top-1, top-5 and cross-entropy of ``logits (batch, classes)`` for ``labels (batch,)``."""
    return {name: fn(logits, labels, reduce="none") for name, fn in CLASS_METRICS.items()}


def majority_baseline(labels: torch.Tensor, classes: int) -> dict[str, float]:
    """The metrics of the best constant predictor of ``labels (n,)``, whose probabilities are their own class
    frequencies: top-1 is the share of the most frequent class, top-5 that of the five most frequent, the
    cross-entropy the labels' entropy. A classifier that does not beat it has learned nothing from its inputs."""
    if not len(labels):
        raise ValueError("labels: expected at least one label to take the majority of, found none")
    freq = torch.bincount(labels.long(), minlength=classes).double() / len(labels)
    shares = freq.sort(descending=True).values
    present = freq[freq > 0]
    return {"top1": float(shares[0]), "top5": float(shares[:5].sum()),
            "cross_entropy": float(-(present * present.log()).sum())}


def label_target(spec: RunSpec, ds: xr.Dataset) -> str | None:
    """The target when it is one label variable (or, with no target named, the data's label variable with
    an ``n_classes`` attribute: an integer per-sample setting of a PDE set is not a label), else None."""
    targets, inputs = spec.data.targets, spec.data.inputs
    if targets:
        one = len(targets) == 1 and targets[0] in ds.data_vars and pde_data.is_label(ds[targets[0]])
        return targets[0] if one else None
    labels = [v for v in ds.data_vars if pde_data.is_label(ds[v]) and "n_classes" in ds[v].attrs and v not in inputs]
    return labels[0] if labels else None


class LabelTask(Task):
    """What the tasks of one integer label per sample share (:class:`Classify`,
    :class:`~operators.training.tasks.sequence.SequenceClassification`): logits ``(batch, classes)``, cross-entropy,
    the label metrics and score, ``evaluate`` beside the majority class, and the predicted classes in ``pred.nc``."""

    losses_allowed = ("cross_entropy",)

    def losses(self, pred, batch):
        return evaluation.cross_entropy(pred, batch.targets, reduce="none",
                                        label_smoothing=self.spec.task.label_smoothing)

    def metrics(self, pred, batch):
        return label_metrics(pred, batch.targets)

    def score(self, record: dict) -> float:
        """The validation top-1 error (the training loss without validation)."""
        return 1.0 - record["val_top1"] if "val_top1" in record else record["train_loss"]

    def predicted(self, pred, batch):
        return pred.argmax(1)

    def as_dataset(self, ds, samples, pred):
        """The integer classes over the ``sample`` coordinate ``samples``."""
        classes = pred.numpy().astype(np.int64)
        return xr.Dataset({self.spec.data.targets[0]: ((SAMPLE,), classes)}, coords={SAMPLE: samples})

    def evaluate(self, model, source, samples, options: EvalOptions):
        sums, predicted, labels, classes = MetricSums(), [], [], self.spec.task.classes
        for logits, batch in self.predictions(model, source, samples, options):
            if batch.targets.numel() and int(batch.targets.max()) >= classes:  # beyond the run's classes
                raise ValueError(f"{source.name}: expected labels below the run's {classes} classes, found "
                                 f"{int(batch.targets.max())}")
            sums.add(self.metrics(logits, batch))
            predicted.append(self.predicted(logits, batch))
            labels.append(batch.targets)
        files = [pde_data.save(self.as_dataset(source.dataset, samples, torch.cat(predicted)),
                               Path(options.out) / "pred.nc")] if options.write else []
        baseline = majority_baseline(torch.cat(labels), classes)
        return {"metrics": self.result(sums), "baseline": {"majority_class": baseline}}, files


class Classify(LabelTask):
    """Images ``(batch, C, h, w)`` → logits ``(batch, classes)``."""

    kind, domain = "classify", "images"
    refused = ()

    @classmethod
    def resolve(cls, spec: RunSpec, ds: xr.Dataset) -> dict:
        label = label_target(spec, ds)
        if label is None:
            raise SpecError("data.targets", f"expected one integer label variable of dims ({SAMPLE},), found "
                            f"{list(spec.data.targets) or 'none'}")
        names = list(ds.data_vars)
        images = list(spec.data.inputs) or [v for v in names if spatial_dims(ds[v]) and TIME not in ds[v].dims]
        bad = [v for v in images if v not in names or len(spatial_dims(ds[v])) != 2 or TIME in ds[v].dims]
        if bad or not images:
            raise SpecError("data.inputs", f"expected 2D image variables (sample, x, y) to classify by {label!r}; "
                            f"found {bad or 'none'} among {names}")
        classes = pde_data.n_classes(ds, label)
        return {"data.inputs": images, "data.targets": [label], "task.classes": classes,
                "model.in_channels": len(images), "model.out_channels": classes}

    def fit_normalizers(self, source):
        return Normalizers(fit_variables(source, self.spec, self.spec.data.inputs), None)

    def item_bytes(self, source) -> int:
        return pde_data.item_bytes(source, list(self.spec.data.inputs))

    def dataset(self, source, indices, *, cache=False, targets=True, steps=None, dtype=torch.float32):
        names = self.spec.data.targets if targets else ()
        return pde_data.LabelDataset(source, self.spec.data.inputs, names, indices=list(indices), cache=cache,
                                     dtype=dtype)

    def forward(self, model: nn.Module, batch, *, training: bool):
        x = random_shift(batch.inputs, self.spec.task.shift) if training else batch.inputs
        return model(x)
