"""``circuitop generate poisson``: Poisson pairs f → u with their coefficients (CHONN, Eqs. 56-58)."""

from __future__ import annotations

import argparse

import pde_data.generate.registry
from operators.cli._generation import add_common_options, add_parameter_options, report_options, run_generation

__all__ = ["register"]


def register(problems: argparse._SubParsersAction) -> None:
    p = problems.add_parser("poisson", help="Poisson -Laplace(u) = f on [0,1]^2, CNO sources (CHONN Eqs. 56-58)")
    add_common_options(p, n_default=1024, seed_default=pde_data.generate.registry.SEEDS["poisson"])
    add_parameter_options(p, "poisson", {"K": "modes per axis (16 in distribution, 20 out; default %(default)s)",
                                         "n_grid": "points per axis, boundaries included"})
    p.set_defaults(func=run_generation)
    report_options(p)
