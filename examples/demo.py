"""The main job (``make demo``): Navier–Stokes data → FNO vs CHONN-FNO → 10-step rollout report.

1. Simulate a small forced Navier–Stokes set (ν = 1e−3, FNO forcing, GRF initial vorticity) and write
   it as a PDEBench per-sample-group HDF5 file.
2. Train ``fno`` and ``chonn_fno`` (a 2nd-order CKB in each Fourier layer) from that file on
   ``window`` given frames → next frame.
3. Roll both out autoregressively on the test samples and score every step with the relative L2,
   its one-sided spectral and derivative forms, the boundary RMSE and low/mid/high frequency errors.
4. Write ``report.md``, ``metrics.json`` and PNG plots (fields, per-step errors, spectra) into one
   folder and print where it is.

Embedded defaults run in about five minutes on a 2-core CPU; they are a smoke-scale demonstration,
not the FNO protocol (``examples/navier_stokes_rollout.py`` has that).
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

import evaluation
import pde_data
from evaluation import plots
from operators.rollout import rollout
from operators.training import TrainConfig, load_run, train_run
from operators.training.data import open_data


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


MODELS = {"fno": {}, "chonn_fno": {"order": 2}}


def simulate(cfg: DemoConfig, path: Path) -> Path:
    """Step 1: the data set, written in PDEBench's per-sample-group layout."""
    ds = pde_data.generate_navier_stokes(
        cfg.n_samples, visc=1e-3, n_sim=cfg.n_sim, n_out=cfg.n_out, t_final=cfg.t_final,
        n_records=int(round(cfg.t_final)), record_initial=True, dt=cfg.dt, seed=cfg.seed)
    return pde_data.write_pdebench(ds, path, layout="ns")


def train(cfg: DemoConfig, data: Path, out: Path) -> dict[str, float]:
    """Step 2: train every model on the same splits; returns the wall time per model."""
    n_test = max(2, cfg.n_samples // 8)
    sizes = [cfg.n_samples - 2 * n_test, n_test, n_test]
    seconds = {}
    for name, extra in MODELS.items():
        start = time.perf_counter()
        model_config = {"width": cfg.width, "n_modes": cfg.modes, "n_layers": cfg.n_layers, **extra}
        train_run(data, name, out / name, model_config=model_config, window=cfg.window, sizes=sizes,
                  split_seed=cfg.seed, train_config=TrainConfig(epochs=cfg.epochs, batch_size=10, lr=3e-3,
                                                                step_size=max(1, cfg.epochs // 2), seed=cfg.seed))
        seconds[name] = time.perf_counter() - start
    return seconds


def test_trajectories(run, data: Path, cfg: DemoConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """The test split's given frames (normalized, as the model saw them in training) and the true
    continuation in physical units: ``(batch, window, channels, x, y)``, ``(batch, rollout, channels, x, y)``."""
    ds = open_data(data)
    info = run.meta["data"]
    test = pde_data.split_indices(ds.sizes["sample"], sizes=info["sizes"], seed=info["seed"])["test"]
    frames = pde_data.to_tensor(ds[info["variables"]].isel(sample=test))
    given = frames[:, :cfg.window]
    norm = run.normalizers["output"]
    return (norm.encode(given) if norm else given), frames[:, cfg.window:cfg.window + cfg.rollout]


def score(pred: torch.Tensor, true: torch.Tensor) -> dict:
    """Per-step relative L2 and whole-rollout metrics; inputs ``(batch, steps, channels, x, y)``."""
    flat_p, flat_t = pred.flatten(0, 2), true.flatten(0, 2)  # every (sample, step, channel) a field (x, y)
    per_step, mean = evaluation.rollout_errors(pred, true)
    bands = evaluation.frequency_band_errors(flat_p, flat_t)
    return {
        "per_step_rel_l2": [float(v) for v in per_step],
        "rollout_rel_l2": float(mean),
        "rel_l2_spectral": float(evaluation.rel_l2_spectral(flat_p, flat_t)),
        "rel_l2_derivative": float(evaluation.rel_l2_derivative(flat_p, flat_t)),
        "boundary_rmse": float(evaluation.boundary_rmse(flat_p, flat_t)),
        **{f"fRMSE_{k}": float(v) for k, v in bands.items()},
    }


def evaluate(cfg: DemoConfig, data: Path, out: Path) -> tuple[dict, dict]:
    """Step 3: roll out every model on the test samples; returns metrics and predictions."""
    results, preds = {}, {}
    for name in MODELS:
        run = load_run(out / name)
        given, true = test_trajectories(run, data, cfg)
        with torch.no_grad():
            pred = rollout(run.model, given, true.shape[1])
        norm = run.normalizers["output"]
        pred = norm.decode(pred) if norm else pred
        results[name], preds[name] = score(pred, true), pred
    return results, {"true": true, **preds}


def report(cfg: DemoConfig, out: Path, results: dict, fields: dict, seconds: dict) -> Path:
    """Step 4: plots and the Markdown report."""
    plots.plot_rollout({k: v["per_step_rel_l2"] for k, v in results.items()}, path=out / "per_step_error.png")
    last = cfg.rollout - 1
    for name in MODELS:
        plots.plot_fields(fields[name][0, last, 0], fields["true"][0, last, 0],
                          title=f"{name}, step {cfg.rollout}", path=out / f"fields_{name}.png")
        plots.plot_spectra(fields[name][:, last, 0], fields["true"][:, last, 0], path=out / f"spectra_{name}.png")
    keys = [k for k in next(iter(results.values())) if k != "per_step_rel_l2"]
    lines = ["# circuitop demo: Navier–Stokes rollouts, FNO vs CHONN-FNO", "",
             f"Setup: {json.dumps(asdict(cfg))}", "",
             "| metric | " + " | ".join(results) + " |", "|---|" + "---|" * len(results)]
    lines += [f"| {k} | " + " | ".join(f"{results[m][k]:.4g}" for m in results) + " |" for k in keys]
    lines += [f"| training time (s) | " + " | ".join(f"{seconds[m]:.1f}" for m in results) + " |", "",
              "![per-step error](per_step_error.png)", ""]
    lines += [f"![{m} fields](fields_{m}.png) ![{m} spectra](spectra_{m}.png)" for m in MODELS]
    lines += ["", "Scores are on the test split's vorticity (physical units), over all rollout steps; "
              "this is a smoke-scale run (see RESULTS.md for the protocols and their numbers)."]
    path = out / "report.md"
    with pde_data.atomic_path(path) as tmp:
        tmp.write_text("\n".join(lines) + "\n")
    with pde_data.atomic_path(out / "metrics.json") as tmp:
        tmp.write_text(json.dumps({"config": asdict(cfg), "results": results, "train_seconds": seconds}, indent=1))
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
    print(f"[3/4] {cfg.rollout}-step rollouts on the test split")
    print(f"      ({time.perf_counter() - start:.0f} s)")
    results, fields = evaluate(cfg, data, out)
    path = report(cfg, out, results, fields, seconds)
    for name, r in results.items():
        print(f"      {name:>10}: rollout rel L2 {r['rollout_rel_l2']:.4f}, spectral {r['rel_l2_spectral']:.4f}, "
              f"derivative {r['rel_l2_derivative']:.4f}")
    print(f"[4/4] report written to {path.resolve()} ({time.perf_counter() - start:.0f} s in all)")


if __name__ == "__main__":
    main()
