"""The ``circuitop`` command: one module per subcommand, each exposing ``register(subparsers)``.

Errors from a subcommand print one line (``circuitop CMD: error: ...``) and exit 1; ``--debug``
shows the traceback instead.
"""

from __future__ import annotations

import argparse
import importlib
import re
import sys

from operators.cli._config_file import expand_config_file

__all__ = ["main", "build_parser", "explicit_dests"]

_SUBCOMMANDS = ("generate", "train", "evaluate", "bench", "info", "build")


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every subcommand registered."""
    parser = argparse.ArgumentParser(
        prog="circuitop",
        description="Continuous-time neural cells as neural operators: generate PDE data, train, evaluate, benchmark.",
    )
    parser.add_argument("--debug", action="store_true", help="show full tracebacks on errors")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in _SUBCOMMANDS:
        importlib.import_module(f"operators.cli.{name}").register(sub)
    return parser


def explicit_dests(argv: list[str] | None) -> set[str]:
    """The argument dests that ``argv`` gives explicitly (not left at their defaults).

    The command line is parsed again with every subcommand default suppressed, so only what was
    given ends up in the namespace (argparse keeps no public list of a parser's actions: ``_actions``).
    """
    parser = build_parser()
    for sub in _subparsers(parser).choices.values():
        for action in sub._actions:
            action.default = argparse.SUPPRESS
    return set(vars(parser.parse_args(argv))) - {"func", "command", "debug"}


def _subparsers(parser: argparse.ArgumentParser) -> argparse._SubParsersAction:
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))


def _subparser(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    return _subparsers(parser).choices[name]


#: a negative number as a command-line value (argparse would take ``-1e-3`` for an option)
_NEGATIVE = re.compile(r"^-(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$|^-(inf|nan)$", re.IGNORECASE)


def _negative_values_joined(argv: list[str]) -> list[str]:
    """``["--visc", "-1e-3"]`` → ``["--visc=-1e-3"]``, so a negative value reaches the check that explains
    why it is wrong instead of argparse's "expected one argument"."""
    out: list[str] = []
    for token in argv:
        if out and _NEGATIVE.match(token) and out[-1].startswith("--") and "=" not in out[-1]:
            out[-1] = f"{out[-1]}={token}"
        else:
            out.append(token)
    return out


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script; returns the exit status."""
    argv = _negative_values_joined(sys.argv[1:] if argv is None else [str(a) for a in argv])
    parser = build_parser()
    try:
        argv = expand_config_file(argv, _subparser(parser, "train"))
    except ValueError as exc:
        print(f"circuitop train: error: {exc}", file=sys.stderr)
        return 2
    args = parser.parse_args(argv)
    args.explicit = explicit_dests(argv)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt as exc:  # a command may say what was kept and how to go on
        print(f"circuitop {args.command}: interrupted{f'; {exc}' if str(exc) else ''}", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - the CLI's one place that turns errors into messages
        if args.debug:
            raise
        message = str(exc) or type(exc).__name__
        print(f"circuitop {args.command}: error: {message} (--debug for the traceback)", file=sys.stderr)
        return 1
