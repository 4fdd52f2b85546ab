"""The ``circuitop`` command: one module per subcommand, each exposing ``register(subparsers)``.

Errors from a subcommand print one line (``circuitop CMD: error: ...``) and exit 1; ``--debug``
shows the traceback instead.
"""

from __future__ import annotations

import argparse
import importlib
import re
import sys

__all__ = ["main", "build_parser", "message"]

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


def message(exc: BaseException) -> str:
    """The one line of an error, where the spec fields the library names (``optim.lr``, or a plain parameter
    that starts a :class:`~operators.training.SpecError`) become the options that set them (``--lr``)."""
    from operators.cli.train import OPTIONS, option_of

    field = getattr(exc, "field", None)
    field = _PARAMETERS.get(field, field)
    text = f"{option_of(field)}: {exc.message}" if field is not None else str(exc) or type(exc).__name__
    text = _CHOICE_VALUE.sub(lambda m: f"--{m.group(1)} {m.group(2)}", text)
    text = re.sub(r"(?<![\w.])model\.config\.(\w+)", r"--config \1", text)
    for option, (path, _, _) in sorted(OPTIONS.items(), key=lambda item: -len(item[1][0])):
        text = re.sub(rf"(?<![\w.]){re.escape(path)}(?![\w])", option, text)
    return _FLAG_VALUE.sub(lambda m: "--" + m.group(1).replace("_", "-"), text)


#: the boolean parameters the library suggests (``pass overwrite=True``) that are flags on the command line
_FLAG_VALUE = re.compile(r"\b(resume|overwrite)=True\b")
#: a choice the library suggests (``samples='val'``) as the option and value that make it
_CHOICE_VALUE = re.compile(r"\b(samples)='(\w+)'")
#: parameters of ``evaluate_run``/``predict_run`` whose options are named after the train options they mirror
_PARAMETERS = {"inputs": "data.inputs", "targets": "data.targets"}


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
        print(f"circuitop {args.command}: error: {message(exc)} (--debug for the traceback)", file=sys.stderr)
        return 1
