"""``circuitop generate darcy``: Darcy pairs a → u on cell centres (CHONN, Eqs. 51-53; PDEBench beta)."""

from __future__ import annotations

import argparse

import pde_data.generate.registry
from operators.cli._generation import add_common_options, add_parameter_options, report_options, run_generation

__all__ = ["register"]


def register(problems: argparse._SubParsersAction) -> None:
    p = problems.add_parser("darcy", help="Darcy flow -div(a grad u) = beta, PDEBench coefficients (CHONN Eqs. 51-53)",
                            description="Darcy pairs a -> u. The defaults take about 1.5 min on 2 CPU cores; "
                                        "PDEBench's size (--n 10000) about 7 min.")
    add_common_options(p, n_default=2_000, seed_default=pde_data.generate.registry.SEEDS["darcy"])
    add_parameter_options(p, "darcy", {"n_grid": "cells per axis", "beta": "constant forcing beta"})
    p.set_defaults(func=run_generation)
    report_options(p)
