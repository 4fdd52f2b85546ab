"""``train --config-file run.yaml``: the flags of a run as YAML, and the ``config.yaml`` every run writes.

A config file is a YAML mapping whose keys are ``train``'s flags without the dashes (``lr``,
``batch_size`` or ``batch-size``, ``config`` as a mapping of model settings, ``split`` as a list). Its
values go in as if they had been typed before the command line's own flags, so a flag given on the
command line wins. :func:`run_config` is what a run records: every setting that decides its result
(not ``--out``, ``--resume``/``--overwrite``, progress bars or threads), so that
``train --config-file runs/a/config.yaml --out runs/b`` trains run ``a`` again, to the same weights.

Example:
    >>> _expanded(["train", "--config-file", "runs/a/config.yaml", "--out", "runs/b"])
    ['train', '--data', 'ns.h5', '--model', 'fno', ..., '--out', 'runs/b']
"""

from __future__ import annotations

import argparse
from pathlib import Path

import yaml

__all__ = ["expand_config_file", "run_config", "CONFIG_FILE"]

CONFIG_FILE = "config.yaml"
#: ``train`` dests that do not decide a run's result, so a run's config.yaml leaves them out
_NOT_RECORDED = {"out", "resume", "overwrite", "no_progress", "threads", "config_file", "func", "explicit", "command",
                 "debug"}


def _tokens(key: str, value, flags: dict[str, argparse.Action]) -> list[str]:
    """The command-line tokens of one ``key: value`` of a config file."""
    dest = key.replace("-", "_")
    action = flags.get(dest)
    if action is None:
        raise ValueError(f"--config-file: expected keys among train's flags {sorted(flags)}, found {key!r}")
    flag = action.option_strings[-1]
    if isinstance(action, argparse._StoreTrueAction):  # argparse has no public type for flag actions
        if not isinstance(value, bool):
            raise ValueError(f"--config-file: {key}: expected true or false, found {value!r}")
        return [flag] if value else []
    if value is None:
        return []
    if dest == "config" and isinstance(value, dict):
        return [flag, *(f"{k}={v!r}" for k, v in value.items())] if value else []
    if dest == "split" and isinstance(value, list):
        return [f"{flag}={','.join(str(v) for v in value)}"]
    if isinstance(value, list):
        return [flag, *map(str, value)]
    return [f"{flag}={value}"]


def expand_config_file(argv: list[str], train: argparse.ArgumentParser) -> list[str]:
    """``argv`` with ``--config-file PATH`` replaced by the file's flags, placed before the others."""
    if "train" not in argv:
        return argv
    at = argv.index("train") + 1
    rest, path = [], None
    tokens = iter(argv[at:])
    for token in tokens:
        if token == "--config-file":
            path = next(tokens, None)
        elif token.startswith("--config-file="):
            path = token.split("=", 1)[1]
        else:
            rest.append(token)
    if path is None:
        return argv
    mapping = _load(Path(path))
    flags = {a.dest: a for a in train._actions if a.option_strings}  # argparse keeps no public list
    expanded = [t for key, value in mapping.items() for t in _tokens(key, value, flags)]
    return argv[:at] + expanded + rest


def _load(path: Path) -> dict:
    if not path.is_file():
        raise ValueError(f"--config-file: expected a YAML file, found no file at {path}")
    try:
        mapping = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ValueError(f"--config-file {path}: expected YAML, found a syntax error "
                         f"({str(exc).splitlines()[0]})") from None
    if not isinstance(mapping, dict):
        raise ValueError(f"--config-file {path}: expected a mapping of flag: value, found {type(mapping).__name__}")
    return mapping


def run_config(args: argparse.Namespace, model_config: dict) -> str:
    """The YAML text of a run's settings (see the module docstring), with the model settings as a mapping."""
    values = {k: v for k, v in vars(args).items() if k not in _NOT_RECORDED}
    values["config"] = {k: list(v) if isinstance(v, tuple) else v for k, v in model_config.items()}
    values["data"] = str(Path(values["data"]).resolve()) if values.get("data") else None
    return yaml.safe_dump(values, sort_keys=False)
