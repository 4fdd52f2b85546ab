"""Evaluate a trained classification run: top-1/top-5 accuracy and cross-entropy on its stored test
split (or every sample with ``all_samples``), streamed in batches; the predicted classes go to
``pred.nc`` (variable ``label`` of dims ``(sample,)``, the source's sample indices as coordinate)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import torch
import xarray as xr

import evaluation
import pde_data
from operators.training.run import LoadedRun
from pde_data import atomic_path
from pde_data.model import SAMPLE

__all__ = ["evaluate_classifier"]


@torch.no_grad()
def evaluate_classifier(run: LoadedRun, run_dir: Path, ds: xr.Dataset, data, idx: np.ndarray, split: str, *,
                        write: bool, batch_size: int, device: torch.device) -> dict:
    """``{"data", "samples", "n_samples", "epoch", "metrics": {top1, top5, cross_entropy}, "files"}``."""
    rd, norm = run.data, run.normalizers["input"]
    labels = torch.as_tensor(pde_data.read_labels(ds, rd.targets[0], idx))
    if labels.numel() and int(labels.max()) >= rd.classes:
        raise ValueError(f"{os.fspath(data)}: expected labels below the run's {rd.classes} classes, found {int(labels.max())}")
    sums, predicted = {"top1": 0.0, "top5": 0.0, "cross_entropy": 0.0}, []
    for start in range(0, len(idx), batch_size):
        x = pde_data.read_samples(ds, rd.inputs, idx[start:start + batch_size])
        logits = run.model((x if norm is None else norm.encode(x)).to(device)).float().cpu()
        y = labels[start:start + batch_size]
        sums["top1"] += float(evaluation.top_k_accuracy(logits, y, 1, reduce="none").sum())
        sums["top5"] += float(evaluation.top_k_accuracy(logits, y, 5, reduce="none").sum())
        sums["cross_entropy"] += float(evaluation.cross_entropy(logits, y, reduce="none").sum())
        predicted.append(logits.argmax(dim=1))
    result = {"data": os.fspath(data), "samples": split, "n_samples": int(len(idx)), "epoch": run.epoch,
              "metrics": {k: v / max(len(idx), 1) for k, v in sums.items()}}
    result["files"] = _write(run_dir, result, idx, torch.cat(predicted).numpy(), rd.targets[0]) if write else []
    return result


def _write(out: Path, result: dict, idx: np.ndarray, predicted: np.ndarray, name: str) -> list[str]:
    files = [out / "pred.nc", out / "metrics.json"]
    pde_data.save(xr.Dataset({name: ((SAMPLE,), predicted.astype(np.int64))}, coords={SAMPLE: idx}), files[0])
    with atomic_path(files[1]) as tmp:
        tmp.write_text(json.dumps({**result, "files": [str(f) for f in files]}, indent=1))
    return [str(f) for f in files]
