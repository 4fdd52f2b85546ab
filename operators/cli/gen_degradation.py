"""``circuitop generate degradation``: irregular degradation trajectories and their remaining useful life (NAC)."""

from __future__ import annotations

import argparse

import pde_data
import pde_data.generate.registry
from operators.cli._generation import add_common_options, positive_int, report_options, run_generation

__all__ = ["register", "spec"]


def register(problems: argparse._SubParsersAction) -> None:
    p = problems.add_parser("degradation", help="irregularly sampled health indicators -> remaining useful life "
                                                "(unequal lengths, padded; the NAC RUL task)")
    defaults = pde_data.generate.registry.KINDS["degradation"].defaults
    add_common_options(p, n_default=512, seed_default=pde_data.generate.registry.SEEDS["degradation"])
    p.add_argument("--min-length", type=positive_int, default=defaults["min_length"],
                   help="fewest observations per trajectory (default %(default)s)")
    p.add_argument("--max-length", type=positive_int, default=defaults["max_length"],
                   help="most observations per trajectory; every one is padded to it (default %(default)s)")
    p.set_defaults(func=run)
    report_options(p)


def spec(args: argparse.Namespace) -> pde_data.GenerationSpec:
    """The set the options describe."""
    return pde_data.GenerationSpec("degradation", args.n, args.seed,
                                   {"min_length": args.min_length, "max_length": args.max_length})


def run(args: argparse.Namespace) -> int:
    return run_generation(spec(args), args)
