"""Shared pieces of the example scripts: options and scales, the model comparison on the project's run
layer (``operators.training.train_run`` / ``evaluate_run``), results JSON and tables.

Every example writes its data to a NetCDF file in its output folder, trains each model from that file
into ``runs/<label>`` from one shared :class:`~operators.training.RunSpec` (the same explicit splits and
settings; :func:`train_models` sets only the model), and scores the stored test split of each run
(:func:`evaluate`), so the examples and ``circuitop train`` / ``circuitop evaluate`` share one pipeline.

Every example runs at one of three scales, chosen on the command line:

- ``full``  (default): the paper's protocol; a GPU run (see each script's docstring).
- ``--medium``: a CPU run at which every model is clearly trained (each error well below the
  mean-field predictor's, reported beside it), three training seeds, at most about 45 minutes on two
  cores; the scale of the RESULTS.md tables (``examples/results_tables.py``).
- ``--quick``: a CPU-sized version, a few minutes on two cores.
- ``--smoke``: a few samples and one epoch, seconds; used by ``tests/test_examples.py``.

The data of a run are drawn with ``--seed``; every model is trained once per training seed
(``--seeds``, default: the scale's ``seeds``, else ``--seed``) on the same data, splits and settings, and
the results JSON holds every seed's numbers and their mean and standard deviation (:func:`seed_summary`).
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import xarray as xr

import pde_data
from evaluation import metrics
from operators.provenance import code_version
from operators.training import RunSpec, Splits, evaluate_run, load_run, train_run
from operators.training.evaluate import json_safe
from pde_data import atomic_path
from pde_data.core.model import SAMPLE, TIME

__all__ = ["parser", "setup", "settings", "start", "training_seeds", "seed_summary", "summary_means", "mean_curves",
           "mean_field_predictor",
           "in_order", "save_in_order", "Trained", "train_models", "evaluate",
           "fields", "n_params", "write_results",
           "print_table", "ratios", "finite", "positive_int"]

SCALES = ("smoke", "quick", "medium", "full")
_START = time.perf_counter()  # the script's start (this module is imported first): wall_s in results.json
#: the code the script runs, taken at its start: a commit made while a long run goes is not the code it ran
_CODE = code_version()
SPLITS = ("train", "val", "test")


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1, with a clear error otherwise."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, found {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, found {value}")
    return value


def parser(doc: str) -> argparse.ArgumentParser:
    """An argparse parser with the options every example shares."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    scale = p.add_mutually_exclusive_group()
    scale.add_argument("--medium", action="store_true",
                       help="CPU run where every model is trained, 3 training seeds (about 45 minutes)")
    scale.add_argument("--quick", action="store_true", help="CPU-sized run (a few minutes)")
    scale.add_argument("--smoke", action="store_true", help="tiny run for the tests (seconds)")
    p.add_argument("--out", type=Path, default=None, help="output folder (default runs/<script>)")
    p.add_argument("--seed", type=int, default=0, help="seed of the data (and the training seed by default)")
    p.add_argument("--seeds", type=int, nargs="+", default=None,
                   help="training seeds: initialisation and batch order (default: the scale's; --medium: 0 1 2)")
    p.add_argument("--epochs", type=positive_int, default=None, help="override the scale's epoch count")
    p.add_argument("--device", default=None, help="torch device (default: cuda if available, else cpu)")
    p.add_argument("--threads", type=positive_int, default=None, help="torch CPU threads")
    return p


def setup(args: argparse.Namespace, script: str) -> Path:
    """Scale, seeds, threads and the output folder; returns the folder."""
    args.scale = "smoke" if args.smoke else "quick" if args.quick else "medium" if args.medium else "full"
    if args.device is None:
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit(f"--device {args.device}: CUDA is not available on this machine")
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    out = args.out or Path("runs") / script
    if out.exists() and not out.is_dir():
        raise SystemExit(f"--out {out}: expected a folder, found a file")
    _warm_up()
    out.mkdir(parents=True, exist_ok=True)
    print(f"{script}: scale {args.scale}, device {args.device}, {torch.get_num_threads()} threads, out {out}",
          flush=True)
    return out


def _warm_up() -> None:
    """One Adam step on a throwaway layer: the first optimizer step of a process pays a one-time setup
    (seconds here), which would otherwise be counted in the first model's training time."""
    layer = torch.nn.Linear(1, 1)
    optimizer = torch.optim.Adam(layer.parameters())
    layer(torch.ones(1, 1)).sum().backward()
    optimizer.step()


def settings(table: dict[str, dict], args: argparse.Namespace) -> dict:
    """The settings of ``args.scale`` from a ``{scale: {name: value}}`` table, with ``--epochs`` applied."""
    chosen = dict(table[args.scale])
    if args.epochs is not None:
        chosen["epochs"] = args.epochs
    return chosen


def start(doc: str, script: str, scales: dict[str, dict]) -> tuple[argparse.Namespace, Path, dict, tuple[int, ...]]:
    """Every example's start: parse the shared options, set up the scale and output folder, and return
    ``(args, out, settings, training seeds)``."""
    args = parser(doc).parse_args()
    out = setup(args, script)
    cfg = settings(scales, args)
    return args, out, cfg, training_seeds(cfg, args)


def training_seeds(cfg: dict, args: argparse.Namespace) -> tuple[int, ...]:
    """The training seeds: ``--seeds``, else the scale's ``seeds`` setting, else ``(--seed,)``."""
    if args.seeds:
        return tuple(args.seeds)
    return tuple(cfg.get("seeds", (args.seed,)))


def seed_summary(per_seed: dict[int, dict[str, dict[str, float]]]) -> dict[str, dict[str, dict]]:
    """``{seed: {label: {metric: value}}}`` → ``{label: {metric: {"mean", "std", "values"}}}``: the mean and
    sample standard deviation (``ddof=1``; 0 for a single seed) over seeds, and the values in seed order."""
    seeds = list(per_seed)
    first = per_seed[seeds[0]]
    summary = {}
    for label, row in first.items():
        summary[label] = {}
        for metric in row:
            values = np.array([per_seed[s][label][metric] for s in seeds], dtype=float)
            std = float(values.std(ddof=1)) if len(values) > 1 else 0.0
            summary[label][metric] = {"mean": float(values.mean()), "std": std, "values": values.tolist()}
    return summary


def summary_means(summary: dict[str, dict[str, dict]]) -> dict[str, dict[str, float]]:
    """The means of a :func:`seed_summary`, as ``{label: {metric: mean}}`` (for tables and plots)."""
    return {label: {m: v["mean"] for m, v in row.items()} for label, row in summary.items()}


def mean_curves(per_seed: dict[int, dict[str, list[float]]]) -> dict[str, list[float]]:
    """``{seed: {label: per-step values}}`` → ``{label: per-step mean over seeds}``."""
    seeds = list(per_seed)
    return {label: np.mean([per_seed[s][label] for s in seeds], axis=0).tolist() for label in per_seed[seeds[0]]}


def mean_field_predictor(data: Path, splits: Splits, variable: str, *, frames: int | None = None,
                         derivative: bool = False) -> dict[str, float]:
    """Errors of the mean-field predictor on the test split: every test sample of ``variable`` is predicted
    by the training samples' mean field, point by point (per time step where the field has one; ``frames``: only
    the last ``frames`` time steps, those a rollout predicts). Returns ``{"rel_l2": mean over test
    samples (CHONN Eq. 48), "rel_l1_median": median (Eq. 55)}``, with ``"rel_l2_derivative"`` (Eq. 50,
    periodic, along space only) when ``derivative``. It is the bar a trained model must clear: a model
    whose error is near it has not learned the task. (Not the evaluations' mean predictor, one constant per
    channel: docs/glossary.md.)"""
    with pde_data.open_source(data).dataset as ds:
        field = ds[variable]
        if frames is not None and TIME in field.dims:
            field = field.isel({TIME: slice(field.sizes[TIME] - frames, None)})
        mean = field.isel({SAMPLE: list(splits.train)}).mean(SAMPLE).load()
        test = field.isel({SAMPLE: list(splits.test)}).load()
    prediction = xr.broadcast(mean, test)[0].transpose(*test.dims)  # xarray: the derivative is along space only
    errors = {"rel_l2": float(metrics.rel_l2(prediction, test)),
              "rel_l1_median": float(metrics.rel_l1(prediction, test, reduce="median"))}
    if derivative:
        errors["rel_l2_derivative"] = float(metrics.rel_l2_derivative(prediction, test))
    return errors


# -- data files and splits -----------------------------------------------------------------------
def in_order(sizes: dict[str, int]) -> Splits:
    """Consecutive sample ranges for ``{"train": n, "val": n, "test": n}`` (a missing name: an empty
    split); generated samples are independent draws, so an in-order split is a random one."""
    unknown = sorted(set(sizes) - set(SPLITS))
    if unknown:
        raise ValueError(f"split names: expected some of {SPLITS}, found {unknown}")
    ranges, start = {}, 0
    for name in SPLITS:
        size = sizes.get(name, 0)
        ranges[name] = tuple(range(start, start + size))
        start += size
    return Splits(**ranges)


def save_in_order(sets: dict[str, xr.Dataset], path: Path) -> tuple[Path, Splits]:
    """Write the ``train``/``val``/``test`` sets one after another to the NetCDF file ``path`` (samples
    renumbered 0..n-1) and return it with the sample ranges of the sets."""
    splits = in_order({name: part.sizes[SAMPLE] for name, part in sets.items()})
    parts = [sets[name] for name in SPLITS if name in sets]
    ds = xr.concat(parts, dim=SAMPLE, data_vars="minimal", coords="minimal", compat="override", join="exact")
    ds = ds.assign_coords({SAMPLE: np.arange(ds.sizes[SAMPLE])})
    return pde_data.save(ds, path), splits


# -- the model comparison on the run layer -------------------------------------------------------
@dataclass(frozen=True)
class Trained:
    """One trained model of a comparison: its run folder and what training it measured."""

    run_dir: Path
    history: list[dict]
    seconds: float
    n_params: int


def n_params(model: torch.nn.Module) -> int:
    """The number of trainable parameters of ``model``."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def train_models(specs: dict[str, tuple[str, dict]], data: Path, runs: Path, *, spec: RunSpec,
                 device: str) -> dict[str, Trained]:
    """Train every ``label -> (registry name, config)`` from the file ``data`` into ``runs/<label>`` (spaces
    dropped) with ``operators.training.train_run``: each run's spec is the shared ``spec`` (variables,
    splits, task, optimisation, seed) with the data path and the model set, its train and validation
    samples read into memory once (``loading.cache="memory"``). The wall time includes the run's setup
    (opening the file, fingerprint, normalizer fit) besides training. A run of an earlier invocation in
    ``runs/<label>`` is replaced (``overwrite=True``: only the files a run writes are deleted)."""
    trained = {}
    for label, (name, config) in specs.items():
        print(f"training {label} ({name}, {config})", flush=True)
        run_dir = runs / label.replace(" ", "")
        run_spec = spec.override({"data.path": str(data), "model.name": name, "model.config": config,
                                  "loading.cache": "memory"})
        start = time.perf_counter()
        history = train_run(run_spec, run_dir, device=device, overwrite=True, progress=False)
        seconds = time.perf_counter() - start
        count = n_params(load_run(run_dir, checkpoint="last").model)
        print(f"  {label}: {count:,} parameters, trained in {seconds:.1f} s", flush=True)
        trained[label] = Trained(run_dir, history, seconds, count)
    return trained


def evaluate(trained: Trained, data: Path, **options) -> dict:
    """``evaluate_run`` of the model as trained (the last epoch, as the protocols report; runs without a
    validation split keep as ``best.pt`` the epoch of lowest training loss) on the run's stored test
    split, or with ``samples="all"`` on every sample of ``data``; writes ``pred.nc`` and ``metrics.json`` into
    the evaluation's folder (``result["out"]``). NaN metrics (``None`` in the result) come back as ``nan``."""
    result = evaluate_run(trained.run_dir, data, checkpoint="last", plots=False, **options)
    result["metrics"] = {k: math.nan if v is None else v for k, v in result["metrics"].items()}
    return result


def fields(result: dict, data: Path, variable: str) -> tuple[np.ndarray, np.ndarray]:
    """Predicted and true ``variable`` of the first sample an evaluation (:func:`evaluate`'s ``result``)
    scored (the last frame of a rollout): from its ``pred.nc`` and from ``data``."""
    with pde_data.open_source(Path(result["out"]) / "pred.nc").dataset as predictions, pde_data.open_source(data).dataset as ds:
        pred = predictions[variable].isel({SAMPLE: 0})
        true = ds[variable].isel({SAMPLE: int(pred[SAMPLE])})
        if TIME in pred.dims:  # the given frames and the rollout: the data's first frames
            last = pred.sizes[TIME] - 1
            pred, true = pred.isel({TIME: last}), true.isel({TIME: last})
        return pred.values, true.values


# -- results ------------------------------------------------------------------------------------
def write_results(out: Path, script: str, args: argparse.Namespace, results: dict) -> Path:
    """``out/results.json``: the measured numbers with the scale, arguments and environment."""
    payload = {
        "script": script, "scale": args.scale,
        "args": vars(args),
        "environment": {"python": platform.python_version(), "torch": torch.__version__,
                        "device": args.device, "threads": torch.get_num_threads(), **_CODE},
        "wall_s": time.perf_counter() - _START,
        "results": results,
    }
    path = out / "results.json"
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(json_safe(payload), indent=1, allow_nan=False))
    print(f"wrote {path}", flush=True)
    return path


def print_table(rows: dict[str, dict[str, float]], title: str = "", *, fmt: str = "{:.4g}") -> None:
    """A plain text table: one row per model, one column per metric."""
    if not rows:
        return
    columns = list(next(iter(rows.values())))
    width = max(12, *(len(c) + 1 for c in columns))
    label_w = max(len(r) for r in rows) + 2
    lines = [title] if title else []
    lines.append("".ljust(label_w) + "".join(c.rjust(width) for c in columns))
    for label, row in rows.items():
        cells = [fmt.format(row[c]) if isinstance(row.get(c), (int, float)) else str(row.get(c, "")) for c in columns]
        lines.append(label.ljust(label_w) + "".join(cell.rjust(width) for cell in cells))
    print("\n".join(lines), file=sys.stdout, flush=True)


def finite(rows: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    """``rows`` without the metrics that are NaN/inf for some model (e.g. fRMSE_high on a 16² grid)."""
    keep = [m for m in next(iter(rows.values())) if all(math.isfinite(r[m]) for r in rows.values())]
    return {label: {m: r[m] for m in keep} for label, r in rows.items()}


def ratios(rows: dict[str, dict[str, float]], ours: str, baselines: list[str]) -> dict[str, dict[str, float]]:
    """``{f"{ours}/{b}": {metric: ours/b}}``: error ratios (< 1 means ``ours`` has the lower error)."""
    return {f"{ours}/{b}": {m: rows[ours][m] / rows[b][m] if rows[b][m] else float("nan") for m in rows[ours]}
            for b in baselines}
