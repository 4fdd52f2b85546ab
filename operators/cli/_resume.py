"""``train --resume``: the stored settings win; a flag given on the command line that disagrees with
them is an error naming the flag and the stored value. Only ``--epochs`` may change (upwards);
how data is loaded (``--cache``, ``--workers``, ...), the device and progress bars never change results
and may differ freely.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from operators.training.trainer import TrainConfig

__all__ = ["check_resume"]


def _stored_values(state: dict) -> dict[str, object]:
    """``dest -> value`` of the settings a checkpoint stores, in the form the parser produces."""
    meta, train = state["meta"], state["train_config"]
    data, splits = meta["data"], meta["data"]["splits"]
    windowed = data["kind"] == "window"
    values = {"model": meta["model"]["name"], "input": list(data["inputs"]),
              "target": None if windowed else list(data["targets"]), "window": data["m"] if windowed else None,
              "unroll": data["horizon"], "split": [len(splits[k]) for k in ("train", "val", "test")],
              "split_seed": data["split_seed"], "normalize": data["normalize"] or "none",
              "scheduler": train["scheduler"]}
    for key in ("batch_size", "lr", "weight_decay", "optimizer", "step_size", "gamma", "loss", "grad_clip", "amp",
                "seed", "pushforward"):
        values[key] = train[key]
    for key in ("label_smoothing", "shift"):  # absent from runs trained before classification existed
        values[key] = train.get(key, getattr(TrainConfig, key))
    return values


def _flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def check_resume(args: argparse.Namespace, explicit: set[str], state: dict, config: dict, out: Path) -> None:
    """Raise ``ValueError`` for the first explicitly given flag that disagrees with the stored run ``state``.

    Args:
        args: the parsed ``train`` arguments. explicit: the dests given on the command line.
        state: ``RUN_DIR/last.pt`` as loaded. config: the parsed ``--config`` values.
    """
    stored = _stored_values(state)
    for dest in sorted(explicit & set(stored)):
        given = getattr(args, dest)
        if given != stored[dest]:
            raise ValueError(f"{_flag(dest)}: --resume continues {out} with its stored value {stored[dest]!r}; "
                             f"found {given!r} (drop the flag, or train into a new --out)")
    model_config = state["meta"]["model"]["config"]
    for key, value in config.items():
        if model_config.get(key, value) != value or key not in model_config:
            raise ValueError(f"--config {key}: --resume continues {out} with its stored value "
                             f"{model_config.get(key)!r}; found {value!r}")
    if args.epochs is not None and args.epochs < state["epoch"]:
        raise ValueError(f"--epochs: expected at least the {state['epoch']} epochs {out} has trained, "
                         f"found {args.epochs}")
