"""Evaluate a trained run on a data file: the metric suite, rollouts with per-step curves, and plots.

Which samples: the run's own test split when ``data`` is the file it was trained on (its validation
split if the test split is empty), every sample of any other file (e.g. an out-of-distribution set).
Results go into the run folder: ``metrics.json``, ``rollout.csv`` (per-step relative L2) and PNGs.

Example:
    >>> result = evaluate_run("runs/ns-chonn", "ns.nc", rollout=40)
    >>> result["rollout"]["mean_rel_l2"], result["metrics"]["nRMSE"]
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np
import torch

import evaluation
import pde_data
from operators.rollout import rollout as autoregress
from operators.training.data import materialize, open_data
from operators.training.run import load_run
from pde_data import atomic_path
from pde_data.model import SAMPLE, TIME

__all__ = ["evaluate_run"]


def _samples(ds, info: dict, data: str) -> tuple[np.ndarray, str]:
    if info.get("file") and os.path.abspath(data) == info["file"]:
        splits = pde_data.split_indices(ds.sizes[SAMPLE], sizes=info["sizes"], seed=info["seed"])
        name = "test" if len(splits["test"]) else "val"
        return splits[name], name
    return np.arange(ds.sizes[SAMPLE]), "all"


def _decode(normalizer, t):
    return t if normalizer is None else normalizer.decode(t)


@torch.no_grad()
def _steady(run, ds, idx, batch_size: int = 32):
    info = run.meta["data"]
    dataset = pde_data.PairDataset(ds, info["inputs"], info["targets"], indices=idx,
                                   input_normalizer=run.normalizers["input"], output_normalizer=None)
    x, y = materialize(dataset)
    pred = torch.cat([run.model(xb) for xb in x.split(batch_size)])
    like = ds[info["targets"]].isel({SAMPLE: idx})
    return pde_data.from_tensor(_decode(run.normalizers["output"], pred), like, info["targets"]), like.load()


@torch.no_grad()
def _rollout(run, ds, idx, n_steps: int | None, batch_size: int = 16):
    info = run.meta["data"]
    m, variables, n_time = info["m"], info["variables"], ds.sizes[TIME]
    n_steps = n_steps or n_time - m
    if not 1 <= n_steps <= n_time - m:
        raise ValueError(f"--rollout: expected 1..{n_time - m} steps ({n_time} frames, {m} given), found {n_steps}")
    norm = run.normalizers["output"]
    like = ds[variables].isel({SAMPLE: idx, TIME: slice(0, m + n_steps)})
    frames = pde_data.to_tensor(like, variables)
    given = frames[:, :m] if norm is None else norm.encode(frames[:, :m])
    pred = torch.cat([autoregress(run.model, g, n_steps) for g in given.split(batch_size)])
    full = torch.cat([frames[:, :m], _decode(norm, pred)], dim=1)
    return pde_data.from_tensor(full, like, variables), like.load(), n_steps


def _json_safe(value):
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if isinstance(value, (float, np.floating)):
        return None if math.isnan(value) else float(value)
    return value


def evaluate_run(run_dir: str | os.PathLike, data: str | os.PathLike, *, rollout: int | None = None,
                 which: str = "best", write: bool = True, plots: bool = True) -> dict:
    """Metrics of the run's ``which`` checkpoint on ``data``; time-dependent runs are rolled out
    ``rollout`` steps (default: to the end of the data) from their first ``m`` frames.

    Returns ``{"data", "samples", "n_samples", "epoch", "metrics", ["rollout"]}``; with ``write`` the same
    goes to ``run_dir/metrics.json`` (plus ``rollout.csv`` and PNGs with ``plots``).
    """
    run, ds = load_run(run_dir, which=which), open_data(data)
    info = run.meta["data"]
    idx, split = _samples(ds, info, os.fspath(data))
    result = {"data": os.fspath(data), "samples": split, "n_samples": int(len(idx)), "epoch": run.epoch}
    if info["kind"] == "window":
        pred, true, n_steps = _rollout(run, ds, idx, rollout)
        per_step, mean = evaluation.rollout_errors(pred.isel({TIME: slice(info["m"], None)}),
                                                   true.isel({TIME: slice(info["m"], None)}))
        result["metrics"] = evaluation.summarize(pred, true, initial_step=info["m"])
        result["rollout"] = {"steps": n_steps, "per_step_rel_l2": [float(v) for v in per_step], "mean_rel_l2": float(mean)}
    else:
        if rollout is not None:
            raise ValueError(f"--rollout: the run at {run_dir} is a steady (input → target) model, not a time-stepper")
        pred, true = _steady(run, ds, idx)
        result["metrics"] = evaluation.summarize(pred, true)
    result = _json_safe(result)
    if write:
        _write(Path(run_dir), result, pred, true, plots)
    return result


def _write(out: Path, result: dict, pred, true, plots: bool) -> None:
    with atomic_path(out / "metrics.json") as tmp:
        tmp.write_text(json.dumps(result, indent=1))
    if "rollout" in result:
        lines = ["step,rel_l2"] + [f"{k + 1},{v}" for k, v in enumerate(result["rollout"]["per_step_rel_l2"])]
        with atomic_path(out / "rollout.csv") as tmp:
            tmp.write_text("\n".join(lines) + "\n")
    if plots:
        _plots(out, result, pred, true)


def _plots(out: Path, result: dict, pred, true) -> None:
    from evaluation import plots  # matplotlib only when plotting

    import matplotlib.pyplot as plt

    name = next(iter(true.data_vars))
    p, t = pred[name].isel({SAMPLE: 0}), true[name].isel({SAMPLE: 0})
    if TIME in p.dims:
        p, t = p.isel({TIME: -1}), t.isel({TIME: -1})
        plt.close(plots.plot_rollout({"model": result["rollout"]["per_step_rel_l2"]}, path=out / "rollout.png"))
    plt.close(plots.plot_fields(p.values, t.values, title=f"{name}, sample 0", path=out / "fields.png"))
    if p.ndim in (1, 2):
        last = {TIME: -1} if TIME in pred[name].dims else {}
        plt.close(plots.plot_spectra(pred[name].isel(last).values, true[name].isel(last).values, path=out / "spectra.png"))
