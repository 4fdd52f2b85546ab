"""NAC on an irregularly sampled sequence task: remaining-useful-life (RUL) regression on synthetic
degradation trajectories, NAC modes (exact / euler / steady) and Top-K settings against LTC, CfC and
multi-head attention, scored with the PHM score (NAC, Eq. 58).

Task (``pde_data.generate_degradation``, seeded): each trajectory is a noisy monotone health indicator
h(t) = 1 − (t / T_f)^p + ε, ε ~ N(0, 0.02²), with failure time T_f ~ U(50, 150), shape p ~ U(1.5, 3),
observed at ``length`` irregular times (exponential gaps) up to a cut-off t_last ~ U(0.3, 0.95)·T_f; every
trajectory of a scale has the same ``length`` (``min_length = max_length``). Target: RUL = T_f − t_last.
Inputs per step: h and the gap since the previous observation; every model also gets the step sizes of
the irregular ``time`` coordinate (NAC: as timestamps; LTC/CfC: in their dynamics; attention: as one more
input feature). Every model is a registry sequence model (linear encoder → core → last state → linear
head: ``nac``, ``ltc``, ``cfc``, ``attention``) trained by the run layer (``operators.training.train_run``)
on the mean squared error of the normalized RUL: Adam, cosine schedule, gradients clipped at 1.

Reported per model (``evaluate_run`` on the run's test split, the model of the last epoch): PHM score on RUL
(sum over the test set and per sample; lower is better; late predictions cost more — as in the IEEE PHM
2012 challenge, not the NAC paper's 0-1 target), RMSE of RUL, training time, and of the loaded model
the inference time per test batch and the peak of live tensor memory during one batch (CPU: replayed from
``torch.profiler``'s per-op allocations and frees in time order; GPU: ``torch.cuda.max_memory_allocated``),
weights excluded.

Claims and numbers beside it (docs/specs/anchors.md): the NAC paper's PHM score on PRONOSTIA is 37.50-37.75 — a
different data set and target, so not comparable; its runtime/memory table (seq 1024, T4 GPU, Keras)
ranks NAC far slower than attention and LTC/CfC far smaller in memory; here the ranking is measured.

Scales:

- full: 4,000 / 500 / 1,000 trajectories of 256 samples, d_model 64, 4 heads, Top-K 8 / 32 / all, 50
  epochs, batch 64. Run time, an estimate (not measured): 50× the quick run's sample-epochs at 8× the
  length and 4× the width — a few hours on one GPU (LTC's sequential loop dominates); days on CPU.
- ``--medium``: 1,536 / 256 / 512 trajectories of 32 samples, the quick models, 20 epochs; training
  seeds 0, 1, 2.
- ``--quick``: 384 / 64 / 256 trajectories of 32 samples, d_model 16, 2 heads, Top-K 2 / 8 / all, 10
  epochs.
- ``--smoke``: 8 / 4 / 4 trajectories of 8 samples, one epoch.

The trajectories go into ``data.nc`` (train, val and test one after another); every model trains from it
into ``runs/seed<k>/<model>``.

Outputs in ``--out`` (default ``runs/nac_sequences``): ``results.json``, ``metrics.png``, ``data.nc`` and the
run folders (checkpoints, ``metrics.json``, ``pred.nc``).

Example:
    python examples/nac_sequences.py --quick
"""

from __future__ import annotations

import time

import numpy as np
import torch

import _common
import pde_data
from evaluation import plots
from evaluation.resources import peak_memory_mb
from operators.training import DataSpec, OptimSpec, RunSpec, Splits, load_run

SCRIPT = "nac_sequences"
SCALES = {
    "full": dict(sizes=(4000, 500, 1000), length=256, d_model=64, heads=4, topks=(8, 32, None), mode_topk=8, epochs=50,
                 batch_size=64, lr=3e-3),
    "medium": dict(sizes=(1536, 256, 512), length=32, d_model=16, heads=2, topks=(2, 8, None), mode_topk=8,
                   epochs=20, batch_size=32, lr=3e-3, seeds=(0, 1, 2)),
    "quick": dict(sizes=(384, 64, 256), length=32, d_model=16, heads=2, topks=(2, 8, None), mode_topk=8, epochs=10,
                  batch_size=32, lr=3e-3),
    "smoke": dict(sizes=(8, 4, 4), length=8, d_model=4, heads=1, topks=(2, None), mode_topk=2, epochs=1, batch_size=4, lr=3e-3),
}


def models(cfg: dict) -> dict[str, tuple[str, dict]]:
    """``label -> (registry name, config)``; every core is ``d_model`` wide (CfC with its 128-unit backbone)."""
    d, h, k = cfg["d_model"], cfg["heads"], cfg["mode_topk"]
    nac = lambda topk, mode: ("nac", {"d_model": d, "num_heads": h, "topk": topk, "mode": mode})  # noqa: E731
    out = {f"NAC-exact k={topk or 'all'}": nac(topk, "exact") for topk in cfg["topks"]}
    out[f"NAC-euler k={k}"] = nac(k, "euler")
    out[f"NAC-steady k={k}"] = nac(k, "steady")
    out["LTC"] = ("ltc", {"units": d})
    out["CfC"] = ("cfc", {"units": d, "backbone_units": 128})
    out["MHA"] = ("attention", {"d_model": d, "num_heads": h})
    return out


def mean_predictor(data, splits: Splits) -> float:
    """Test RMSE of the training-mean predictor: every test trajectory's RUL predicted by the mean training RUL."""
    with pde_data.open_source(data).dataset as ds:
        rul = np.asarray(ds["rul"].values, dtype=np.float64)
    return float(np.sqrt(np.mean((rul[list(splits.test)] - rul[list(splits.train)].mean()) ** 2)))


@torch.no_grad()
def resources(run_dir, data, device: str, batch_size: int) -> dict[str, float]:
    """Of the loaded model (last epoch): milliseconds per test batch (the batches read first, one warm-up
    batch) and the peak live tensor memory of one batch (MB)."""
    run = load_run(run_dir, checkpoint="last", device=device)
    test = list(run.spec.data.splits.test)
    dataset = run.task.batches(pde_data.open_source(data), test, cache=True)
    batches = [dataset.read_batch(list(range(a, min(a + batch_size, len(test))))).to(device)
               for a in range(0, len(test), batch_size)]
    predict = lambda batch: run.task.forward(run.model, batch, training=False)  # noqa: E731
    predict(batches[0])  # warm-up: one-time costs stay out of the timing
    start = time.perf_counter()
    for batch in batches:
        predict(batch)
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    return {"infer_ms_per_batch": 1e3 * seconds / len(batches),
            "peak_mb": peak_memory_mb(lambda: predict(batches[0]), device)}


def one_seed(seed: int, cfg: dict, data, splits: Splits, args, out) -> dict[str, dict[str, float]]:
    """Train every model with training seed ``seed`` (initialisation and batch order) on the same data;
    test PHM score, RMSE, time and memory per model."""
    spec = RunSpec(data=DataSpec(inputs=("health", "gap"), targets=("rul",), splits=splits),
                   optim=OptimSpec(epochs=cfg["epochs"], batch_size=cfg["batch_size"], lr=cfg["lr"], optimizer="adam",
                                   weight_decay=0.0, scheduler="cosine", grad_clip=1.0, seed=seed))
    trained = _common.train_models(models(cfg), data, out / "runs" / f"seed{seed}", spec=spec, device=args.device)
    rows = {}
    for label, run in trained.items():
        metrics = _common.evaluate(run, data)["metrics"]
        rows[label] = {"phm_score": metrics["phm_sum"], "phm_per_sample": metrics["phm"], "rmse": metrics["rmse"],
                       **resources(run.run_dir, data, args.device, cfg["batch_size"]),
                       "val_rmse": run.history[-1]["val_rmse"], "train_s": run.seconds, "params": run.n_params,
                       "final_train_loss": run.history[-1]["train_loss"]}
        print(f"  seed {seed}, {label}: test RMSE {rows[label]['rmse']:.3g}, PHM {rows[label]['phm_score']:.4g}",
              flush=True)
    return rows


def main() -> None:
    args, out, cfg, seeds = _common.start(__doc__, SCRIPT, SCALES)
    n_train, n_val, n_test = cfg["sizes"]
    length = cfg["length"]
    ds = pde_data.generate_degradation(sum(cfg["sizes"]), min_length=length, max_length=length, seed=args.seed)
    data = pde_data.save(ds, out / "data.nc")
    splits = _common.in_order({"train": n_train, "val": n_val, "test": n_test})
    baseline = mean_predictor(data, splits)
    print(f"data: RUL trajectories, {length} irregular samples, train/val/test = {cfg['sizes']}; "
          f"training-mean predictor RMSE {baseline:.3g}; training seeds {seeds}", flush=True)

    per_seed = {seed: one_seed(seed, cfg, data, splits, args, out) for seed in seeds}
    summary = _common.seed_summary(per_seed)
    rows = _common.summary_means(summary)
    _common.print_table(rows, f"RUL regression ({n_test} test trajectories, {length} samples each), "
                              f"mean over seeds {seeds}")
    plots.plot_metric_bars(_common.finite({k: {m: r[m] for m in ("phm_per_sample", "rmse", "train_s",
                                                                 "infer_ms_per_batch", "peak_mb")}
                                           for k, r in rows.items()}), path=out / "metrics.png")
    _common.write_results(out, SCRIPT, args, {
        "settings": cfg, "seeds": seeds, "mean_predictor": {"rmse": baseline}, "metrics": summary,
        "per_seed": per_seed, "nac_paper_phm_pronostia": [37.50, 37.75], "comparable_with_paper": False,
    })


if __name__ == "__main__":
    main()
