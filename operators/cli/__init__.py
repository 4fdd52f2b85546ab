"""The ``circuitop`` command: one module per subcommand, each exposing ``register(subparsers)``.

Errors from a subcommand print one line (``circuitop CMD: error: ...``) and exit 1; ``--debug``
shows the traceback instead.
"""

from __future__ import annotations

import argparse
import atexit
import importlib
import os
import re
import sys
import threading
from typing import Callable, NoReturn

__all__ = ["main", "run", "build_parser", "message"]

_SUBCOMMANDS = ("generate", "train", "evaluate", "predict", "bench", "info", "build")


class _Parser(argparse.ArgumentParser):
    """argparse's parser whose usage errors are one line, like every other error of the command (argparse
    prints the whole usage first); subcommand parsers inherit it."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (--help for usage)\n")


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every subcommand registered."""
    parser = _Parser(
        prog="circuitop",
        description="Continuous-time neural cells as neural operators: generate PDE data, train, evaluate, benchmark.",
    )
    parser.add_argument("--debug", action="store_true", help="show full tracebacks on errors")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in _SUBCOMMANDS:
        importlib.import_module(f"operators.cli.{name}").register(sub)
    return parser


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


def message(exc: BaseException, names: Callable[..., str] | None = None) -> str:
    """The one line of an error. An error that names parameters as data (a
    :class:`~pde_data.core.params.ParameterError`, or any :class:`~pde_data.core.params.Mentions`) is told with
    the options that set them: ``names(path[, value])``, by default :func:`operators.cli.train.option_of` (a
    subcommand may give its own table: ``option_names``)."""
    from operators.cli.train import option_of
    from pde_data.core.params import Mentions

    if isinstance(exc, Mentions):
        return exc.describe(names or option_of)
    return str(exc) or type(exc).__name__


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script; returns the exit status."""
    argv = _negative_values_joined(sys.argv[1:] if argv is None else [str(a) for a in argv])
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt as exc:  # a command may say what was kept and how to go on
        print(f"circuitop {args.command}: interrupted{f'; {exc}' if str(exc) else ''}", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - the CLI's one place that turns errors into messages
        if args.debug:
            raise
        text = message(exc, getattr(args, "option_names", None))
        print(f"circuitop {args.command}: error: {text} (--debug for the traceback)", file=sys.stderr)
        return 1


def run() -> NoReturn:
    """The console script and ``python -m operators.cli``: :func:`main`, then :func:`exit_now` with its status."""
    try:
        status = main()
    except SystemExit as exc:  # argparse's usage errors and --help
        status = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
    exit_now(status)


def exit_now(status: int) -> NoReturn:
    """End the process with ``status`` once the command's work is done, without the interpreter's teardown.

    What the interpreter does first at exit is done here too: ``threading._shutdown`` (the threads' own exit
    hooks, which stop executors' workers, then the threads that are not daemons joined), the ``atexit``
    handlers (loader workers, logging, TensorBoard) and the output flushed. What is skipped is freeing torch's,
    xarray's and matplotlib's modules object by object, which took seconds after a training run had written
    everything (RESULTS.md, the bench section: bench_trainer's whole processes). Without CPython's
    ``threading._shutdown`` the interpreter's own exit runs."""
    shutdown = getattr(threading, "_shutdown", None)
    if shutdown is None:
        sys.exit(status)
    shutdown()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: nothing more can be said
            pass
    os._exit(status)
