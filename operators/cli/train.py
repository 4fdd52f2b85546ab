"""``circuitop train --data FILE --model NAME --out RUN_DIR``: train a neural operator on a data file.

Steady problems pick variables with ``--input``/``--target`` (e.g. Darcy ``--input a --target u``);
an integer target of dims ``(sample,)`` makes a classification run (images → class, cross-entropy,
top-1/top-5; e.g. ``--model chonn_vision --config size=cpu``);
time-dependent data trains ``m`` frames → next frame with ``--window m`` (``--unroll k`` trains on
``k``-step rollouts). Model sizes go in ``--config KEY=VALUE`` (e.g. ``--config width=20 n_modes=12``).
Works under ``torchrun`` (DDP). ``--resume`` continues ``RUN_DIR/last.pt`` to the same result as an
uninterrupted run.
"""

from __future__ import annotations

import argparse
import ast
import os
import sys
from pathlib import Path

import torch

__all__ = ["register", "run", "parse_config"]


def parse_config(items: list[str] | None) -> dict:
    """``["width=20", "n_modes=(12,12)"]`` → ``{"width": 20, "n_modes": (12, 12)}`` (literals only)."""
    config = {}
    for item in items or []:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--config: expected KEY=VALUE, found {item!r}")
        try:
            config[key] = ast.literal_eval(text)
        except (ValueError, SyntaxError):
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


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train", help="train a neural operator on a data file (NetCDF or PDEBench HDF5)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config-file", metavar="YAML", help="flags as YAML (keys: flag names, e.g. a run's "
                   "config.yaml); flags on the command line win")
    p.add_argument("--data", required=True, help="NetCDF file, shard glob or PDEBench .h5/.hdf5 file")
    p.add_argument("--model", help="backbone: fno, chonn_fno, nac_fno, unet, chonn_unet, nac_unet, ckb_chain, "
                   "depth_stack, ckb_stack; image classifiers chonn_vision, conv_vision (required unless --resume)")
    p.add_argument("--out", required=True, help="run folder (checkpoints, history.json, run.json)")
    p.add_argument("--config", nargs="*", metavar="KEY=VALUE", help="model config values")
    p.add_argument("--input", nargs="+", help="input variables (steady) or the variables (time windows)")
    p.add_argument("--target", nargs="+", help="target variables (steady)")
    p.add_argument("--window", type=int, help="time-dependent: m given frames -> next frame")
    p.add_argument("--unroll", type=int, default=1, help="train on k-step rollouts (default 1)")
    p.add_argument("--pushforward", action="store_true", help="back-propagate the last unrolled step only")
    p.add_argument("--split", type=_sizes, metavar="TRAIN,VAL,TEST", help="split sizes (default 80/10/10 %%)")
    p.add_argument("--split-seed", type=int, default=0)
    p.add_argument("--normalize", choices=["gaussian", "minmax", "none"], default="gaussian")
    _optimisation_options(p)
    _loader_options(p)
    p.add_argument("--resume", action="store_true",
                   help="continue RUN_DIR/last.pt with its stored settings (only --epochs may be raised)")
    p.add_argument("--overwrite", action="store_true", help="replace the run in RUN_DIR (default: refuse)")
    p.add_argument("--device", help="torch device (default: cuda:LOCAL_RANK if available, else cpu)")
    p.add_argument("--threads", type=int, help="torch CPU threads per process")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.set_defaults(func=run)


def _loader_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("data loading (never changes the results)")
    g.add_argument("--cache", choices=["auto", "memory", "stream"], default="auto",
                   help="stream from the file, read the train/val samples into memory once, or cache when they "
                        "fit --memory-budget (default auto)")
    g.add_argument("--workers", type=int, metavar="N",
                   help="loader processes when streaming (default min(4, cores))")
    g.add_argument("--prefetch", type=int, default=2, metavar="N", help="batches each worker reads ahead (default 2)")
    g.add_argument("--memory-budget", type=float, default=2.0, metavar="GB",
                   help="GiB the auto cache may use (default 2)")


def _optimisation_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--epochs", type=int, help="epochs to train in all (default 10; with --resume: the stored number)")
    p.add_argument("--batch-size", type=int, default=20, help="global batch size (split over processes)")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--weight-decay", type=float, default=1e-4)
    p.add_argument("--optimizer", choices=["adam", "adamw"], default="adamw")
    p.add_argument("--scheduler", choices=["step", "cosine", "none"], default="step")
    p.add_argument("--step-size", type=int, default=100, help="StepLR step in epochs")
    p.add_argument("--gamma", type=float, default=0.5, help="StepLR decay")
    p.add_argument("--loss", choices=["auto", "rel_l2", "rel_l1", "cross_entropy"], default="auto",
                   help="auto (default): cross_entropy when the target is a class label, else rel_l2")
    p.add_argument("--label-smoothing", type=float, default=0.0, help="classification: cross-entropy label smoothing")
    p.add_argument("--shift", type=int, default=0, metavar="PIXELS",
                   help="classification: random translations of the training images by up to PIXELS per axis")
    p.add_argument("--grad-clip", type=float, help="clip the gradient norm to this value")
    p.add_argument("--amp", action="store_true", help="bfloat16 autocast on GPU")
    p.add_argument("--seed", type=int, default=0)


def run(args: argparse.Namespace) -> int:
    from operators.training import TrainConfig  # heavy imports only when training

    if args.threads:
        torch.set_num_threads(args.threads)
    from operators.models import MODELS

    if not args.resume and args.model not in MODELS:
        found = "none" if args.model is None else repr(args.model)
        raise ValueError(f"--model: expected one of {', '.join(sorted(MODELS))}; found {found}")
    if args.epochs is not None and args.epochs < 1:
        raise ValueError(f"--epochs: expected a positive number of epochs, found {args.epochs}")
    model_config = parse_config(args.config)
    stored_epochs = _check_resume(args, model_config) if args.resume else 10
    config = TrainConfig(
        epochs=stored_epochs if args.epochs is None else args.epochs, batch_size=args.batch_size, lr=args.lr,
        weight_decay=args.weight_decay,
        optimizer=args.optimizer, scheduler=args.scheduler, step_size=args.step_size, gamma=args.gamma,
        loss=args.loss, label_smoothing=args.label_smoothing, shift=args.shift, grad_clip=args.grad_clip, amp=args.amp, seed=args.seed, pushforward=args.pushforward,
        progress=not args.no_progress,
    )
    args.epochs = config.epochs
    try:
        history = _train(args, model_config, config)
    except KeyboardInterrupt:
        raise KeyboardInterrupt(_interrupt_hint(Path(args.out))) from None
    if history and os.environ.get("RANK", "0") == "0":
        written = sorted(str(p) for p in Path(args.out).iterdir() if p.is_file() and not p.name.startswith("."))
        print(f"trained {history[-1]['epoch']} epochs into {args.out}; wrote {', '.join(written)}", file=sys.stderr)
    return 0


def _train(args: argparse.Namespace, model_config: dict, config) -> list[dict]:
    from operators.cli._config_file import CONFIG_FILE, run_config
    from operators.training import LoaderConfig, train_run

    files = {} if args.resume else {CONFIG_FILE: run_config(args, model_config)}
    return train_run(
        args.data, args.model, args.out, model_config=model_config, train_config=config,
        inputs=args.input, targets=args.target, window=args.window, horizon=args.unroll, sizes=args.split,
        split_seed=args.split_seed, normalize=None if args.normalize == "none" else args.normalize,
        resume=args.resume, overwrite=args.overwrite, device=args.device, files=files,
        loader=LoaderConfig(cache=args.cache, workers=args.workers, prefetch=args.prefetch,
                            memory_budget=int(args.memory_budget * 2**30)),
    )


def _interrupt_hint(out: Path) -> str:
    if (out / "last.pt").is_file():
        return (f"the last finished epoch is kept in {out / 'last.pt'}: run the same command with --resume "
                "(and without --overwrite) to continue")
    return "no epoch had finished, so nothing was kept"


def _check_resume(args: argparse.Namespace, model_config: dict) -> int:
    """Refuse flags that disagree with the run being resumed (see :mod:`operators.cli._resume`); returns
    the run's stored number of epochs."""
    from operators.cli._resume import check_resume
    from operators.training import load_checkpoint

    last = Path(args.out) / "last.pt"
    if not last.is_file():
        raise ValueError(f"--resume: expected {last} from an earlier run, found none")
    state = load_checkpoint(last)
    check_resume(args, getattr(args, "explicit", set()), state, model_config, Path(args.out))
    return int(state["train_config"]["epochs"])
