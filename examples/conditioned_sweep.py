"""Conditioned on a PDE parameter: Darcy flow with a forcing β drawn per sample, ``fno`` and ``chonn_fno`` each
trained with and without ``--condition beta``, scored inside and beyond the training range of β.

Darcy's u is linear in β (−∇·(a∇u) = β), so a model that sees only ``a`` cannot know the scale of ``u``: the
best it can do is one scale ``c`` for every sample, an error ``|1 − c/β|`` even with the exact solver (the
*β-blind reference* below, ``c`` the best on the training samples' β). A model conditioned on β (FiLM,
``operators/models/conditioning.py``) can learn the scale.

Data, made in a temporary folder that is deleted at the end (``circuitop generate darcy``):

- ``--gen beta=0.5..2`` (data seed ``--seed``): trained on its train split; scored on its test split, samples whose β
  values are new but inside the training range (*in range*);
- ``--gen beta=2..3`` (data seed ``--seed`` + 1): scored on every sample (``samples="all"``; *out of range*).

Runs: ``circuitop train`` in its own process per model, condition and training seed (``--seed``), ``--threads 1``;
the runs of one model share data, split, epochs, batch size, lr, schedule and model config and differ only in
``--condition beta``. Each is scored with ``evaluate_run`` on the model of its last epoch (no validation split).
Training time: the epochs' own seconds (``history.json``); the process's wall clock (start-up, data, writing the run)
is stored beside it.

Scales:

- medium (default): 400 samples at 32², split 320 / 0 / 80, and 60 out of range; 30 epochs, batch 20, AdamW lr 3e-3,
  cosine schedule; ``fno`` n_modes 8, width 16; ``chonn_fno`` n_modes 8 with a small config for CPU time (width 12,
  order 2, d_state 4, expand 1; the CKB makes it about 2× slower per epoch than this fno). Measured with 1 thread on
  2 cores shared with other jobs (load 2-4): per epoch of 320 samples fno 1.6-1.7 s, chonn_fno 3.4 s (order 1:
  2.5 s; d_state 16, expand 2: 6 s); one 30-epoch run: fno 52 s of epochs in 59 s of process, chonn_fno 102 s in
  110 s. Estimate for the whole run (12 runs, 24 evaluations): about 18 minutes (up to about 25 on a busier machine).
- ``--smoke``: 16 samples at 16² (10 / 0 / 6) and 6 out of range, tiny models, one epoch: about a minute.

Writes ``--out`` (default ``results/medium/conditioned_sweep.json``): per model, condition and seed the in-range and
out-of-range rel. L2, training time, parameters and the errors grouped by β (``per_parameter``); the mean-field
predictor's and the β-blind reference's errors; the settings and the code version. RESULTS.md's section comes from it
(``examples/_conditioning_tables.py``).

    OMP_NUM_THREADS=1 python examples/conditioned_sweep.py [--smoke] [--seeds 0 1 2] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import pde_data  # noqa: E402
from evaluation import metrics  # noqa: E402
from evaluation.by_parameter import by_parameter  # noqa: E402
from operators.provenance import code_version  # noqa: E402
from operators.training import evaluate_run, load_run  # noqa: E402
from pde_data.core.model import SAMPLE  # noqa: E402

SCRIPT = "conditioned_sweep"
PARAMETER = "beta"
#: scale -> grid, samples and β range of each file, the split of the first, optimisation, model configs
SCALES = {
    "medium": dict(n_grid=32, train=dict(n=400, beta="0.5..2"), out_of_range=dict(n=60, beta="2..3"),
                   split=(320, 0, 80), epochs=30, batch_size=20, lr=3e-3, scheduler="cosine",
                   models={"fno": dict(n_modes=8, width=16),
                           "chonn_fno": dict(n_modes=8, width=12, order=2, d_state=4, expand=1)}),
    "smoke": dict(n_grid=16, train=dict(n=16, beta="0.5..2"), out_of_range=dict(n=6, beta="2..3"),
                  split=(10, 0, 6), epochs=1, batch_size=5, lr=3e-3, scheduler="cosine",
                  models={"fno": dict(n_modes=4, width=8, n_layers=2),
                          "chonn_fno": dict(n_modes=4, width=8, n_layers=2, order=1, d_state=2, expand=1)}),
}


def _cli(*args: str) -> float:
    """``circuitop ARGS`` in its own process (``--threads 1`` where the command takes it); its wall clock (s)."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "operators.cli", *args], cwd=ROOT, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"circuitop {' '.join(args)}: exit {done.returncode}: {done.stderr.strip()[-2000:]}")
    return time.perf_counter() - start


def make_sets(scale: dict, seed: int, work: Path) -> tuple[Path, Path]:
    """The training file (seed ``seed``) and the out-of-range file (seed ``seed + 1``) in ``work``."""
    paths = {}
    for offset, name in enumerate(("train", "out_of_range")):
        part, paths[name] = scale[name], work / f"{name}.nc"
        _cli("generate", "darcy", "--gen", f"{PARAMETER}={part['beta']}", "--n", str(part["n"]), "--n-grid",
             str(scale["n_grid"]), "--seed", str(seed + offset), "--out", str(paths[name]), "--threads", "1")
    return paths["train"], paths["out_of_range"]


def train(scale: dict, model: str, conditioned: bool, seed: int, data: Path, out: Path) -> dict:
    """``circuitop train`` of one run into ``out``; its parameters, epochs, training seconds and final loss."""
    config = [f"{k}={v}" for k, v in scale["models"][model].items()]
    condition = ["--condition", PARAMETER] if conditioned else []
    process_s = _cli("train", "--data", str(data), "--model", model, "--config", *config, *condition,
                     "--split", ",".join(map(str, scale["split"])), "--epochs", str(scale["epochs"]),
                     "--batch-size", str(scale["batch_size"]), "--lr", str(scale["lr"]), "--scheduler",
                     scale["scheduler"], "--seed", str(seed), "--cache", "memory", "--device", "cpu",
                     "--threads", "1", "--no-progress", "--out", str(out))
    history = json.loads((out / "history.json").read_text())
    params = sum(p.numel() for p in load_run(out, checkpoint="last").model.parameters() if p.requires_grad)
    return {"params": params, "epochs": len(history), "train_s": sum(r["epoch_s"] for r in history),
            "process_s": process_s, "final_train_loss": history[-1]["train_loss"]}


def by_beta(result: dict, data: Path, train_range: tuple[float, float]) -> dict:
    """An evaluation's errors grouped by β: evaluate's own ``per_parameter`` for a conditioned run; for an
    unconditioned run (evaluate groups only conditioned ones) the same grouping of its ``pred.nc``'s per-sample
    rel. L2, with β in float32 as a conditioned run's batches carry it."""
    if "per_parameter" in result:
        return result["per_parameter"][PARAMETER]
    with pde_data.open_source(Path(result["out"]) / "pred.nc").dataset as pred, \
            pde_data.open_source(data).dataset as ds:
        ids = pred[SAMPLE].values
        true = ds["u"].isel({SAMPLE: ids}).transpose(*pred["u"].dims)
        errors = metrics.rel_l2(pred["u"].values, true.values, reduce="none")
        values = ds[PARAMETER].values[ids].astype(np.float32)
    groups = by_parameter(values, errors, train_range)
    return {"train_range": list(train_range), "groups": [g.to_dict() for g in groups]}


def score(run: Path, data: Path, ood: Path, train_range: tuple[float, float], work: Path) -> dict:
    """In-range (the run's test split) and out-of-range (every sample of ``ood``) rel. L2 of the last epoch's model,
    and both grouped by β."""
    row, groups = {}, {}
    for where, path, samples in (("in_range", data, "test"), ("out_of_range", ood, "all")):
        result = evaluate_run(run, path, samples=samples, checkpoint="last", plots=False, device="cpu",
                              out=work / "eval" / f"{run.name}-{where}", overwrite=True)
        row[f"{where}_rel_l2"] = result["metrics"]["rel_l2"]
        groups[where] = by_beta(result, path, train_range)
    return {**row, "per_parameter": groups}


def baselines(data: Path, ood: Path, splits: dict) -> dict:
    """The mean-field predictor's rel. L2 (the training samples' mean u for every sample) and the β-blind
    reference's: the exact solution scaled by the one ``c`` that minimises the training samples' mean ``|1 − c/β|``
    (the rel. L2 of ``c·v`` against ``β·v``). No predictor of ``u`` from ``a`` alone has a lower expected error on
    β drawn as in training; a model without β that learned the rest exactly reaches it."""
    with pde_data.open_source(data).dataset as ds, pde_data.open_source(ood).dataset as far:
        mean = ds["u"].isel({SAMPLE: splits["train"]}).mean(SAMPLE).values
        beta_train = ds[PARAMETER].values[splits["train"]]
        sets = {"in_range": (ds["u"].isel({SAMPLE: splits["test"]}).values, ds[PARAMETER].values[splits["test"]]),
                "out_of_range": (far["u"].values, far[PARAMETER].values)}
    candidates = np.sort(beta_train)  # the mean of |1 - c/β| is piecewise linear in c: its minimum is at some β
    c = candidates[np.abs(1 - candidates[:, None] / beta_train[None]).mean(1).argmin()]
    return {"mean_field_predictor": {w: float(metrics.rel_l2(np.repeat(mean[None], len(u), 0), u))
                                     for w, (u, _) in sets.items()},
            "beta_blind_reference": {w: float(np.abs(1 - c / beta).mean()) for w, (_, beta) in sets.items()},
            "beta_blind_scale": float(c)}


def _train_range(run: Path, data: Path) -> tuple[dict, tuple[float, float]]:
    """The run's splits (``run.json``: the same for every run, one split seed) and β's range over its train split."""
    splits = json.loads((run / "run.json").read_text())["data"]["splits"]
    with pde_data.open_source(data).dataset as ds:
        beta = ds[PARAMETER].values[splits["train"]].astype(np.float32)
    return splits, (float(beta.min()), float(beta.max()))


def sweep(scale: dict, seeds: list[int], data_seed: int, work: Path) -> tuple[list[dict], dict, dict]:
    """Every model × condition × seed: the rows, the baselines and the training range of β."""
    data, ood = make_sets(scale, data_seed, work)
    rows, splits, train_range = [], None, None
    for seed, model, conditioned in ((s, m, c) for s in seeds for m in scale["models"] for c in (False, True)):
        run = work / "runs" / f"{model}-{'conditioned' if conditioned else 'plain'}-seed{seed}"
        row = {"model": model, "conditioned": conditioned, "seed": seed,
               **train(scale, model, conditioned, seed, data, run)}
        if splits is None:
            splits, train_range = _train_range(run, data)
        rows.append(row | score(run, data, ood, train_range, work))
        print(f"{run.name}: in range {rows[-1]['in_range_rel_l2']:.4f}, out of range "
              f"{rows[-1]['out_of_range_rel_l2']:.4f}, {row['train_s']:.0f} s of training", flush=True)
    return rows, baselines(data, ood, splits), {"train_range": list(train_range)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--smoke", action="store_true", help="tiny run for the tests (about a minute)")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="training seeds")
    p.add_argument("--seed", type=int, default=0, help="data seed of the training file (out of range: seed + 1)")
    p.add_argument("--out", type=Path, default=ROOT / "results" / "medium" / f"{SCRIPT}.json")
    args = p.parse_args()
    torch.set_num_threads(1)  # the in-process evaluations, as the train processes (--threads 1)
    scale_name = "smoke" if args.smoke else "medium"
    scale = SCALES[scale_name]
    start, load = time.perf_counter(), os.getloadavg()[0]
    work = Path(tempfile.mkdtemp(prefix=f"{SCRIPT}."))
    try:
        rows, bars, found = sweep(scale, args.seeds, args.seed, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    payload = {"script": f"examples/{SCRIPT}.py", "scale": scale_name,
               "settings": {**scale, **found, "data_seeds": [args.seed, args.seed + 1], "checkpoint": "last",
                            "threads": 1},
               "environment": {"torch": torch.__version__, "threads": torch.get_num_threads(), "device": "cpu",
                               "cores": os.cpu_count(), "load_average": [round(load, 2), round(os.getloadavg()[0], 2)],
                               "note": "load_average: the 1-minute load at start and end; timings are noisy when the "
                                       "machine is shared", **code_version()},
               **bars, "rows": rows, "wall_s": time.perf_counter() - start}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(payload, indent=1))
    print(f"wrote {args.out}")
    from examples._conditioning_tables import conditioned_sweep

    print("\n".join(conditioned_sweep(payload)))


if __name__ == "__main__":
    main()
