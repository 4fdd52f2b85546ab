"""``circuitop generate darcy``: Darcy pairs a → u on cell centres (CHONN, Eqs. 51-53; PDEBench beta)."""

from __future__ import annotations

import argparse

import pde_data
import pde_data.generate.registry
from operators.cli._generation import add_common_options, positive_float, positive_int, report_options, run_generation

__all__ = ["register", "spec"]


def register(problems: argparse._SubParsersAction) -> None:
    p = problems.add_parser("darcy", help="Darcy flow -div(a grad u) = beta, PDEBench coefficients (CHONN Eqs. 51-53)",
                            description="Darcy pairs a -> u. The defaults take about 1.5 min on 2 CPU cores; "
                                        "PDEBench's size (--n 10000) about 7 min.")
    defaults = pde_data.generate.registry.KINDS["darcy"].defaults
    add_common_options(p, n_default=2_000, seed_default=pde_data.generate.registry.SEEDS["darcy"])
    p.add_argument("--n-grid", type=positive_int, default=defaults["n_grid"],
                   help="cells per axis (default %(default)s)")
    p.add_argument("--beta", type=positive_float, default=defaults["beta"],
                   help="constant forcing beta (default %(default)s)")
    p.set_defaults(func=run)
    report_options(p)


def spec(args: argparse.Namespace) -> pde_data.GenerationSpec:
    """The set the options describe."""
    return pde_data.GenerationSpec("darcy", args.n, args.seed, {"n_grid": args.n_grid, "beta": args.beta})


def run(args: argparse.Namespace) -> int:
    return run_generation(spec(args), args)
