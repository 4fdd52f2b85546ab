"""The 1D order benchmark: one CKB of n serial Kirchhoff cells (``ckb_chain``) against n stacked
first-order blocks (``depth_stack``), and stacked high-order blocks against deeper first-order stacks
(CHONN, Fig. 3a-c).

Targets T1-T4 are y = (I - τ²∂ss)^(-n) x, n = 1..4 (CHONN Eqs. 39-43, ``pde_data.generate_order_splits``).
Each model is scored on the test split with pointwise, spectral (one-sided) and derivative relative L2
(Eqs. 48-50, ``evaluation``).

Claims under test (docs/specs/anchors.md, CHONN claims 1-2): matched-order CKB beats the depth stack on derivative
relative L2 for T2-T4 (identical for T1, where both are one first-order block) and the gap grows with the
target order; 2×2 (order 2 × 2 blocks) beats depth-3 and 2×3 beats depth-4 at similar parameter counts.

Scales:

- full: the paper's protocol — 256 points, 12,000 / 2,000 / 2,000 samples (seeds 42/43/44), expansion 16,
  d_state 8, and d_model 16 (ours: the paper gives no d_model); AdamW lr 1e-4, cosine schedule, batch 32, 80 epochs; targets T1-T4 × model
  orders 1-4 (Fig. 3a-b) and 2×2, 2×3, 3×2 vs depth 1-5 on T4 (Fig. 3c). Run time, an estimate (not
  measured): 200× the quick run's sample-epochs per model at 2× the length with 16× wider blocks, for 36
  models — on the order of a day on one GPU; not practical on CPU.
- ``--medium``: the paper's data protocol (256 points, 12,000 / 2,000 / 2,000 samples, seeds 42/43/44)
  with reduced models and training, stated in RESULTS.md: d_model 8, d_state 4, expansion 2; AdamW lr
  1e-2, cosine, batch 32, 6 epochs; matched orders and 2×2 vs depth 3 on T4; training seeds 0, 1, 2.
- ``--quick``: matched orders only (chain n vs depth n on Tn), 2×2 vs depth-3 on T4; 128 points, 384 / 64 /
  128 samples, d_model 8, expansion 2, d_state 4, lr 3e-3, 12 epochs. Measured: ≈ 16 minutes (50-128 s
  of training per model, 9 models) with 1 thread on 2 cores shared by ~10 processes.
- ``--smoke``: T1-T2 matched, 2×2 vs depth-3 on T2, 128 points, 8 samples, one epoch.

Each target's train, val and test sets go one after another into ``data_T<n>.nc``; every model trains
from it with ``operators.training.train_run`` into ``runs/T<n>/<model>`` (``runs/scaling/<model>`` for the
scaling comparison) and is scored on the run's stored test split with ``evaluate_run`` (the model of the
last epoch).

Outputs in ``--out`` (default ``runs/order_benchmark``): ``results.json``, ``target_T<n>.png`` (three
metrics per model), ``derivative_ratio.png`` (chain / depth derivative error: below 1 means the chain wins),
``scaling.png`` (errors and parameter counts of the scaling comparison), the data files and run folders.

Example:
    python examples/order_benchmark.py --quick
"""

from __future__ import annotations

import _common
from evaluation import plots
from operators.training import DataSpec, OptimSpec, RunSpec
from pde_data import generate_order_splits

SCRIPT = "order_benchmark"
SCALES = {
    "full": dict(n_points=256, sizes=(12000, 2000, 2000), targets=(1, 2, 3, 4), orders=(1, 2, 3, 4),
                 model=dict(d_model=16, d_state=8, expand=16), lr=1e-4, epochs=80, batch_size=32,
                 scaling_target=4, stacks=((2, 2), (2, 3), (3, 2)), depths=(1, 2, 3, 4, 5)),
    "medium": dict(n_points=256, sizes=(12000, 2000, 2000), targets=(1, 2, 3, 4), orders="matched",
                   model=dict(d_model=8, d_state=4, expand=2), lr=1e-2, epochs=6, batch_size=32,
                   scaling_target=4, stacks=((2, 2),), depths=(3,), seeds=(0, 1, 2)),
    "quick": dict(n_points=128, sizes=(384, 64, 128), targets=(1, 2, 3, 4), orders="matched",
                  model=dict(d_model=8, d_state=4, expand=2), lr=3e-3, epochs=12, batch_size=32,
                  scaling_target=4, stacks=((2, 2),), depths=(3,)),
    "smoke": dict(n_points=128, sizes=(8, 4, 4), targets=(1, 2), orders="matched",
                  model=dict(d_model=4, d_state=2, expand=1), lr=3e-3, epochs=1, batch_size=4,
                  scaling_target=2, stacks=((2, 2),), depths=(3,)),
}
SEEDS = (42, 43, 44)  # train / val / test, as in the paper


METRICS = ("rel_l2", "rel_l2_spectral", "rel_l2_derivative")  # Eqs. 48-50, means over test samples


def order_specs(target: int, orders, model: dict) -> dict[str, tuple[str, dict]]:
    """Chain k and depth k for each model order k (order 1: one model, the two are the same network)."""
    ks = (target,) if orders == "matched" else orders
    specs = {}
    for k in ks:
        specs[f"chain {k}"] = ("ckb_chain", {"order": k, **model})
        if k > 1:
            specs[f"depth {k}"] = ("depth_stack", {"depth": k, **model})
    return specs


def scaling_specs(cfg: dict) -> dict[str, tuple[str, dict]]:
    """Stacked high-order blocks (order × blocks) and first-order depth stacks (D-k)."""
    specs = {f"{o}x{b}": ("ckb_stack", {"order": o, "n_blocks": b, **cfg["model"]}) for o, b in cfg["stacks"]}
    specs.update({f"D{d}": ("depth_stack", {"depth": d, **cfg["model"]}) for d in cfg["depths"]})
    return specs


def compare(specs, data, splits, cfg, seed, device, runs) -> dict[str, dict]:
    """Train ``specs`` with training seed ``seed`` on one target's file ``data``; test metrics, parameters
    and time per model."""
    spec = RunSpec(data=DataSpec(inputs=("input",), targets=("target",), splits=splits),
                   optim=OptimSpec(epochs=cfg["epochs"], batch_size=cfg["batch_size"], lr=cfg["lr"], optimizer="adamw",
                                   weight_decay=1e-4, scheduler="cosine", seed=seed))
    trained = _common.train_models(specs, data, runs, spec=spec, device=device)
    rows = {}
    for label, run in trained.items():
        metrics = _common.evaluate(run, data)["metrics"]
        rows[label] = {**{m: metrics[m] for m in METRICS}, "params": run.n_params, "train_s": run.seconds}
    return rows


def derivative_ratios(per_target: dict[str, dict]) -> dict[str, float]:
    """``{"T<n> k=<k>": chain k / depth k}`` of the derivative relative L2 (< 1: the chain is better)."""
    ratio = {}
    for target, rows in per_target.items():
        for label in rows:
            k = label.split()[1]
            if label.startswith("chain") and f"depth {k}" in rows:
                ratio[f"{target} k={k}"] = rows[label]["rel_l2_derivative"] / rows[f"depth {k}"]["rel_l2_derivative"]
    return ratio


def one_seed(seed: int, cfg: dict, files: dict, args, runs) -> dict:
    """Every comparison with training seed ``seed``: per-target rows (Fig. 3a-b), the chain / depth
    derivative ratios and the scaling rows (Fig. 3c)."""
    per_target = {}
    for n in cfg["targets"]:
        data, splits = files[n]
        rows = compare(order_specs(n, cfg["orders"], cfg["model"]), data, splits, cfg, seed, args.device,
                       runs / f"T{n}")
        per_target[f"T{n}"] = rows
        _common.print_table(rows, f"seed {seed}, target T{n} (test, {cfg['n_points']} points)")
    data, splits = files[cfg["scaling_target"]]
    scaling = compare(scaling_specs(cfg), data, splits, cfg, seed, args.device, runs / "scaling")
    _common.print_table(scaling, f"seed {seed}, scaling on T{cfg['scaling_target']}")
    return {"targets": per_target, "derivative_ratio": derivative_ratios(per_target), "scaling": scaling}


def main() -> None:
    args, out, cfg, seeds = _common.start(__doc__, SCRIPT, SCALES)
    data_seeds = {name: (size, seed) for name, size, seed in zip(("train", "val", "test"), cfg["sizes"], SEEDS)}
    sets = generate_order_splits(orders=cfg["targets"], n_points=cfg["n_points"], splits=data_seeds)
    files = {n: _common.save_in_order({split: sets[(split, n)] for split in data_seeds}, out / f"data_T{n}.nc")
             for n in cfg["targets"]}
    baseline = {f"T{n}": _common.mean_field_predictor(*files[n], "target", derivative=True) for n in cfg["targets"]}
    print(f"data: order benchmark, {cfg['n_points']} points, train/val/test = {cfg['sizes']}; "
          f"training seeds {seeds}", flush=True)
    _common.print_table(baseline, "mean-field predictor (the bar every model must clear)")

    per_seed = {seed: one_seed(seed, cfg, files, args, out / "runs" / f"seed{seed}") for seed in seeds}
    targets = {t: _common.seed_summary({s: r["targets"][t] for s, r in per_seed.items()}) for t in baseline}
    ratio = _common.seed_summary({s: {"chain / depth": r["derivative_ratio"]} for s, r in per_seed.items()})
    scaling = _common.seed_summary({s: r["scaling"] for s, r in per_seed.items()})
    for t, summary in targets.items():
        means = _common.summary_means(summary)
        _common.print_table(means, f"target {t}, mean over seeds {seeds}")
        plots.plot_metric_bars({k: {m: r[m] for m in METRICS} for k, r in means.items()}, log=True,
                               path=out / f"target_{t}.png")
    ratio_means = _common.summary_means(ratio)
    _common.print_table(ratio_means, "derivative rel. L2, chain / depth (< 1: chain better), mean over seeds")
    plots.plot_metric_bars(ratio_means, path=out / "derivative_ratio.png")
    scaling_means = _common.summary_means(scaling)
    _common.print_table(scaling_means, f"scaling on T{cfg['scaling_target']}, mean over seeds")
    plots.plot_metric_bars({k: {m: r[m] for m in METRICS} for k, r in scaling_means.items()}, log=True,
                           path=out / "scaling.png")

    _common.write_results(out, SCRIPT, args, {
        "settings": cfg, "seeds": seeds, "mean_field_predictor": baseline, "targets": targets,
        "derivative_ratio_chain_over_depth": ratio["chain / depth"], "scaling_target": f"T{cfg['scaling_target']}",
        "scaling": scaling, "per_seed": per_seed,
        "claim": "chain beats depth on derivative rel. L2 for T2-T4, gap growing with order; 2x2 < D3, 2x3 < D4",
        "chain_wins_derivative": {k: v["mean"] < 1 for k, v in ratio["chain / depth"].items()},
    })


if __name__ == "__main__":
    main()
