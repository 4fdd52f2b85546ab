"""Shallow water (radial dam break): FNO vs U-Net vs CHONN (the FNO host with 2nd-order CKBs in place of
its local w0 branches, on a 2× coarsened grid, as the paper's shallow-water model) rolled out autoregressively, with PDEBench's
multi-metric comparison and the relative-gain chart (CHONN, Fig. 5b-c).

One host per comparison: CHONN is compared with its own host without the CKB ("FNO host", ``chonn_fno``
at order 0), so the ratio measures the CKB alone; neuraloperator's ``fno`` ("FNO", a different network:
channel MLP, soft gating, 2-layer lifting) and the U-Net stay as rows of their own.

Each model maps the last m frames of the water height h to the next frame; the first m frames are
given (PDEBench's ``initial_step``) and the rest predicted with predictions fed back. Training follows
PDEBench's autoregressive setting: the loss is the relative L2 of the whole rollout. Metrics exclude the
given frames (``evaluation.pdebench_metrics(window=m)``).

Claim under test (docs/specs/anchors.md, CHONN claim 4): CHONN beats FNO and U-Net on RMSE, nRMSE, CSV, Max,
boundary RMSE and the low/mid/high frequency-band errors.

Scales (data from ``pde_data.generate_dam_break``, our finite-volume solver of PDEBench's problem):

- full: PDEBench's set — 1000 samples at 128², 101 frames on t ∈ [0, 1], 900 train / 100 test,
  10 given frames; FNO 12 modes, width 20 (both FNO hosts); U-Net 3 levels × 4 residual blocks, 32
  channels; CKB order 2, d_state 16; the CHONN paper's SWE schedule for all models: AdamW lr 1e-3, StepLR(100, 0.5), 500 epochs,
  batch 5. Run time, an estimate (not measured): 3,000× the quick run's sample-epochs × 10× the rollout
  steps at 16× the pixels with ≈ 10× larger models — days per model on one GPU; not practical on CPU.
- ``--medium``: 32², 11 frames, 128 train / 32 test, 2 given frames, the quick models (FNO width 16),
  20 epochs; training seeds 0, 1, 2. (48 / 16 and 10 epochs left FNO and U-Net above half the
  mean-field predictor's error.)
- ``--quick``: 32², 11 frames (every 0.1), 24 train / 8 test, 2 given frames, small models, 6 epochs.
  Measured: ≈ 6 minutes (FNO 100 s, U-Net 62 s, CHONN 164 s of training) with 1 thread on 2 cores shared
  by ~10 processes.
- ``--smoke``: 16², 4 frames, 2 / 2 samples, one epoch.

Every model trains from ``data.nc`` with ``operators.training.train_run`` into ``runs/<model>`` as a window
run with m given frames and a horizon of all the remaining ones (one window per trajectory, no validation
split) and is rolled out on the run's stored test split with ``evaluate_run`` (the model of the last epoch).

Outputs in ``--out`` (default ``runs/shallow_water``): ``results.json``, ``metrics.png``, ``gain.png``
(CHONN's error divided by each baseline's: below 1 means CHONN is better), ``rollout.png`` (relative L2
per step), ``fields_<model>.png`` (last frame), ``data.nc`` and the run folders ``runs/<model>``.

Example:
    python examples/shallow_water.py --quick
"""

from __future__ import annotations

import math

import _common
import pde_data
from evaluation import PDEBENCH_KEYS, plots
from operators.training import DataSpec, OptimSpec, RunSpec, TaskSpec

SCRIPT = "shallow_water"
SCALES = {
    "full": dict(n_grid=128, frames=101, sizes=(900, 100), given=10, epochs=500, batch_size=5,
                 fno=dict(n_modes=12, width=20), unet=dict(n_layers=3, n_res=4, n_res_neck=4, channel_multiplier=32),
                 ckb=dict(order=2, d_state=16, expand=2, downsample=2)),
    "medium": dict(n_grid=32, frames=11, sizes=(128, 32), given=2, epochs=20, batch_size=4, seeds=(0, 1, 2),
                   fno=dict(n_modes=8, width=16), unet=dict(n_layers=2, n_res=1, n_res_neck=1, channel_multiplier=8),
                   ckb=dict(order=2, d_state=4, expand=1, downsample=2)),
    "quick": dict(n_grid=32, frames=11, sizes=(24, 8), given=2, epochs=6, batch_size=4,
                  fno=dict(n_modes=8, width=12), unet=dict(n_layers=2, n_res=1, n_res_neck=1, channel_multiplier=8),
                  ckb=dict(order=2, d_state=4, expand=1, downsample=2)),
    "smoke": dict(n_grid=16, frames=4, sizes=(2, 2), given=2, epochs=1, batch_size=2,
                  fno=dict(n_modes=4, width=6), unet=dict(n_layers=1, n_res=1, n_res_neck=1, channel_multiplier=4),
                  ckb=dict(order=2, d_state=2, expand=1, downsample=2)),
}


def write_data(cfg: dict, seed: int, out):
    """The dam-break heights in ``data.nc`` and their in-order train/test split."""
    n_train, n_test = cfg["sizes"]
    ds = pde_data.generate_dam_break(n_train + n_test, n_grid=cfg["n_grid"], n_frames=cfg["frames"], seed=seed)
    print(f"data: radial dam break, {cfg['n_grid']}², {cfg['frames']} frames, {cfg['given']} given, "
          f"train/test = {n_train}/{n_test}", flush=True)
    return pde_data.save(ds, out / "data.nc"), _common.in_order({"train": n_train, "test": n_test})


def one_seed(seed: int, specs: dict, cfg: dict, data, splits, args, out) -> dict:
    """Train every model with training seed ``seed`` and roll it out on the test split: ``{"rows": {label:
    metrics}, "curves": {label: per-step rel. L2}}`` (the given frames excluded from the metrics)."""
    m = cfg["given"]
    runs = out / "runs" / f"seed{seed}"
    spec = RunSpec(data=DataSpec(inputs=("h",), splits=splits), task=TaskSpec(window=m, horizon=cfg["frames"] - m),
                   optim=OptimSpec(epochs=cfg["epochs"], batch_size=cfg["batch_size"], lr=1e-3, optimizer="adamw",
                                   weight_decay=1e-4, step_size=100, gamma=0.5, seed=seed))
    trained = _common.train_models(specs, data, runs, spec=spec, device=args.device)
    rows, curves = {}, {}
    for label, run in trained.items():
        result = _common.evaluate(run, data)
        rows[label] = {**{k: result["metrics"].get(k, math.nan) for k in (*PDEBENCH_KEYS, "rel_l2")},  # empty band: NaN
                       "params": run.n_params, "train_s": run.seconds}
        curves[label] = list(result["rollout"]["per_step_rel_l2"])
        pred, true = _common.fields(result, data, "h")
        plots.plot_fields(pred, true, title=f"dam break, last frame, {label}, seed {seed}",
                          path=out / f"fields_{label.replace(' ', '_')}.png")
    _common.print_table(rows, f"seed {seed}: shallow-water test metrics (frames {m}..{cfg['frames'] - 1})")
    return {"rows": rows, "curves": curves}


def main() -> None:
    args, out, cfg, seeds = _common.start(__doc__, SCRIPT, SCALES)
    data, splits = write_data(cfg, args.seed, out)
    m = cfg["given"]
    baseline = _common.mean_field_predictor(data, splits, "h", frames=cfg["frames"] - m)
    print(f"mean-field predictor rel. L2 {baseline['rel_l2']:.4g}; training seeds {seeds}", flush=True)
    # Models: m frames in, one frame out, trained on whole rollouts (one window of every trajectory).
    specs = {"FNO": ("fno", cfg["fno"]), "FNO host": ("chonn_fno", {**cfg["fno"], "order": 0}),
             "U-Net": ("unet", cfg["unet"]),
             "CHONN": ("chonn_fno", {**cfg["fno"], **cfg["ckb"], "placement": "replace"})}
    per_seed = {seed: one_seed(seed, specs, cfg, data, splits, args, out) for seed in seeds}
    summary = _common.seed_summary({s: r["rows"] for s, r in per_seed.items()})
    curves = _common.mean_curves({s: r["curves"] for s, r in per_seed.items()})
    means = _common.summary_means(summary)
    rows = {label: {k: row[k] for k in (*PDEBENCH_KEYS, "rel_l2")} for label, row in means.items()}
    _common.print_table(rows, f"shallow-water test metrics ({len(splits.test)} samples), mean over seeds {seeds}")
    gains = _common.ratios(rows, "CHONN", ["FNO host", "U-Net", "FNO"])
    _common.print_table(gains, "error ratios of the means (< 1: CHONN better)", fmt="{:.3f}")
    plots.plot_metric_bars(_common.finite(rows), log=True, path=out / "metrics.png")
    plots.plot_metric_bars(_common.finite(gains), path=out / "gain.png")
    plots.plot_rollout(curves, path=out / "rollout.png")
    _common.write_results(out, SCRIPT, args, {
        "settings": cfg, "seeds": seeds, "mean_field_predictor": baseline, "metrics": summary, "error_ratios": gains,
        "per_step_rel_l2_mean": curves, "per_seed": per_seed,
        "claim": "CHONN lower than FNO and U-Net on every metric (CHONN, Fig. 5b-c); tested against its own host "
                 "without the CKB and the U-Net",
        "claim_holds": all(v < 1 for name, g in _common.finite(gains).items() if name != "CHONN/FNO"
                           for v in g.values()),
    })


if __name__ == "__main__":
    main()
