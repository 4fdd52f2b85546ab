"""``circuitop generate PROBLEM ...``: a plain problem is a row of ``_PLAIN``, any other a module ``gen_<problem>.py``.

Each module ``operators/cli/gen_<problem>.py`` exposes ``register(problems)`` adding its own sub-parser.
"""

from __future__ import annotations

import argparse
import importlib

import pde_data.generate.registry
from operators.cli._generation import add_common_options, add_parameter_options, report_options, run_generation

_PROBLEMS = ("order", "poisson", "darcy", "ns", "swe", "degradation", "digits")

#: problems with only the common and parameter options: name -> (default --n, help, description, parameter help)
_PLAIN = {
    "poisson": (1024, "Poisson -Laplace(u) = f on [0,1]^2, CNO sources (CHONN Eqs. 56-58)", None,
                {"K": "modes per axis (16 in distribution, 20 out; default %(default)s)",
                 "n_grid": "points per axis, boundaries included"}),
    "darcy": (2_000, "Darcy flow -div(a grad u) = beta, PDEBench coefficients (CHONN Eqs. 51-53)",
              "Darcy pairs a -> u. The defaults take about 1.5 min on 2 CPU cores; PDEBench's size (--n 10000) "
              "about 7 min.",
              {"n_grid": "cells per axis", "beta": "constant forcing beta"}),
    "degradation": (512, "irregularly sampled health indicators -> remaining useful life (unequal lengths, padded; "
                         "the NAC RUL task)", None,
                    {"min_length": "fewest observations per trajectory",
                     "max_length": "most observations per trajectory; every one is padded to it"}),
}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("generate", help="generate a benchmark data set (PDE fields or sequences)")
    problems = p.add_subparsers(dest="problem", required=True, metavar="PROBLEM")
    for name in _PROBLEMS:
        if name in _PLAIN:
            _register_plain(problems, name)
        else:
            importlib.import_module(f"operators.cli.gen_{name}").register(problems)


def _register_plain(problems: argparse._SubParsersAction, name: str) -> None:
    n_default, summary, description, parameter_help = _PLAIN[name]
    p = problems.add_parser(name, help=summary, description=description)
    add_common_options(p, n_default=n_default, seed_default=pde_data.generate.registry.SEEDS[name])
    add_parameter_options(p, name, parameter_help)
    p.set_defaults(func=run_generation)
    report_options(p)
