"""``circuitop evaluate``: the metric table for a predicted and a true file, or for a trained run.

    circuitop evaluate --pred P.nc --true T.nc [--window N] [--json]
    circuitop evaluate --run RUN_DIR [--data FILE] [--samples test|val|all] [--steps 40] [--input VAR ..]
                       [--target VAR ..] [--out DIR] [--overwrite] [--json]

A generated set's shards (``--data``, the run's own, ``--pred``, ``--true``) are checked against their manifest
first (``--no-verify`` skips it).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pde_data
from operators.cli._remote import add_storage_option, use_storage_options
from evaluation import summarize
from operators.cli._pairing import align, check_coords
from operators.cli._verified import add_no_verify, verify_data
from operators.threads import add_threads_option, choose_threads, say
from operators.training.evaluate import SAMPLE_CHOICES, json_safe
from operators.training.tasks.report import metric_rows, parameter_lines, rollout_lines
from operators.training.tasks import EvalOptions
from pde_data.core.params import defaults, typed


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("evaluate", help="evaluate predictions against the truth, or a trained run",
                       description="Print every applicable metric for two data-model files (--pred, --true), "
                                   "or evaluate a trained run on a data file (--run, --data).")
    files = p.add_argument_group("predictions in a file")
    files.add_argument("--pred", metavar="P.nc", help="predicted data set (NetCDF, data model)")
    files.add_argument("--true", metavar="T.nc", help="true data set with the same dims and variables (or the "
                       "data set whose samples --pred's 'sample' coordinate names, e.g. a run's pred.nc)")
    files.add_argument("--ignore-coords", action="store_true",
                       help="score even when --pred and --true lie on different coordinates (default: refuse)")
    runs = p.add_argument_group("a trained run")
    runs.add_argument("--run", metavar="RUN_DIR", action="append",
                      help="a training run directory; several (--run A --run B ...): scored together as an ensemble "
                           "(its mean's metrics, CRPS, spread-skill ratio) beside each member")
    runs.add_argument("--data", metavar="FILE", help="the data set to evaluate the run on (default: the run's own: "
                      "its file, or a --generate run's fixed set made again)")
    runs.add_argument("--samples", choices=SAMPLE_CHOICES, default="test",
                      help="which samples: the run's stored test split (default), its validation split (the one "
                           "that chose best.pt: not a test score), or every sample of the file (needed for a "
                           "file other than the run's own)")
    runs.add_argument("--steps", metavar="N", help="rollout steps of a window run (default: to the end)")
    add_run_options(runs)
    runs.add_argument("--target", nargs="+", metavar="VAR",
                      help="the file's variables standing in for the run's targets, in order")
    runs.add_argument("--out", metavar="DIR", help="folder of this evaluation (default: "
                      "RUN_DIR/evaluations/<file>-<samples>)")
    runs.add_argument("--overwrite", action="store_true", help="replace an earlier evaluation in that folder")
    runs.add_argument("--resolutions", type=_resolutions, metavar="N,N,...",
                      help="score a steady field run with its samples resampled to each of these points per axis "
                           "(cell averages, or Fourier resampling where N does not divide the file's), the model run "
                           "at that grid: one table and plot of error against resolution")
    boot, seed = defaults(EvalOptions)["bootstrap"], defaults(EvalOptions)["seed"]
    runs.add_argument("--bootstrap", type=int, default=boot, metavar="N",
                      help=f"resamples of the test samples for each metric's 95%% interval (default {boot}; 0: none)")
    runs.add_argument("--seed", type=int, default=seed, help=f"seed of the resamples (default {seed})")
    p.add_argument("--window", "--initial-step", type=int, default=0, metavar="N",
                   help="leading time frames that were model inputs, excluded from scoring (default 0; "
                        "--initial-step is PDEBench's name for it)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    p.add_argument("--all", action="store_true", help="print every metric of a run's evaluation (default: the "
                   "headline ones; all of them are in its metrics.md and metrics.json)")
    add_no_verify(p)
    add_storage_option(p)
    p.set_defaults(func=run)


def _check_mode(args: argparse.Namespace) -> str:
    files = (args.pred is not None, args.true is not None)
    runs = (args.run is not None, args.data is not None)
    if all(files) and not any(runs):
        if args.steps is not None:
            raise ValueError("--steps applies to --run/--data only; found it with --pred/--true")
        return "files"
    if runs[0] and not any(files):
        return "run"
    given = [f"--{n}" for n in ("pred", "true", "run", "data") if getattr(args, n) is not None]
    raise ValueError(f"expected exactly one of (--pred and --true) or (--run [and --data]); found {given or 'none'}")


def format_table(table: dict[str, float]) -> str:
    """Aligned ``name  value`` lines."""
    width = max(len(k) for k in table)
    return "\n".join(f"{name:<{width}}  {value:.6g}" for name, value in table.items())


def run(args: argparse.Namespace) -> int:
    use_storage_options(args)
    if _check_mode(args) == "run":
        if args.resolutions:
            return _run_resolutions(args)
        return _run(args) if len(args.run) == 1 else _run_ensemble(args)
    if args.window < 0:
        raise ValueError(f"--window: expected a non-negative integer, found {args.window}")
    for path in (args.pred, args.true):
        verify_data(path, skip=args.no_verify)
    pred, true = pde_data.open_source(args.pred).dataset, pde_data.open_source(args.true).dataset
    try:
        true = align(pred, true)
        if args.ignore_coords:
            shared = set(map(str, pred.coords)) & set(map(str, true.coords))
            pred = pred.assign_coords({name: true[name] for name in shared})
        else:
            check_coords(pred, true)
        table = summarize(pred, true, window=args.window)
    except ValueError as exc:
        raise ValueError(f"--pred {args.pred} / --true {args.true}: {exc}") from None
    if args.json:
        print(json.dumps(json_safe(table)))
    else:
        print(f"pred: {args.pred}\ntrue: {args.true}\nwindow: {args.window}")
        print(format_table(table))
    return 0


def add_run_options(group) -> None:
    """What ``evaluate --run`` and ``predict`` share: ``--input``, ``--checkpoint``, ``--batch-size``, ``--device``."""
    group.add_argument("--input", nargs="+", metavar="VAR",
                       help="the file's variables standing in for the run's inputs, in order (e.g. neuraloperator's "
                            "'input' for a run trained on 'a')")
    group.add_argument("--checkpoint", choices=("best", "last"), default="best",
                       help="best.pt (default: lowest validation score) or last.pt")
    batch = defaults(EvalOptions)["batch_size"]
    group.add_argument("--batch-size", default=batch, help=f"samples per batch (default {batch})")
    group.add_argument("--device", help="torch device of the model (default: cuda if available, else cpu)")
    add_threads_option(group)


def run_values(args: argparse.Namespace) -> dict:
    """``steps`` and ``batch_size`` of ``evaluate --run`` and ``predict``, converted and checked as the
    evaluation options' fields (:class:`~operators.training.tasks.EvalOptions`)."""
    return typed(EvalOptions, {"steps": args.steps, "batch_size": args.batch_size})


def _run(args: argparse.Namespace) -> int:
    """``--run RUN_DIR --data FILE``: an evaluation folder (metrics.json, pred.nc, plots), and the table."""
    from operators.training import evaluate_run

    if args.window:
        raise ValueError("--window applies to --pred/--true; a run's given frames are the run's own --window")
    (run,) = args.run
    values = _started(args)
    result = evaluate_run(run, args.data, samples=args.samples, checkpoint=args.checkpoint, out=args.out,
                          overwrite=args.overwrite, inputs=args.input, targets=args.target, device=args.device,
                          bootstrap=args.bootstrap, seed=args.seed, **values)
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"run: {run} ({args.checkpoint}.pt, epoch {result['epoch']})\n"
          f"data: {result['data']}: {result['scored']}, {result['n_samples']} samples")
    for key in ("warning", "note"):
        if key in result:
            print(f"{key}: {result[key]}")
    print(result_table(result, every=args.all))
    print(f"wrote {result['out']}: " + ", ".join(Path(f).name for f in result["files"]))
    return 0


def _started(args: argparse.Namespace) -> dict:
    """What every ``--run`` evaluation does first: the threads chosen and said, ``--steps``/``--batch-size`` checked
    (:func:`run_values`), and the data (``--data``, or the first run's own) verified against its manifest."""
    say(choose_threads(args.threads))
    values = run_values(args)
    verify_data(args.data if args.data is not None else _trained_path(args.run[0], args.checkpoint),
                skip=args.no_verify)
    return values


def _run_ensemble(args: argparse.Namespace) -> int:
    """``--run A --run B ...``: the runs scored together (:func:`operators.training.ensemble.evaluate_ensemble`)."""
    from operators.training.ensemble import evaluate_ensemble

    for option in ("input", "target"):
        if getattr(args, option):
            raise ValueError(f"--{option}: expected with one --run (an ensemble's members read their own "
                             f"variables), found it with {len(args.run)} runs")
    values = _started(args)
    result = evaluate_ensemble(args.run, args.data, samples=args.samples, checkpoint=args.checkpoint, out=args.out,
                               overwrite=args.overwrite, device=args.device, bootstrap=args.bootstrap,
                               seed=args.seed, **values)
    if args.json:
        print(json.dumps(result))
        return 0
    print(Path(result["out"], "metrics.md").read_text().rstrip())
    if "crps_interval" in result:
        low, high = result["crps_interval"]
        print(f"CRPS {round(100 * result['bootstrap']['level'])}% interval: {low:.4g}-{high:.4g}")
    print(f"wrote {result['out']}: metrics.json, metrics.md, members/")
    return 0


def _resolutions(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers separated by commas (16,32,64), found {text}")
    return values


def _run_resolutions(args: argparse.Namespace) -> int:
    """``--run R --resolutions 16,32,64``: :func:`operators.training.resolutions.evaluate_resolutions`."""
    from operators.training.resolutions import evaluate_resolutions

    if len(args.run) != 1 or args.input or args.target:
        raise ValueError(f"--resolutions: expected one --run without --input/--target, found {len(args.run)} runs"
                         + (" and variables named" if args.input or args.target else ""))
    values = _started(args)
    result = evaluate_resolutions(args.run[0], args.resolutions, args.data, samples=args.samples,
                                  checkpoint=args.checkpoint, out=args.out, overwrite=args.overwrite,
                                  device=args.device, bootstrap=args.bootstrap, seed=args.seed,
                                  batch_size=values["batch_size"])
    if args.json:
        print(json.dumps(result))
        return 0
    trained = max(result["training"].values(), default=None)
    base = next((r["metrics"]["rel_l2"] for r in result["rows"] if r["resolution"] == trained), None)
    print(f"run: {args.run[0]} (trained at {result['training']}); data: {result['data']} at {result['file']}")
    print("points  method        rel_l2 (interval)" + ("          / at the training grid" if base else ""))
    for row in result["rows"]:
        value, interval = row["metrics"]["rel_l2"], row.get("intervals", {}).get("rel_l2")
        shown = f"{value:.4g}" + (f" ({interval[0]:.3g}-{interval[1]:.3g})" if interval else "")
        mark = " (trained)" if row["resolution"] == trained else ""
        ratio = f"  {value / base:.3g}x" if base else ""
        print(f"{row['resolution']:>6}  {row['method']:<12}  {shown:<25}{ratio}{mark}")
    print(f"wrote {result['out']}: metrics.json, resolutions.png, one evaluation per resolution")
    return 0


def _trained_path(run_dir: str, checkpoint: str) -> str | None:
    """The data file the run ``run_dir`` trained on (None for a ``--generate`` run, or where its checkpoint
    cannot be read: :func:`~operators.training.evaluate_run` then says why)."""
    from operators.training import stored_spec

    try:
        return stored_spec(run_dir, checkpoint=checkpoint).data.path
    except (OSError, ValueError, KeyError):
        return None


def result_table(result: dict, *, every: bool = False) -> str:
    """The metric rows (:func:`~operators.training.tasks.report.metric_rows`): the headline ones unless ``every``,
    aligned, then where the others are and the result's warning (the table is often copied alone)."""
    lines = metric_rows(result, headline=not every)
    widths = [max(len(line[k]) for line in lines) for k in range(len(lines[0]))]
    table = ["  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip() for line in lines]
    hidden = len(metric_rows(result)) - len(lines)
    if hidden:
        table.append(f"({hidden} more metrics in {Path(result['out']) / 'metrics.md'} and metrics.json; --all prints "
                     "them)")
    if "warning" in result:
        table.append(f"({result['warning']})")
    return "\n".join(table + parameter_lines(result) + rollout_lines(result))


