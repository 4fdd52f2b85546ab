"""``circuitop generate PROBLEM ...``: one module ``operators/cli/gen_<problem>.py`` per problem.

Each problem module exposes ``register(problems)`` adding its own sub-parser.
"""

from __future__ import annotations

import argparse
import importlib

_PROBLEMS = ("order", "poisson", "darcy", "ns", "swe", "degradation", "digits")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("generate", help="generate a benchmark data set (PDE fields or sequences)")
    problems = p.add_subparsers(dest="problem", required=True, metavar="PROBLEM")
    for name in _PROBLEMS:
        importlib.import_module(f"operators.cli.gen_{name}").register(problems)
