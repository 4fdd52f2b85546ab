"""Poisson cascade-order ablation: one U-Net hosting CKBs of order 0 (the plain U-Net) to 4, scored in
and out of distribution, next to the CNO paper's table (CHONN, Fig. 4g; CNO, Raonic et al. 2023).

Claims under test (docs/specs/anchors.md): CHONN claim 3 — orders 1→4 lower the relative L1 error and nRMSE
against the order-0 backbone, order 4 best; and the CNO paper's median relative L1 (%) at 64²:
U-Net 0.71 (in distribution, K = 16) and 1.27 (out of distribution, K = 20), CNO 0.21 / 0.27.

Metrics on the test sets: median relative L1 in % (the CNO convention), nRMSE (range-normalised,
CHONN Eq. 60) and max MSE (Eq. 61), each averaged over test samples except the median.

Scales (data from ``pde_data.generate_poisson``, exact solutions of CHONN Eqs. 56-58):

- full: the CNO sizes, 1024 / 128 / 256 in distribution (K = 16) + 256 out of distribution (K = 20) at
  64²; the CHONN paper's Poisson host (CHONN, Methods, "Poisson": N_layers = 4, width 16, d_state 16):
  U-Net 4 levels, 16 channels at the finest, CKB d_state 16; 4 residual blocks per stage and in the
  bottleneck, as in the paper's Darcy U-Net (the Poisson text does not give them); the schedule:
  Adam lr 1e-3, weight decay 1e-6, StepLR(10, 0.98), 1000 epochs, batch 16; loss relative L1 (the
  reported metric) at every scale. Run time, an estimate
  extrapolated from the quick run (not measured): 440× its sample-epochs at 4× the pixels with a larger
  U-Net (4 levels of 16-128 channels against 2 of 8-16) — about 1-2 days for the five orders on one GPU; not practical on CPU.
- ``--medium``: the CNO set sizes (1,024 / 128 / 256 + 256 OOD) at 32², the quick U-Net, 30 epochs,
  StepLR(10, 0.5); training seeds 0, 1, 2.
- ``--quick``: 192 / 32 / 64 (+ 64 OOD) at 32², small U-Net, 12 epochs. Measured: ≈ 14 minutes (orders
  0-4: 38, 76, 169, 265, 273 s of training) with 1 thread on 2 cores shared by ~10 processes.
- ``--smoke``: 4 / 2 / 2 (+ 2) at 24² (the coarsest grid that resolves the OOD set's K = 20), orders 0 and 1,
  one epoch.

Every order trains from ``data.nc`` (train, val and in-distribution test sets, one after another) with
``operators.training.train_run`` into ``runs/order<k>`` and is scored with ``evaluate_run`` (the model of the
last epoch) on the run's stored test split and on every sample of ``data_ood.nc``.

Outputs in ``--out`` (default ``runs/poisson_order_ablation``): ``results.json``, ``orders.png``
(metrics per order), ``fields_order<k>.png`` (first OOD sample), ``data.nc``, ``data_ood.nc`` and the run
folders ``runs/order<k>``.

Example:
    python examples/poisson_order_ablation.py --quick
"""

from __future__ import annotations

import _common
from evaluation import plots
from operators.training import DataSpec, OptimSpec, RunSpec, TaskSpec
from pde_data import generate_poisson, save

SCRIPT = "poisson_order_ablation"
SCALES = {
    "full": dict(n_grid=64, sizes=(1024, 128, 256, 256), orders=(0, 1, 2, 3, 4), epochs=1000, batch_size=16,
                 weight_decay=1e-6, step_size=10, gamma=0.98,
                 unet=dict(n_layers=4, n_res=4, n_res_neck=4, channel_multiplier=16), d_state=16, expand=2),
    "medium": dict(n_grid=32, sizes=(1024, 128, 256, 256), orders=(0, 1, 2, 3, 4), epochs=30, batch_size=16,
                   weight_decay=1e-6, step_size=10, gamma=0.5, seeds=(0, 1, 2),
                   unet=dict(n_layers=2, n_res=1, n_res_neck=1, channel_multiplier=8), d_state=4, expand=1),
    "quick": dict(n_grid=32, sizes=(192, 32, 64, 64), orders=(0, 1, 2, 3, 4), epochs=12, batch_size=16,
                  weight_decay=1e-6, step_size=10, gamma=0.5,
                  unet=dict(n_layers=2, n_res=1, n_res_neck=1, channel_multiplier=8), d_state=4, expand=1),
    "smoke": dict(n_grid=24, sizes=(4, 2, 2, 2), orders=(0, 1), epochs=1, batch_size=2,
                  weight_decay=1e-6, step_size=10, gamma=0.98,
                  unet=dict(n_layers=1, n_res=1, n_res_neck=1, channel_multiplier=4), d_state=2, expand=1),
}
CNO_TABLE = {"U-Net": {"id": 0.71, "ood": 1.27}, "CNO": {"id": 0.21, "ood": 0.27},
             "FNO": {"id": 4.98, "ood": 7.05}}  # median relative L1 in %, 64², docs/specs/anchors.md


def scores(metrics: dict) -> dict[str, float]:
    """The ablation's three metrics (relative L1 as a median in %, the others as means) of ``evaluate_run``."""
    return {"rel_l1_median_pct": 100 * metrics["rel_l1_median"], "nrmse": metrics["nrmse_range"],
            "max_mse": metrics["max_mse"]}


def write_sets(cfg: dict, seed: int, out):
    """``data.nc`` (train/val/test, K = 16, in order) and ``data_ood.nc`` (K = 20), seeded ``seed`` to
    ``seed + 3`` in that order; returns both paths and the splits of ``data.nc``."""
    n_grid, (n_train, n_val, n_test, n_ood) = cfg["n_grid"], cfg["sizes"]
    sets = {"train": generate_poisson(n_train, K=16, n_grid=n_grid, seed=seed),
            "val": generate_poisson(n_val, K=16, n_grid=n_grid, seed=seed + 1),
            "test": generate_poisson(n_test, K=16, n_grid=n_grid, seed=seed + 2)}
    data, splits = _common.save_in_order(sets, out / "data.nc")
    ood = save(generate_poisson(n_ood, K=20, n_grid=n_grid, seed=seed + 3), out / "data_ood.nc")
    print(f"data: Poisson {n_grid}², train/val/test/ood = {n_train}/{n_val}/{n_test}/{n_ood}", flush=True)
    return data, ood, splits


def one_seed(seed: int, specs: dict, cfg: dict, data, ood, splits, args, out) -> dict[str, dict[str, float]]:
    """Train every order with training seed ``seed``; its metrics in and out of distribution (physical
    units), parameters and training time."""
    runs = out / "runs" / f"seed{seed}"
    spec = RunSpec(data=DataSpec(inputs=("f",), targets=("u",), splits=splits), task=TaskSpec(loss="rel_l1"),
                   optim=OptimSpec(epochs=cfg["epochs"], batch_size=cfg["batch_size"], lr=1e-3, optimizer="adam",
                                   weight_decay=cfg["weight_decay"], step_size=cfg["step_size"], gamma=cfg["gamma"],
                                   seed=seed))
    trained = _common.train_models(specs, data, runs, spec=spec, device=args.device)
    rows = {}
    for label, run in trained.items():
        result_ood = _common.evaluate(run, ood, samples="all")
        row_ood = scores(result_ood["metrics"])
        pred, true = _common.fields(result_ood, ood, "u")
        row_id = scores(_common.evaluate(run, data)["metrics"])
        rows[label] = {**{f"{k}_id": v for k, v in row_id.items()}, **{f"{k}_ood": v for k, v in row_ood.items()},
                       "params": run.n_params, "train_s": run.seconds}
        plots.plot_fields(pred, true, title=f"Poisson OOD, U-Net + CKB {label}, seed {seed}",
                          path=out / f"fields_{label.replace(' ', '')}.png")
    _common.print_table(rows, f"seed {seed}: Poisson test metrics ({cfg['n_grid']}²)")
    return rows


def main() -> None:
    args, out, cfg, seeds = _common.start(__doc__, SCRIPT, SCALES)

    data, ood, splits = write_sets(cfg, args.seed, out)
    baseline = {"in distribution": _common.mean_field_predictor(data, splits, "u")}
    print(f"mean-field predictor rel. L2 (in distribution) {baseline['in distribution']['rel_l2']:.4g}; "
          f"training seeds {seeds}", flush=True)

    # Models: the same U-Net with CKBs of each order (order 0 hosts none: the plain U-Net).
    specs = {f"order {k}": ("chonn_unet", {**cfg["unet"], "order": k, "d_state": cfg["d_state"],
                                           "expand": cfg["expand"]}) for k in cfg["orders"]}
    per_seed = {seed: one_seed(seed, specs, cfg, data, ood, splits, args, out)
                for seed in seeds}
    summary = _common.seed_summary(per_seed)
    rows = _common.summary_means(summary)
    _common.print_table(rows, f"Poisson test metrics, mean over seeds {seeds}")
    print("CNO paper, 64², full data (median rel. L1 %): " +
          ", ".join(f"{m} {v['id']} / {v['ood']}" for m, v in CNO_TABLE.items()), flush=True)

    plots.plot_metric_bars({k: {m: r[m] for m in r if m not in ("params", "train_s")} for k, r in rows.items()},
                           log=True, path=out / "orders.png")
    base, best = rows[f"order {cfg['orders'][0]}"], min(rows, key=lambda k: rows[k]["rel_l1_median_pct_id"])
    _common.write_results(out, SCRIPT, args, {
        "settings": cfg, "seeds": seeds, "mean_field_predictor": baseline, "metrics": summary, "per_seed": per_seed,
        "cno_paper_median_rel_l1_pct": CNO_TABLE, "best_order_id_rel_l1": best,
        "claim": "orders 1-4 lower rel. L1 and nRMSE than order 0; order 4 best (CHONN, Fig. 4g)",
        "orders_beating_order0_id": [k for k, r in rows.items() if r["rel_l1_median_pct_id"] < base["rel_l1_median_pct_id"]
                                     and r["nrmse_id"] < base["nrmse_id"]],
    })


if __name__ == "__main__":
    main()
