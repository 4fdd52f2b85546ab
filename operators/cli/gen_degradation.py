"""``circuitop generate degradation``: irregular degradation trajectories and their remaining useful life (NAC)."""

from __future__ import annotations

import argparse

import pde_data.generate.registry
from operators.cli._generation import add_common_options, add_parameter_options, report_options, run_generation

__all__ = ["register"]


def register(problems: argparse._SubParsersAction) -> None:
    p = problems.add_parser("degradation", help="irregularly sampled health indicators -> remaining useful life "
                                                "(unequal lengths, padded; the NAC RUL task)")
    add_common_options(p, n_default=512, seed_default=pde_data.generate.registry.SEEDS["degradation"])
    add_parameter_options(p, "degradation", {
        "min_length": "fewest observations per trajectory",
        "max_length": "most observations per trajectory; every one is padded to it"})
    p.set_defaults(func=run_generation)
    report_options(p)
