"""Navier-Stokes (vorticity form, ν = 1e-3) rollouts: FNO vs CHONN (the FNO host with a 2nd-order CKB in
place of every Fourier layer's local w0 branch, the paper's placement) for 3→1, 5→1 and 10→1 windows (CHONN, Fig. 5e-f). The claim is tested
against the same host without the CKB ("FNO host", ``chonn_fno`` at order 0); neuraloperator's ``fno``
(a different network) is reported beside them.

Each model maps the last ``window`` frames to the next one and is rolled out autoregressively, its predictions
fed back (``operators.rollout``). All windows predict the same frames: the ``steps`` frames after the
first ``given`` ones (given = 10), from the ``window`` frames just before them. Training follows the FNO
protocol: the loss is the relative L2 of the whole rollout, back-propagated through every step.

Claims under test (docs/specs/anchors.md): CHONN claim 5 — lower 40-step rollout error than FNO for every window,
with flatter per-step curves; and the FNO paper's FNO-2D relative L2 of **0.0128** (ν = 1e-3, T = 50,
N = 1000, 10 given frames; the mean over test samples of the relative L2 of the whole 40-frame rollout,
reported here as ``rel_l2``). Only the full setting is comparable with that number.

Scales (data from ``pde_data.generate_navier_stokes``, our pseudo-spectral solver of the FNO benchmark):

- full: the FNO protocol — 256² simulation kept at 64², ν = 1e-3, 50 records, 1000 train / 200 test,
  10 given frames, 40 predicted; width 20, 12 modes; Adam lr 1e-3 (weight decay 1e-4), StepLR(100, 0.5),
  500 epochs, batch 20; CKB d_state 16. Run time, an estimate (not measured): the data ≈ 1-2 hours on
  one GPU (1200 × 500,000 solver steps at 256²); training ≈ 10,000× the quick run's sample-steps at 16×
  the pixels: a few GPU-hours per window for FNO (the FNO paper's order) and, from the quick run's
  CHONN/FNO time ratio of 3-6×, about a GPU-day per window for CHONN; not practical on CPU.
- ``--medium``: 64² simulation kept at 16², 20 records, 128 train / 16 test, 10 given, 10 predicted;
  width 16, 6 modes; Adam lr 3e-3, 20 epochs, batch 8; training seeds 0, 1, 2.
- ``--quick``: 32² simulation kept at 16², 20 records, 24 train / 8 test, 10 given, 10 predicted; width
  12, 6 modes; 8 epochs. Measured: ≈ 23 minutes (FNO 66-106 s, CHONN 333-392 s of training per window)
  with 1 thread on 2 cores shared by ~10 processes.
- ``--smoke``: 16², 5 records, 2 / 2 samples, windows 2 and 3, 2 steps, one epoch.

Each window has its own data file ``data_m<window>.nc``: the frames given − window .. given + steps − 1 of
every trajectory, so a window run of ``window`` frames and horizon ``steps`` has exactly one window per trajectory (the
normalizer is fitted on the training trajectories of that file). Every model trains from it with
``operators.training.train_run`` into ``runs/m<window>/<model>`` and is rolled out ``steps`` steps on the run's
stored test split with ``evaluate_run`` (the model of the last epoch).

Outputs in ``--out`` (default ``runs/navier_stokes_rollout``): ``results.json``, ``rollout.png``
(per-step error curves), ``windows.png`` (mean rollout error per window), ``fields_<model>.png``, the data
files and run folders.

Example:
    python examples/navier_stokes_rollout.py --quick
"""

from __future__ import annotations

import _common
import pde_data
from evaluation import plots
from operators.training import DataSpec, OptimSpec, RunSpec, TaskSpec
from pde_data.core.model import TIME

SCRIPT = "navier_stokes_rollout"
SCALES = {
    "full": dict(sizes=(1000, 200), n_sim=256, n_out=64, records=50, dt=1e-4, windows=(3, 5, 10), given=10,
                 steps=40, fno=dict(n_modes=12, width=20), ckb=dict(order=2, d_state=16, expand=2),
                 epochs=500, batch_size=20),
    "medium": dict(sizes=(128, 16), n_sim=64, n_out=16, records=20, dt=5e-3, windows=(3, 5, 10), given=10,
                   steps=10, fno=dict(n_modes=6, width=16), ckb=dict(order=2, d_state=4, expand=1),
                   epochs=20, batch_size=8, lr=3e-3, seeds=(0, 1, 2)),
    "quick": dict(sizes=(24, 8), n_sim=32, n_out=16, records=20, dt=1e-2, windows=(3, 5, 10), given=10,
                  steps=10, fno=dict(n_modes=6, width=12), ckb=dict(order=2, d_state=4, expand=1),
                  epochs=8, batch_size=4),
    "smoke": dict(sizes=(2, 2), n_sim=16, n_out=16, records=5, dt=1e-2, windows=(2, 3), given=3,
                  steps=2, fno=dict(n_modes=4, width=6), ckb=dict(order=2, d_state=2, expand=1),
                  epochs=1, batch_size=2),
}
VISC = 1e-3
FNO_PAPER = 0.0128  # FNO-2D, ν = 1e-3, T = 50, N = 1000 (docs/specs/anchors.md)


def write_windows(cfg: dict, seed: int, out) -> dict:
    """``{window: data file}``: for every window, the frames ``given-window .. given+steps-1`` of the trajectories."""
    n_train, n_test = cfg["sizes"]
    ds = pde_data.generate_navier_stokes(n_train + n_test, visc=VISC, n_sim=cfg["n_sim"], n_out=cfg["n_out"],
                                         t_final=float(cfg["records"]), dt=cfg["dt"], seed=seed)
    print(f"data: NS ν={VISC}, {cfg['n_out']}² (simulated at {cfg['n_sim']}²), {cfg['records']} records "
          f"(one per time unit), train/test = {n_train}/{n_test}", flush=True)
    given, steps = cfg["given"], cfg["steps"]
    return {w: pde_data.save(ds.isel({TIME: slice(given - w, given + steps)}), out / f"data_m{w}.nc")
            for w in cfg["windows"]}


def one_seed(seed: int, specs: dict, cfg: dict, files: dict, splits, args, out) -> dict:
    """Train every model for every window with training seed ``seed`` and roll it out: ``{"rows":
    {label: {"<m>->1": rollout rel. L2}}, "curves": {"<label> <m>->1": per-step rel. L2}, "models": ...}``."""
    runs = out / "runs" / f"seed{seed}"
    optim = OptimSpec(epochs=cfg["epochs"], batch_size=cfg["batch_size"], lr=cfg.get("lr", 1e-3), optimizer="adam",
                      weight_decay=1e-4, step_size=100, gamma=0.5, seed=seed)
    rows, curves, models = {}, {}, {}
    for window, data in files.items():
        spec = RunSpec(data=DataSpec(splits=splits), task=TaskSpec(window=window, horizon=cfg["steps"], periodic=True),
                       optim=optim)
        trained = _common.train_models(specs, data, runs / f"m{window}", spec=spec, device=args.device)
        for label, run in trained.items():
            result = _common.evaluate(run, data, steps=cfg["steps"])
            per_step = result["rollout"]["per_step_rel_l2"]
            curves[f"{label} {window}->1"] = per_step
            rows.setdefault(label, {})[f"{window}->1"] = result["metrics"]["rel_l2"]
            models[f"{label} {window}->1"] = {"params": run.n_params, "train_s": run.seconds,
                                         "mean_step_rel_l2": result["rollout"]["mean_rel_l2"],
                                         "last_step_rel_l2": per_step[-1]}
            if window == max(cfg["windows"]):
                pred, true = _common.fields(result, data, "vorticity")
                plots.plot_fields(pred, true, title=f"NS step {cfg['steps']}, {label} {window}→1, seed {seed}",
                                  path=out / f"fields_{label.replace(' ', '_')}.png")
    _common.print_table(rows, f"seed {seed}: rollout rel. L2 over {cfg['steps']} steps")
    return {"rows": rows, "curves": curves, "models": models}


def main() -> None:
    args, out, cfg, seeds = _common.start(__doc__, SCRIPT, SCALES)
    if cfg["given"] + cfg["steps"] > cfg["records"] or max(cfg["windows"]) > cfg["given"]:
        raise SystemExit(f"settings: need windows <= given and given + steps <= records, found {cfg}")
    files = write_windows(cfg, args.seed, out)
    n_train, n_test = cfg["sizes"]
    splits = _common.in_order({"train": n_train, "test": n_test})
    # the predicted frames are the same for every window: one bar for all
    baseline = _common.mean_field_predictor(files[max(cfg["windows"])], splits, "vorticity", frames=cfg["steps"])
    print(f"mean-field predictor rollout rel. L2 {baseline['rel_l2']:.4g}; training seeds {seeds}", flush=True)

    # Models per window: neuraloperator's FNO, our FNO host without the CKB (order 0) and CHONN (the same host
    # with it), window·C input channels → C, the same optimisation for all; the CKB's effect is CHONN vs the host.
    specs = {"FNO": ("fno", cfg["fno"]), "FNO host": ("chonn_fno", {**cfg["fno"], "order": 0}),
             "CHONN": ("chonn_fno", {**cfg["fno"], **cfg["ckb"], "placement": "replace"})}
    per_seed = {seed: one_seed(seed, specs, cfg, files, splits, args, out) for seed in seeds}
    summary = _common.seed_summary({s: r["rows"] for s, r in per_seed.items()})
    curves = _common.mean_curves({s: r["curves"] for s, r in per_seed.items()})
    rows = _common.summary_means(summary)
    _common.print_table(rows, f"rollout rel. L2 over {cfg['steps']} steps ({n_test} test samples, {cfg['n_out']}²), "
                              f"mean over seeds {seeds}")
    print(f"FNO paper (FNO-2D, 64², 1000 train, 40 steps, 10→1): {FNO_PAPER}", flush=True)
    plots.plot_rollout(curves, path=out / "rollout.png")
    plots.plot_metric_bars(rows, log=True, path=out / "windows.png")
    _common.write_results(out, SCRIPT, args, {
        "settings": cfg, "seeds": seeds, "viscosity": VISC, "mean_field_predictor": baseline, "rollout_rel_l2": summary,
        "per_step_mean": curves, "per_seed": per_seed,
        "fno_paper_rel_l2": FNO_PAPER, "comparable_with_paper": args.scale == "full",
        "claim": "CHONN lower rollout error than FNO for 3->1, 5->1, 10->1 (CHONN, Fig. 5e-f); tested against "
                 "the same FNO host without the CKB (neuraloperator's fno is a row of its own)",
        "chonn_wins": {w: rows["CHONN"][w] < rows["FNO host"][w] for w in rows["FNO host"]},
        "chonn_beats_neuraloperator_fno": {w: rows["CHONN"][w] < rows["FNO"][w] for w in rows["FNO"]},
    })


if __name__ == "__main__":
    main()
