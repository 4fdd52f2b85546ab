"""Evaluate a trained classification run (called by :func:`operators.training.evaluate.evaluate_run`):
top-1/top-5 accuracy and cross-entropy over the chosen samples, streamed in batches, and the predicted
classes as ``pred.nc`` (the label variable, dims ``(sample,)``, the source's sample indices as coordinate)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch
import xarray as xr

import evaluation
import pde_data
from operators.training.run import LoadedRun
from pde_data.model import SAMPLE

__all__ = ["classify_samples", "write_predicted_classes"]


@torch.no_grad()
def classify_samples(run: LoadedRun, ds: xr.Dataset, data, idx: np.ndarray, *, batch_size: int,
                     device: torch.device) -> tuple[dict[str, float], np.ndarray]:
    """``({"top1", "top5", "cross_entropy"}, predicted classes (len(idx),))`` of the run's model on the
    samples ``idx`` of ``ds``.

    Raises:
        ValueError: the data hold labels beyond the run's classes.
    """
    rd, norm = run.data, run.normalizers["input"]
    labels = torch.as_tensor(pde_data.read_labels(ds, rd.targets[0], idx))
    if labels.numel() and int(labels.max()) >= rd.classes:
        raise ValueError(f"{os.fspath(data)}: expected labels below the run's {rd.classes} classes, "
                         f"found {int(labels.max())}")
    sums, predicted = {"top1": 0.0, "top5": 0.0, "cross_entropy": 0.0}, []
    for start in range(0, len(idx), batch_size):
        x = pde_data.read_samples(ds, rd.inputs, idx[start:start + batch_size])
        logits = run.model((x if norm is None else norm.encode(x)).to(device)).float().cpu()
        y = labels[start:start + batch_size]
        sums["top1"] += float(evaluation.top_k_accuracy(logits, y, 1, reduce="none").sum())
        sums["top5"] += float(evaluation.top_k_accuracy(logits, y, 5, reduce="none").sum())
        sums["cross_entropy"] += float(evaluation.cross_entropy(logits, y, reduce="none").sum())
        predicted.append(logits.argmax(dim=1))
    return {k: v / max(len(idx), 1) for k, v in sums.items()}, torch.cat(predicted).numpy()


def write_predicted_classes(path: Path, idx: np.ndarray, predicted: np.ndarray, name: str) -> Path:
    """``path`` (NetCDF, atomically): variable ``name`` = ``predicted`` over the ``sample`` coordinate ``idx``."""
    return pde_data.save(xr.Dataset({name: ((SAMPLE,), predicted.astype(np.int64))}, coords={SAMPLE: idx}), path)
