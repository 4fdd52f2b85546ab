"""``circuitop generate poisson``: Poisson pairs f → u with their coefficients (CHONN, Eqs. 56-58)."""

from __future__ import annotations

import argparse

import pde_data
import pde_data.generate.registry
from operators.cli._generation import add_common_options, positive_int, report_options, run_generation

__all__ = ["register", "spec"]


def register(problems: argparse._SubParsersAction) -> None:
    p = problems.add_parser("poisson", help="Poisson -Laplace(u) = f on [0,1]^2, CNO sources (CHONN Eqs. 56-58)")
    defaults = pde_data.generate.registry.KINDS["poisson"].defaults
    add_common_options(p, n_default=1024, seed_default=pde_data.generate.registry.SEEDS["poisson"])
    p.add_argument("--K", type=positive_int, default=defaults["K"],
                   help="modes per axis (16 in distribution, 20 out; default %(default)s)")
    p.add_argument("--n-grid", type=positive_int, default=defaults["n_grid"],
                   help="points per axis, boundaries included (default %(default)s)")
    p.set_defaults(func=run)
    report_options(p)


def spec(args: argparse.Namespace) -> pde_data.GenerationSpec:
    """The set the options describe."""
    return pde_data.GenerationSpec("poisson", args.n, args.seed, {"K": args.K, "n_grid": args.n_grid})


def run(args: argparse.Namespace) -> int:
    return run_generation(spec(args), args)
