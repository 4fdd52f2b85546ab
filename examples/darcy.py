"""Darcy flow: FNO vs U-Net vs CHONN (a U-Net hosting 2nd-order CKBs) on PDEBench's beta = 1 problem,
with PDEBench's multi-metric comparison and the relative-gain chart (CHONN, Fig. 4c-d).

Claim under test (docs/specs/anchors.md, CHONN claim 4): CHONN beats FNO and U-Net on RMSE, nRMSE, CSV, Max,
boundary RMSE and the low/mid/high frequency-band errors.

Scales (data from ``pde_data.generate_darcy``, our finite-volume solver of PDEBench's problem):

- full: 10,000 samples at 128² (PDEBench's set size), split 9,000 / 500 / 500; the paper's model sizes
  (U-Net 3 levels × 4 residual blocks, 32 channels; FNO 12 modes, width 20; CKB order 2, d_state 16);
  one protocol for all models, PDEBench's: AdamW lr 1e-3, StepLR(100, 0.5), 500 epochs, batch 50 (the
  CHONN paper's own CHONN schedule, 1000 epochs at batch 4, is not used, so all models train alike).
  Run time, an estimate extrapolated from the quick run (not measured): 2,250× its sample-epochs at 16×
  the pixels with ≈ 10× larger models, i.e. roughly 1-3 days per model on one GPU and months on CPU.
- ``--medium``: 1,300 samples at 32² (1,000 / 100 / 200), the quick models (FNO width 16), 60 epochs,
  StepLR(20, 0.5); training seeds 0, 1, 2.
- ``--quick``: 260 samples at 32² (200 / 20 / 40), small models, 10 epochs. Measured: ≈ 4.5 minutes
  (FNO 91 s, U-Net 36 s, CHONN 100 s of training) with 1 thread on 2 cores shared by ~10 processes.
- ``--smoke``: 8 samples at 16², one epoch: seconds.

Every model trains from ``data.nc`` with ``operators.training.train_run`` into ``runs/<model>`` and is scored
on the run's stored test split with ``evaluate_run`` (the model of the last epoch).

Outputs in ``--out`` (default ``runs/darcy``): ``results.json``, ``metrics.png`` (all metrics per model),
``gain.png`` (CHONN's error divided by each baseline's: below 1 means CHONN is better), ``fields_<model>.png``,
``data.nc`` and the run folders ``runs/<model>`` (checkpoints, ``metrics.json``, ``pred.nc``).

Example:
    python examples/darcy.py --quick
"""

from __future__ import annotations

import math

import _common
from evaluation import PDEBENCH_KEYS, plots
from operators.training import DataSpec, OptimSpec, RunSpec
from pde_data import generate_darcy, save

SCRIPT = "darcy"
SCALES = {
    "full": dict(n_grid=128, sizes=(9000, 500, 500), epochs=500, batch_size=50, step_size=100,
                 fno=dict(n_modes=12, width=20), unet=dict(n_layers=3, n_res=4, n_res_neck=4, channel_multiplier=32),
                 ckb=dict(order=2, d_state=16, expand=2)),
    "medium": dict(n_grid=32, sizes=(1000, 100, 200), epochs=60, batch_size=20, step_size=20, seeds=(0, 1, 2),
                   fno=dict(n_modes=8, width=16), unet=dict(n_layers=2, n_res=1, n_res_neck=1, channel_multiplier=8),
                   ckb=dict(order=2, d_state=4, expand=1)),
    "quick": dict(n_grid=32, sizes=(200, 20, 40), epochs=10, batch_size=10, step_size=10,
                  fno=dict(n_modes=8, width=12), unet=dict(n_layers=2, n_res=1, n_res_neck=1, channel_multiplier=8),
                  ckb=dict(order=2, d_state=4, expand=1)),
    "smoke": dict(n_grid=16, sizes=(4, 2, 2), epochs=1, batch_size=2, step_size=10,
                  fno=dict(n_modes=4, width=8), unet=dict(n_layers=1, n_res=1, n_res_neck=1, channel_multiplier=4),
                  ckb=dict(order=2, d_state=2, expand=1)),
}


def one_seed(seed: int, specs: dict, cfg: dict, data, splits, args, out) -> dict[str, dict[str, float]]:
    """Train every model with training seed ``seed``; its test metrics (physical units), parameters,
    training time and final training loss."""
    runs = out / "runs" / f"seed{seed}"
    spec = RunSpec(data=DataSpec(inputs=("a",), targets=("u",), splits=splits),
                   optim=OptimSpec(epochs=cfg["epochs"], batch_size=cfg["batch_size"], lr=1e-3, weight_decay=1e-4,
                                   optimizer="adamw", step_size=cfg["step_size"], gamma=0.5, seed=seed))
    trained = _common.train_models(specs, data, runs, spec=spec, device=args.device)
    rows = {}
    for label, run in trained.items():
        result = _common.evaluate(run, data)
        metrics = result["metrics"]
        rows[label] = {**{k: metrics.get(k, math.nan) for k in (*PDEBENCH_KEYS, "rel_l2")},  # an empty band: NaN
                       "rel_l1_median": metrics["rel_l1_median"], "params": run.n_params, "train_s": run.seconds,
                       "final_train_loss": run.history[-1]["train_loss"]}
        pred, true = _common.fields(result, data, "u")
        plots.plot_fields(pred, true, title=f"Darcy, {label}, seed {seed}",
                          path=out / f"fields_{label.replace(' ', '_')}.png")
    _common.print_table(rows, f"seed {seed}: Darcy test metrics ({len(splits.test)} samples, {cfg['n_grid']}²)")
    return rows


def main() -> None:
    args, out, cfg, seeds = _common.start(__doc__, SCRIPT, SCALES)

    # Data: one seeded set in one file, split in order (samples are independent draws).
    n_train, n_val, n_test = cfg["sizes"]
    data = save(generate_darcy(n_train + n_val + n_test, n_grid=cfg["n_grid"], seed=args.seed), out / "data.nc")
    splits = _common.in_order({"train": n_train, "val": n_val, "test": n_test})
    baseline = _common.mean_field_predictor(data, splits, "u")
    print(f"data: Darcy beta=1, {cfg['n_grid']}² grid, train/val/test = {n_train}/{n_val}/{n_test}; "
          f"mean-field predictor rel. L2 {baseline['rel_l2']:.4g}; training seeds {seeds}", flush=True)

    # Models: the two baselines and CHONN (the U-Net host with CKBs), trained alike.
    specs = {"FNO": ("fno", cfg["fno"]), "U-Net": ("unet", cfg["unet"]),
             "CHONN": ("chonn_unet", {**cfg["unet"], **cfg["ckb"]})}
    per_seed = {seed: one_seed(seed, specs, cfg, data, splits, args, out) for seed in seeds}
    summary = _common.seed_summary(per_seed)
    means = _common.summary_means(summary)
    rows = {label: {k: row[k] for k in (*PDEBENCH_KEYS, "rel_l2")} for label, row in means.items()}
    _common.print_table(rows, f"Darcy test metrics, mean over seeds {seeds}")
    gains = _common.ratios(rows, "CHONN", ["FNO", "U-Net"])
    _common.print_table(gains, "error ratios of the means (< 1: CHONN better)", fmt="{:.3f}")
    plots.plot_metric_bars(_common.finite(rows), log=True, path=out / "metrics.png")
    plots.plot_metric_bars(_common.finite(gains), path=out / "gain.png")
    _common.write_results(out, SCRIPT, args, {
        "settings": cfg, "seeds": seeds, "mean_field_predictor": baseline, "metrics": summary, "error_ratios": gains,
        "per_seed": per_seed,
        "claim": "CHONN lower than FNO and U-Net on every metric (CHONN, Fig. 4c-d)",
        "claim_holds": all(v < 1 for g in _common.finite(gains).values() for v in g.values()),
    })


if __name__ == "__main__":
    main()
