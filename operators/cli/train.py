"""``circuitop train --data FILE --model NAME --out RUN_DIR``: train a model on a data file.

The task comes from the data: fields → fields (``--input a --target u``), ``--window M`` given frames →
the next ``--horizon K`` frames (time-dependent fields), images → an integer label (classification),
sequences ``(sample, time[, feature])`` → a per-sequence or per-step target (e.g. ``--target rul``).
Model sizes go in ``--config KEY=VALUE`` (e.g. ``--config width=20 n_modes=12``). ``--generate ns --gen
n_sim=64 --samples-per-epoch 64`` (instead of ``--data``) trains on new samples a generator makes each epoch,
with no files (``operators.training.online``). Works under
``torchrun`` (DDP). ``--resume`` continues ``RUN_DIR/last.pt`` to the same result as an uninterrupted run.
A generated set's shards are checked against their manifest first (``operators.cli._verified``; ``--no-verify``).

Every option sets one field of the run's spec (``operators.training.RunSpec``); ``--config-file`` reads a
whole spec (a run's ``config.yaml``), and options given with it win.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import yaml

from operators.cli._verified import add_no_verify, verify_data
from operators.cli._remote import add_storage_option, use_storage_options
from operators.threads import add_threads_option
from pde_data.core.params import BARE, library_name

__all__ = ["register", "run", "parse_config", "OPTIONS", "option_of", "with_value"]


def parse_config(items: list[str] | None, option: str = "--config") -> dict:
    """``["width=20", "n_modes=(12,12)"]`` → ``{"width": "20", "n_modes": "(12,12)"}``: the text of each value,
    which the model's (the generator's) config fields convert (:func:`pde_data.core.params.typed`)."""
    config = {}
    for item in items or []:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise ValueError(f"{option}: expected KEY=VALUE, found {item!r}")
        config[key] = text
    return config


def _sizes(text: str) -> list[int]:
    try:
        sizes = [int(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected TRAIN,VAL,TEST integers, found {text!r}") from None
    if len(sizes) != 3:
        raise argparse.ArgumentTypeError(f"expected three sizes TRAIN,VAL,TEST, found {text!r}")
    return sizes


def _seeds(text: str) -> list[int]:
    try:
        return [int(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected TRAIN,EVAL integer seeds, found {text!r}") from None


_FLAG = dict(action="store_true")


def _choices(field: str, *, none: str | None = None) -> dict:
    """argparse ``choices`` of a field the spec checks (:func:`operators.training.spec.choices_of`)."""
    from operators.training.spec import choices_of

    return dict(choices=[none if c is None else c for c in choices_of(field) if c is not None or none])

#: option -> (spec field, argparse settings, help); the one table between the command line and a RunSpec
OPTIONS: dict[str, tuple[str, dict, str]] = {
    "--data": ("data.path", {}, "NetCDF file, shard glob, PDEBench/The Well HDF5, neuraloperator .pt or FNO .mat"),
    "--generate": ("data.generate", dict(metavar="GENERATOR"), "train on samples this generator (ns, swe, darcy, poisson, "
                   "order: as `circuitop generate`) makes as it goes, on the training device, with no files (a first "
                   "try: --generate ns --gen n_sim=64 n_out=32 t_final=5 --samples-per-epoch 32 --window 1; the "
                   "first epoch's cost is said before training)"),
    "--gen": ("data.generator", dict(nargs="+", action="extend", metavar="KEY=VALUE"),
              "--generate: a generator parameter (repeatable), e.g. --gen n_sim=64 --gen t_final=5"),
    "--samples-per-epoch": ("data.samples_per_epoch", dict(type=int, metavar="N"),
                            "--generate: new samples each epoch trains on (epoch e: samples [e*N, (e+1)*N))"),
    "--generate-seeds": ("data.generate_seeds", dict(type=_seeds, metavar="TRAIN,EVAL"),
                         "--generate: seeds of the training stream and of the fixed validation/test set "
                         "(made once; --data FILE gives one instead)"),
    "--input": ("data.inputs", dict(nargs="+"), "input variables (window runs: the variables)"),
    "--target": ("data.targets", dict(nargs="+"), "target variables (a label: classification)"),
    "--condition": ("data.condition", dict(nargs="+", action="extend", metavar="PARAMETER"),
                    "condition the model on these per-sample PDE parameters (`circuitop info FILE` lists a file's), "
                    "e.g. --condition beta; field models"),
    "--split": ("data.split", dict(type=_sizes, metavar="TRAIN,VAL,TEST"), "split sizes (default 80/10/10 %%)"),
    "--split-seed": ("data.split_seed", dict(type=int), "seed of the split"),
    "--split-by": ("data.split_by", dict(metavar="PARAMETER"),
                   "test on held-out values of this parameter: every sample of a tenth of its values (at least one; "
                   "never its smallest or largest), drawn with --split-seed; the rest split 90/10 into train/val"),
    "--normalize": ("data.normalize", _choices("data.normalize", none="none"), "normalization"),
    "--task": ("task.kind", _choices("task.kind"), "the task (default: from the data)"),
    "--window": ("task.window", dict(type=int, metavar="M"), "time-dependent: M given frames"),
    "--horizon": ("task.horizon", dict(type=int, metavar="K"), "frames predicted (rolled out) per training window"),
    "--pushforward": ("task.pushforward", _FLAG, "back-propagate the last step of the horizon only"),
    "--loss": ("task.loss", _choices("task.loss"),
               "auto: the task's own (rel_l2 for fields, cross_entropy for labels, mse for sequences); "
               "h1: fields' relative H1 error (values and gradients)"),
    "--periodic": ("task.periodic", _FLAG, "field runs: the grid wraps around (Navier-Stokes on a torus): --loss h1 "
                   "takes spectral gradients (default: finite differences), a Fourier model's field is not padded "
                   "(default: padded, a quarter of each axis per side; --config padding=F sets it)"),
    "--label-smoothing": ("task.label_smoothing", dict(type=float), "classification: cross-entropy label smoothing"),
    "--shift": ("task.shift", dict(type=int, metavar="PIXELS"), "classification: random shifts of training images"),
    "--model": ("model.name", {}, "fields: fno, chonn_fno, nac_fno, unet, chonn_unet, nac_unet, ckb_chain, depth_stack, ckb_stack; "
                "images: chonn_vision, conv_vision; sequences: ltc, cfc, pdna, nac, ckb_seq, gru, attention"),
    "--config": ("model.config", dict(nargs="*", metavar="KEY=VALUE"), "model config values"),
    "--force": ("model.force", _FLAG, "keep a model config the training grid cannot use (Fourier modes above N/2 "
                "per axis: never trained, they only add parameters)"),
    "--epochs": ("optim.epochs", dict(type=int), "epochs to train in all"),
    "--batch-size": ("optim.batch_size", dict(type=int), "global batch size (split over processes)"),
    "--lr": ("optim.lr", dict(type=float), "learning rate"),
    "--weight-decay": ("optim.weight_decay", dict(type=float), "weight decay"),
    "--optimizer": ("optim.optimizer", _choices("optim.optimizer"), "optimizer"),
    "--scheduler": ("optim.scheduler", _choices("optim.scheduler"),
                    "learning-rate schedule (plateau: decay when the validation score stalls)"),
    "--step-size": ("optim.step_size", dict(type=int), "StepLR step in epochs"),
    "--gamma": ("optim.gamma", dict(type=float), "learning-rate decay factor of step and plateau"),
    "--warmup": ("optim.warmup", dict(type=int, metavar="N"), "raise the learning rate linearly over the first N "
                 "epochs, then follow the schedule"),
    "--plateau-patience": ("optim.plateau_patience", dict(type=int, metavar="N"),
                           "plateau: decay after N epochs without a better validation score"),
    "--patience": ("optim.patience", dict(type=int, metavar="N"),
                   "stop after N epochs without a better validation score (default: never)"),
    "--grad-clip": ("optim.grad_clip", dict(type=float), "clip the gradient norm to this value"),
    "--amp": ("optim.amp", _FLAG, "bfloat16 autocast on GPU"),
    "--compile": ("optim.compile", _FLAG, "run the model under torch.compile (faster steps for some models, "
                  "after minutes of compiling; `circuitop bench models` says which)"),
    "--seed": ("optim.seed", dict(type=int), "training seed (initialisation, batch order)"),
    "--ema": ("optim.ema", dict(type=float, metavar="DECAY"), "keep an exponential moving average of the weights "
              "(e.g. 0.999), used to validate, choose best.pt, evaluate and predict"),
    "--noise": ("optim.noise", dict(type=float, metavar="SIGMA"), "add gaussian noise of this standard deviation to "
                "the normalized inputs of every training step (stabler rollouts)"),
    "--cache": ("loading.cache", _choices("loading.cache"),
                "stream from the file, read train/val into memory once, or cache when they fit --memory-budget"),
    "--workers": ("loading.workers", dict(type=int, metavar="N"), "loader processes when streaming (default min(4, cores))"),
    "--prefetch": ("loading.prefetch", dict(type=int, metavar="N"), "batches each worker reads ahead"),
    "--memory-budget": ("loading.memory_budget", dict(type=float, metavar="GB"), "GiB the auto cache may use"),
}
_BY_FIELD = {field: option for option, (field, _, _) in OPTIONS.items()}


#: the parameters of the run API (``train_run``, ``evaluate_run``, ``predict_run``) that options set
_PARAMETERS = {"run_dir": "--run", "inputs": "--input", "targets": "--target", "checkpoint": "--checkpoint",
               "steps": "--steps", "batch_size": "--batch-size", "samples": "--samples", "device": "--device",
               "out": "--out", "resume": "--resume", "overwrite": "--overwrite"}
#: mappings whose keys are set by ``OPTION KEY=VALUE``
_MAPPINGS = ("model.config", "data.generator")
_KEYED = {f"{field}.": _BY_FIELD[field] for field in _MAPPINGS}


def option_of(field: str, value: object = BARE) -> str:
    """The option that sets spec field ``field`` (``model.config.width``: ``--config width``), or the run API's
    parameter ``field`` (``steps``: ``--steps``), with ``value`` as it is given on the command line (``--loss
    h1``, ``--overwrite``, ``--gen batch_size=4``); a parameter no option sets is named as the library names it."""
    keyed = next((f"{o} {field.removeprefix(p)}" for p, o in _KEYED.items() if field.startswith(p)), None)
    if keyed is not None:
        return keyed if value is BARE else f"{keyed}={value}"
    option = _BY_FIELD.get(field) or _PARAMETERS.get(field)
    return library_name(field, value) if option is None else with_value(option, value)


def with_value(option: str, value: object = BARE) -> str:
    """``option`` given ``value``: a flag alone (``--overwrite``), text after a space, a number after ``=``."""
    if value is BARE or value is True:
        return option
    return f"{option} {value}" if isinstance(value, str) else f"{option}={value}"


def _shown_default(field: str) -> str:
    from operators.training.spec import RunSpec

    value = RunSpec().get(field)
    if field == "loading.memory_budget":
        value = value / 2**30
    return "" if value in (None, (), {}, False) else f" (default {value})"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train", help="train a model on a data file", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter, argument_default=argparse.SUPPRESS)
    p.add_argument("--config-file", metavar="YAML", help="a run spec as YAML (a run's config.yaml); options win")
    p.add_argument("--out", required=True, help="run folder (checkpoints, config.yaml, run.json, metrics)")
    for option, (field, settings, text) in OPTIONS.items():
        p.add_argument(option, dest=field, help=text + _shown_default(field), **settings)
    p.add_argument("--resume", action="store_true", default=False,
                   help="continue RUN_DIR/last.pt with its stored spec (only epochs, patience and loading may change)")
    p.add_argument("--overwrite", action="store_true", default=False, help="replace the run in RUN_DIR")
    p.add_argument("--device", default=None, help="torch device (default: cuda:LOCAL_RANK if available, else cpu)")
    add_threads_option(p)
    p.add_argument("--no-progress", action="store_true", default=False, help="no progress bars")
    add_no_verify(p)
    add_storage_option(p)
    p.set_defaults(func=run)


def _overrides(args: argparse.Namespace) -> dict:
    """``{spec field: value}`` of the options given on the command line."""
    values = {field: getattr(args, field) for field in _BY_FIELD if field in vars(args)}
    for field in _MAPPINGS:
        if field in values:
            values[field] = parse_config(values[field], _BY_FIELD[field])
    if values.get("data.normalize") == "none":
        values["data.normalize"] = None
    if "loading.memory_budget" in values:
        budget = values["loading.memory_budget"]
        if budget < 0:
            raise ValueError(f"--memory-budget: expected a size in GiB >= 0, found {budget}")
        values["loading.memory_budget"] = int(budget * 2**30)
    return values


def _base(args: argparse.Namespace):
    """The spec the options apply to: the resumed run's, a config file's, or the defaults."""
    from operators.training import RunSpec, stored_spec

    path = getattr(args, "config_file", None)
    if args.resume:
        if path:
            raise ValueError("--config-file: expected none with --resume (the run's stored spec is used), found one")
        last = Path(args.out) / "last.pt"
        if not last.is_file():
            raise ValueError(f"--resume: expected {last} from an earlier run, found none")
        return stored_spec(args.out)
    if not path:
        return RunSpec()
    if not Path(path).is_file():
        raise ValueError(f"--config-file: expected a YAML file, found no file at {path}")
    try:
        state = yaml.safe_load(Path(path).read_text())
    except yaml.YAMLError as exc:
        raise ValueError(f"--config-file {path}: expected YAML, found a syntax error ({str(exc).splitlines()[0]})") from None
    return RunSpec.from_dict(state)


def run(args: argparse.Namespace) -> int:
    from operators.training import train_run  # heavy imports only when training

    base, overrides = _base(args), _overrides(args)
    for field in _MAPPINGS:  # --config, --gen set keys of the base's mapping (a config file's, a resumed run's)
        if field in overrides:
            overrides[field] = {**base.get(field), **overrides[field]}
    storage = use_storage_options(args)
    if storage:
        overrides["data.storage"] = {**base.data.storage, **storage}
    spec = base.override(overrides)
    verify_data(spec.data.path, skip=args.no_verify)  # a generated set's shards, before the model is built
    try:
        history = train_run(spec, args.out, resume=args.resume, overwrite=args.overwrite, device=args.device,
                            progress=not args.no_progress, threads=args.threads)
    except KeyboardInterrupt:
        raise KeyboardInterrupt(_interrupt_hint(Path(args.out))) from None
    if history and os.environ.get("RANK", "0") == "0":
        written = sorted(str(p) for p in Path(args.out).iterdir() if p.is_file() and not p.name.startswith("."))
        print(f"trained {history[-1]['epoch']} epochs into {args.out}; wrote {', '.join(written)}", file=sys.stderr)
    return 0


def _interrupt_hint(out: Path) -> str:
    if (out / "last.pt").is_file():
        return (f"the last finished epoch is kept in {out / 'last.pt'}: run the same command with --resume "
                "(and without --overwrite) to continue")
    return "no epoch had finished, so nothing was kept"
