"""The main job (``make demo``): Navier–Stokes data → FNO vs CHONN-FNO → 10-step rollout report.

1. Simulate a small forced Navier–Stokes set (ν = 1e−3, FNO forcing, GRF initial vorticity) and write
   it as a PDEBench per-sample-group HDF5 file.
2. Train ``fno`` (neuraloperator's), ``fno_host`` (our FNO host, no CKB) and ``chonn_fno`` (the same
   host with a 2nd-order CKB in place of each Fourier layer's 1×1 w0 branch, the paper's placement) from
   that file on ``window`` given frames → next frame; chonn_fno vs fno_host is the CKB's effect alone.
3. Roll every model out autoregressively on the test samples and score every step with the relative L2,
   its one-sided spectral and derivative forms, the boundary RMSE and low/mid/high frequency errors; and
   on the training samples beside the mean predictor (the training mean: a model that learned beats it).
4. Write ``report.md``, ``metrics.json`` and PNG plots (fields, per-step errors, spectra) into one
   folder and print where it is.

The embedded defaults are a smoke-scale demonstration, not the FNO protocol
(``examples/navier_stokes_rollout.py`` has that); README.md gives their measured time.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

import pde_data  # noqa: E402
from evaluation import plots  # noqa: E402
from operators.provenance import code_version  # noqa: E402
from operators.training import (DataSpec, OptimSpec, RunSpec, TaskSpec, evaluate_run, load_run,  # noqa: E402
                                 train_run)
from operators.training.tasks import EvalOptions  # noqa: E402


@dataclass(frozen=True)
class DemoConfig:
    """Embedded defaults of the demo (every field is a command-line option)."""

    n_samples: int = 16
    n_sim: int = 64
    n_out: int = 32
    t_final: float = 12.0
    dt: float = 2e-3
    window: int = 3
    rollout: int = 10
    epochs: int = 12
    width: int = 16
    modes: int = 8
    n_layers: int = 4
    seed: int = 0


#: run name -> (registry model, its settings beyond the shared sizes). ``fno_host`` is CHONN-FNO's host
#: without the CKB (order 0), so chonn_fno vs fno_host measures the CKB alone; ``fno`` is neuraloperator's.
#: chonn_fno takes the default placement, the paper's "replace" (the CKB instead of the 1×1 w0 branch);
#: order 0 needs no placement pinned: with no block the layers keep their 1×1 branch under either placement,
#: so fno_host is the same network minus the CKB (the paper's FNO vs CHONN-FNO), not one without local mixing.
MODELS = {"fno": ("fno", {}), "fno_host": ("chonn_fno", {"order": 0}), "chonn_fno": ("chonn_fno", {"order": 2})}


def simulate(cfg: DemoConfig, path: Path) -> Path:
    """Step 1: the data set, written in PDEBench's per-sample-group layout."""
    ds = pde_data.generate_navier_stokes(
        cfg.n_samples, visc=1e-3, n_sim=cfg.n_sim, n_out=cfg.n_out, t_final=cfg.t_final,
        n_records=int(round(cfg.t_final)), record_initial=True, dt=cfg.dt, seed=cfg.seed)
    return pde_data.write_pdebench(ds, path, layout="ns")


def train(cfg: DemoConfig, data: Path, out: Path) -> dict[str, float]:
    """Step 2: train every model on the same splits; returns the wall time per model. The runs of an
    earlier demo in the same folder are replaced (``overwrite``: only the files a run writes)."""
    n_test = max(2, cfg.n_samples // 8)
    spec = RunSpec(data=DataSpec(str(data), split=(cfg.n_samples - 2 * n_test, n_test, n_test), split_seed=cfg.seed),
                   task=TaskSpec(window=cfg.window, periodic=True),
                   optim=OptimSpec(epochs=cfg.epochs, batch_size=10, lr=3e-3, step_size=max(1, cfg.epochs // 2),
                                   seed=cfg.seed))
    seconds = {}
    for name, (model, extra) in MODELS.items():
        start = time.perf_counter()
        config = {"width": cfg.width, "n_modes": cfg.modes, "n_layers": cfg.n_layers, **extra}
        train_run(spec.override({"model.name": model, "model.config": config}), out / name, overwrite=True)
        seconds[name] = time.perf_counter() - start
    return seconds


def evaluate(cfg: DemoConfig, data: Path, out: Path) -> dict[str, dict]:
    """Step 3: roll every model out on the test split (``operators.training.evaluate_run`` writes each
    run's metrics.json, rollout.csv and plots into an evaluation folder of the run)."""
    return {name: evaluate_run(out / name, data, steps=cfg.rollout) for name in MODELS}


def fit(cfg: DemoConfig, data: Path, out: Path) -> dict[str, dict]:
    """Step 3 on the training split: each model's rollout rel. L2 beside the mean predictor's, which a model
    that learned beats (``evaluate_run`` scores held-out samples only: the run's task scores these, writing
    nothing)."""
    fits = {}
    with pde_data.open_source(data) as source:
        for name in MODELS:
            run = load_run(out / name)
            options = EvalOptions(out, name=name, steps=cfg.rollout, batch_size=16, device=run.device,
                                  write=False, plots=False)
            scored, _ = run.task.evaluate(run.model, source, np.asarray(run.spec.data.splits.train), options)
            fits[name] = {"rel_l2": scored["metrics"]["rel_l2"],
                          "mean_predictor_rel_l2": scored["baseline"]["mean_predictor"]["rel_l2"]}
    return fits


_REPORTED = ("rel_l2", "rel_l2_spectral", "rel_l2_derivative", "RMSE", "nRMSE", "bRMSE",
             "fRMSE_low", "fRMSE_mid", "fRMSE_high", "Max")


def report(cfg: DemoConfig, out: Path, results: dict, fits: dict, seconds: dict) -> Path:
    """Step 4: the comparison plot and the Markdown report linking every run's own plots."""
    curves = {name: r["rollout"]["per_step_rel_l2"] for name, r in results.items()}
    plt.close(plots.plot_rollout(curves, path=out / "per_step_error.png"))
    rows = [k for k in _REPORTED if k in next(iter(results.values()))["metrics"]]
    cell = lambda v: "n/a" if v is None else f"{v:.4g}"  # noqa: E731 - NaN bands come back as None
    lines = ["# circuitop demo: Navier–Stokes rollouts, FNO vs CHONN-FNO", "",
             "`fno_host` is CHONN-FNO's own host without the CKB: chonn_fno (the CKB in place of each Fourier "
             "layer's 1×1 w0 branch, the paper's placement) vs fno_host is the CKB's effect; "
             "`fno` is neuraloperator's FNO (a different network).", "",
             f"Setup: `{json.dumps(asdict(cfg))}`; {results['fno']['n_samples']} test trajectories, "
             f"{cfg.window} given frames, {cfg.rollout} predicted autoregressively.", "",
             *([f"**Warning**: {results['fno']['warning']}; the table shows the models run end to end, not which "
                "is better.", ""] if "warning" in results["fno"] else []),
             "| metric (frames after the given ones) | " + " | ".join(results) + " |", "|---|" + "---|" * len(results),
             "| mean per-step relative L2 | " + " | ".join(cell(r["rollout"]["mean_rel_l2"]) for r in results.values()) + " |"]
    lines += [f"| {k} | " + " | ".join(cell(r["metrics"][k]) for r in results.values()) + " |" for k in rows]
    lines += ["| training split: rel_l2 (mean predictor's) | " + " | ".join(
        f"{cell(f['rel_l2'])} ({cell(f['mean_predictor_rel_l2'])})" for f in fits.values()) + " |"]
    lines += ["| training time (s) | " + " | ".join(f"{seconds[m]:.1f}" for m in results) + " |", "",
              "![per-step error](per_step_error.png)", ""]
    folders = {m: Path(r["out"]).relative_to(out) for m, r in results.items()}
    lines += [f"**{m}**: ![{m} fields]({f}/fields.png) ![{m} spectra]({f}/spectra.png)" for m, f in folders.items()]
    lines += ["", "Errors are on vorticity in physical units. This is a smoke-scale run; RESULTS.md has the "
              "paper protocols and their numbers."]
    path = out / "report.md"
    with pde_data.atomic_path(path) as tmp:
        tmp.write_text("\n".join(lines) + "\n")
    with pde_data.atomic_path(out / "metrics.json") as tmp:
        tmp.write_text(json.dumps({"config": asdict(cfg), "results": results, "training_split": fits,
                                   "train_seconds": seconds,
                                   "environment": code_version()}, indent=1))
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("demo_output"), help="report folder (default demo_output)")
    for field, default in asdict(DemoConfig()).items():
        parser.add_argument(f"--{field.replace('_', '-')}", type=type(default), default=default)
    args = parser.parse_args()
    cfg = DemoConfig(**{f: getattr(args, f) for f in asdict(DemoConfig())})
    out = args.out
    start = time.perf_counter()
    print(f"[1/4] simulating {cfg.n_samples} Navier-Stokes trajectories ({cfg.n_sim}² → {cfg.n_out}², t = 0..{cfg.t_final:g})")
    data = simulate(cfg, out / "ns_demo.h5")
    print(f"[2/4] training {', '.join(MODELS)} on {cfg.window} → 1 windows from {data}")
    print(f"      ({time.perf_counter() - start:.0f} s)")
    seconds = train(cfg, data, out)
    print(f"[3/4] {cfg.rollout}-step rollouts on the test split, and on the training split")
    print(f"      ({time.perf_counter() - start:.0f} s)")
    results, fits = evaluate(cfg, data, out), fit(cfg, data, out)
    path = report(cfg, out, results, fits, seconds)
    for name, r in results.items():
        m, f = r["metrics"], fits[name]
        print(f"      {name:>10}: mean per-step rel L2 {r['rollout']['mean_rel_l2']:.4f}, "
              f"spectral {m['rel_l2_spectral']:.4f}, derivative {m['rel_l2_derivative']:.4f}; "
              f"training split {f['rel_l2']:.4f} (mean predictor {f['mean_predictor_rel_l2']:.4f})")
    if "warning" in results["fno"]:
        print(f"      warning: {results['fno']['warning']} (a smoke-scale demo: raise --n-samples to compare)")
    print(f"[4/4] report written to {path.resolve()} ({time.perf_counter() - start:.0f} s in all)")


if __name__ == "__main__":
    main()
