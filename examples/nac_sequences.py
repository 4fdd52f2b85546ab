"""NAC on an irregularly sampled sequence task: remaining-useful-life (RUL) regression on synthetic
degradation trajectories, NAC modes (exact / euler / steady) and Top-K settings against LTC, CfC and
multi-head attention (``torch.nn.MultiheadAttention``), scored with the PHM score (NAC, Eq. 58).

Task (made here, seeded): each trajectory is a noisy monotone health indicator
h(t) = 1 − (t / T_f)^p + ε, ε ~ N(0, 0.02²), with failure time T_f ~ U(50, 150), shape p ~ U(1.5, 3),
observed at ``length`` irregular times (exponential gaps) up to a cut-off t_last ~ U(0.3, 0.95)·T_f.
Target: RUL = T_f − t_last. Inputs per step: h and the gap since the previous sample; the
continuous-time cores also get the timestamps (NAC: t; LTC/CfC: step sizes). Every model is
``circuitop.SequenceModel`` (linear encoder → core → last state → linear head), trained on the mean
squared error of RUL/100 with one shared loop (``_common.fit_regression``).

Reported per model: PHM score on RUL (sum over the test set and per sample; lower is better; late
predictions cost more — as in the IEEE PHM 2012 challenge, not the NAC paper's 0-1 target), RMSE of RUL,
training time, inference time per batch and the peak of live tensor memory during one inference batch
(CPU: replayed from ``torch.profiler``'s per-op allocations and frees in time order; GPU:
``torch.cuda.max_memory_allocated``), weights excluded.

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
  epochs. Measured: ≈ 2-5 minutes (1.5-26 s of training per model; 5 minutes when the 2 cores were
  shared by ~10 processes).
- ``--smoke``: 8 / 4 / 4 trajectories of 8 samples, one epoch.

Outputs in ``--out`` (default ``runs/nac_sequences``): ``results.json``, ``metrics.png``.

Example:
    python examples/nac_sequences.py --quick
"""

from __future__ import annotations

import time

import numpy as np
import torch
import xarray as xr

import _common
import pde_data
from circuitop import CfC, LTC, NeuronalAttentionCircuit, SequenceModel
from evaluation import phm_score, plots
from evaluation.resources import peak_memory_mb

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
SCALE = 100.0  # time unit of the model's inputs and targets (RUL / 100)


def degradation_set(n: int, length: int, seed: int) -> xr.Dataset:
    """Irregularly sampled health indicators (sample, time) with timestamps and the RUL at the last one."""
    rng = np.random.default_rng(seed)
    t_fail, power = rng.uniform(50, 150, n), rng.uniform(1.5, 3.0, n)
    t_last = t_fail * rng.uniform(0.3, 0.95, n)
    gaps = rng.exponential(1.0, (n, length))
    times = t_last[:, None] * np.cumsum(gaps, 1) / gaps.sum(1, keepdims=True)
    health = 1 - (times / t_fail[:, None]) ** power[:, None] + rng.normal(0, 0.02, (n, length))
    dims = ("sample", "time")
    return xr.Dataset(
        {"health": (dims, health, {"long_name": "noisy monotone health indicator"}),
         "gap": (dims, np.diff(times, axis=1, prepend=0.0) / SCALE, {"long_name": "time since previous sample / 100"}),
         "rul": ("sample", t_fail - t_last, {"long_name": "remaining useful life at the last sample"})},
        coords={"t": (dims, times, {"long_name": "irregular sample times"})},
        attrs={"seed": seed, "t_fail": "U(50, 150)", "power": "U(1.5, 3)", "noise": 0.02},
    )


def tensors(ds: xr.Dataset):
    """``(x (n, time, 2), timestamps / 100 (n, time), RUL / 100 (n, 1))``."""
    x = pde_data.to_tensor(ds[["health", "gap"]])
    t = torch.as_tensor(ds["t"].values / SCALE, dtype=torch.float32)
    return x, t, torch.as_tensor(ds["rul"].values / SCALE, dtype=torch.float32)[:, None]


def cores(cfg: dict) -> dict:
    """Model name → a builder of its sequence core (all cores are ``d_model`` wide)."""
    d, h = cfg["d_model"], cfg["heads"]
    out = {f"NAC-exact k={k or 'all'}": (lambda k=k: NeuronalAttentionCircuit(d, h, topk=k, mode="exact"))
           for k in cfg["topks"]}
    k = cfg["mode_topk"]
    out[f"NAC-euler k={k}"] = lambda: NeuronalAttentionCircuit(d, h, topk=k, mode="euler")
    out[f"NAC-steady k={k}"] = lambda: NeuronalAttentionCircuit(d, h, topk=k, mode="steady")
    out["LTC"] = lambda: LTC(d, d)
    out["CfC"] = lambda: CfC(d, d)
    out["MHA"] = lambda: _common.SelfAttention(d, h)
    return out


def evaluate(model, test, device: str, batch_size: int) -> dict[str, float]:
    """PHM score, RMSE (in time units), inference time per batch and peak memory of one batch."""
    x, t, y = (v.to(device) for v in test)
    start = time.perf_counter()
    pred = _common.predict_regression(model, x, t, batch_size=batch_size)
    seconds = time.perf_counter() - start
    rul, true = SCALE * pred[:, 0].cpu(), SCALE * y[:, 0].cpu()
    memory = peak_memory_mb(lambda: _common.predict_regression(model, x[:batch_size], t[:batch_size]), device)
    return {"phm_score": float(phm_score(rul, true)), "phm_per_sample": float(phm_score(rul, true)) / len(true),
            "rmse": float((rul - true).square().mean().sqrt()),
            "infer_ms_per_batch": 1e3 * seconds / -(-len(true) // batch_size), "peak_mb": memory}


def one_seed(seed: int, cfg: dict, data: dict, args) -> dict[str, dict[str, float]]:
    """Train every core with training seed ``seed`` (initialisation and batch order) on the same data;
    test PHM score, RMSE, time and memory per model."""
    rows = {}
    for name, build in cores(cfg).items():
        torch.manual_seed(seed)
        model = SequenceModel(build(), 2, 1).to(args.device)
        x, t, y = (v.to(args.device) for v in data["train"])
        _common.predict_regression(model, x[:2], t[:2])  # warm-up: one-time costs stay out of the timings
        start = time.perf_counter()
        history = _common.fit_regression(model, x, t, y, epochs=cfg["epochs"], batch_size=cfg["batch_size"],
                                         lr=cfg["lr"], seed=seed)
        seconds = time.perf_counter() - start
        val = evaluate(model, data["val"], args.device, cfg["batch_size"])
        rows[name] = {**evaluate(model, data["test"], args.device, cfg["batch_size"]), "val_rmse": val["rmse"],
                      "train_s": seconds, "params": _common.n_params(model), "final_train_loss": history[-1]}
        print(f"  seed {seed}, {name}: test RMSE {rows[name]['rmse']:.3g}, PHM {rows[name]['phm_score']:.4g}, "
              f"{seconds:.1f} s", flush=True)
    return rows


def main() -> None:
    args, out, cfg, seeds = _common.start(__doc__, SCRIPT, SCALES)
    n_train, n_val, n_test = cfg["sizes"]
    sets = {name: degradation_set(n, cfg["length"], args.seed * 10 + k)
            for k, (name, n) in enumerate(zip(("train", "val", "test"), cfg["sizes"]))}
    data = {k: tensors(v) for k, v in sets.items()}
    # the training-mean predictor: every test trajectory's RUL predicted by the mean training RUL
    baseline = float(SCALE * (data["test"][2] - data["train"][2].mean()).square().mean().sqrt())
    print(f"data: RUL trajectories, {cfg['length']} irregular samples, train/val/test = {cfg['sizes']}; "
          f"training-mean predictor RMSE {baseline:.3g}; training seeds {seeds}", flush=True)

    per_seed = {seed: one_seed(seed, cfg, data, args) for seed in seeds}
    summary = _common.seed_summary(per_seed)
    rows = _common.summary_means(summary)
    _common.print_table(rows, f"RUL regression ({n_test} test trajectories, {cfg['length']} samples each), "
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
