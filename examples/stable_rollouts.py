"""Training for stable rollouts on Navier-Stokes (vorticity form, ν = 1e-3): ``fno`` and ``chonn_fno`` trained
plainly and with each of an exponential moving average of the weights (``optim.ema``, as pdearena keeps), input
noise (``optim.noise``: Brandstetter et al. 2022, PDE-Refiner) and the pushforward trick (``task.pushforward``: the
last step of a rolled-out horizon back-propagated, Brandstetter et al. 2022), then rolled out ``steps`` steps
from ``window`` given frames: the rel. L2 error at the last step and over the whole rollout, and the median
correlation time (the first step whose correlation with the truth drops below 0.8; :mod:`evaluation.long_rollout`).

Each variant differs from the plain run of its model only in that one setting (the same data, splits, epochs,
optimiser and seeds); every run trains with a horizon of ``horizon`` steps (the pushforward needs one), the loss the
relative L2 of the horizon's frames.

Scales (data from ``pde_data.generate_navier_stokes``):

- ``--medium``: 64² simulation kept at 16², 40 records (one per time unit), 64 train / 16 test trajectories
  (1856 training windows), window 1, horizon 2, 30 steps rolled out; width 16, 6 modes; Adam lr 3e-3, 10 epochs,
  batch 16; EMA 0.99, noise 0.01; training seeds 0, 1, 2 (about an hour on one thread).
- ``--quick``: 32² simulation kept at 16², 32 records, 24 train / 8 test, 30 steps; 6 epochs.
- ``--smoke``: 16², 6 records, 2 / 2 samples, 4 steps, one epoch.
- full: the FNO protocol's data (256² kept at 64², 1000 train / 200 test, 50 records), 30 steps, 500 epochs:
  a GPU run, not made here.

Outputs in ``--out`` (default ``runs/stable_rollouts``): ``results.json`` (per seed and the mean and spread over
seeds), ``rollout.png`` (mean per-step error of every variant), the data file and the run folders.

Example:
    python examples/stable_rollouts.py --medium
"""

from __future__ import annotations

import _common
import pde_data
from evaluation import plots
from operators.training import DataSpec, OptimSpec, RunSpec, TaskSpec
from pde_data.core.model import TIME

SCRIPT = "stable_rollouts"
SCALES = {
    "full": dict(sizes=(1000, 200), n_sim=256, n_out=64, records=50, dt=1e-4, window=1, horizon=2, steps=30,
                 fno=dict(n_modes=12, width=20), ckb=dict(order=2, d_state=16, expand=2), epochs=500, batch_size=20,
                 lr=1e-3, ema=0.999, noise=0.01),
    "medium": dict(sizes=(64, 16), n_sim=64, n_out=16, records=40, dt=5e-3, window=1, horizon=2, steps=30,
                   fno=dict(n_modes=6, width=16), ckb=dict(order=2, d_state=4, expand=1), epochs=10, batch_size=16,
                   lr=3e-3, ema=0.99, noise=0.01, seeds=(0, 1, 2)),
    "quick": dict(sizes=(24, 8), n_sim=32, n_out=16, records=32, dt=1e-2, window=1, horizon=2, steps=30,
                  fno=dict(n_modes=6, width=12), ckb=dict(order=2, d_state=4, expand=1), epochs=6, batch_size=4,
                  lr=1e-3, ema=0.9, noise=0.01),
    "smoke": dict(sizes=(2, 2), n_sim=16, n_out=16, records=6, dt=1e-2, window=1, horizon=2, steps=4,
                  fno=dict(n_modes=4, width=6), ckb=dict(order=2, d_state=2, expand=1), epochs=1, batch_size=2,
                  lr=1e-3, ema=0.9, noise=0.01),
}
VISC = 1e-3
#: the correlation whose crossing step is reported
THRESHOLD = "0.8"


def write_data(cfg: dict, seed: int, out):
    """The trajectories' first ``window + steps`` frames, one file (a window run of horizon ``horizon`` trains on
    every window of the training trajectories; the test trajectories are rolled out from their first frames)."""
    n_train, n_test = cfg["sizes"]
    ds = pde_data.generate_navier_stokes(n_train + n_test, visc=VISC, n_sim=cfg["n_sim"], n_out=cfg["n_out"],
                                         t_final=float(cfg["records"]), dt=cfg["dt"], seed=seed)
    print(f"data: NS ν={VISC}, {cfg['n_out']}² (simulated at {cfg['n_sim']}²), {cfg['records']} records, "
          f"train/test = {n_train}/{n_test}", flush=True)
    return pde_data.save(ds.isel({TIME: slice(0, cfg["window"] + cfg["steps"])}), out / "data.nc")


def variants(cfg: dict) -> dict[str, dict]:
    """Each variant's overrides of the shared spec: the plain run and one setting changed each."""
    return {"plain": {}, "ema": {"optim.ema": cfg["ema"]}, "noise": {"optim.noise": cfg["noise"]},
            "pushforward": {"task.pushforward": True}}


def one_seed(seed: int, cfg: dict, data, splits, args, out) -> dict:
    """Every model and variant trained with seed ``seed`` and rolled out: ``{"rows": {label: {...}}, "curves":
    {label: per-step rel. L2}}``."""
    models = {"fno": ("fno", cfg["fno"]), "chonn_fno": ("chonn_fno", {**cfg["fno"], **cfg["ckb"],
                                                                        "placement": "replace"})}
    optim = OptimSpec(epochs=cfg["epochs"], batch_size=cfg["batch_size"], lr=cfg["lr"], optimizer="adam",
                      weight_decay=1e-4, step_size=100, gamma=0.5, seed=seed)
    task = TaskSpec(window=cfg["window"], horizon=cfg["horizon"], periodic=True)  # the torus: no padding
    shared = RunSpec(data=DataSpec(splits=splits), task=task, optim=optim)
    rows, curves = {}, {}
    for variant, overrides in variants(cfg).items():
        trained = _common.train_models(models, data, out / "runs" / f"seed{seed}" / variant,
                                       spec=shared.override(overrides), device=args.device)
        for model, run in trained.items():
            rollout = _common.evaluate(run, data, steps=cfg["steps"], bootstrap=0)["rollout"]
            label = f"{model} {variant}"
            per_step = rollout["per_step_rel_l2"]
            crossing = rollout["correlation_time"][THRESHOLD]["median"]
            rows[label] = {"last_step_rel_l2": per_step[-1], "mean_rel_l2": rollout["mean_rel_l2"],
                           "correlation_steps": float(cfg["steps"] + 1) if crossing is None else crossing,
                           "train_s": run.seconds}
            curves[label] = per_step
    _common.print_table(rows, f"seed {seed}: {cfg['steps']}-step rollouts")
    return {"rows": rows, "curves": curves}


def main() -> None:
    args, out, cfg, seeds = _common.start(__doc__, SCRIPT, SCALES)
    if cfg["window"] + cfg["steps"] > cfg["records"]:
        raise SystemExit(f"settings: need window + steps <= records, found {cfg}")
    data = write_data(cfg, args.seed, out)
    n_train, n_test = cfg["sizes"]
    splits = _common.in_order({"train": n_train, "test": n_test})
    baseline = _common.mean_field_predictor(data, splits, "vorticity", frames=cfg["steps"])
    print(f"mean-field predictor rollout rel. L2 {baseline['rel_l2']:.4g}; training seeds {seeds}", flush=True)
    per_seed = {seed: one_seed(seed, cfg, data, splits, args, out) for seed in seeds}
    summary = _common.seed_summary({s: r["rows"] for s, r in per_seed.items()})
    curves = _common.mean_curves({s: r["curves"] for s, r in per_seed.items()})
    _common.print_table(_common.summary_means(summary), f"mean over seeds {seeds} ({n_test} test trajectories)")
    plots.plot_rollout(curves, path=out / "rollout.png",
                       title=f"NS {cfg['n_out']}², {cfg['steps']}-step rollouts: each variant's mean over seeds")
    _common.write_results(out, SCRIPT, args, {
        "settings": cfg, "seeds": seeds, "viscosity": VISC, "mean_field_predictor": baseline,
        "variants": {k: {o: v for o, v in d.items()} for k, d in variants(cfg).items()},
        "rollout": summary, "per_step_mean": curves, "per_seed": per_seed, "correlation_threshold": float(THRESHOLD),
    })


if __name__ == "__main__":
    main()
