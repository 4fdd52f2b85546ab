"""``circuitop generate swe``: the radial dam-break set (PDEBench ``2D_rdb_NA_NA``), streamed or sharded, atomic.

The command prints its estimated time once the first samples are made (PDEBench's set is ``--n 1000``).
Memory holds one batch of samples at a time, whatever ``--n``.
"""

from __future__ import annotations

import argparse

from operators.cli._generation import (add_common_options, add_parameter_options, add_pdebench_option, report_options,
                                       run_generation)
from operators.cli.gen_ns import add_device_options, device_of

__all__ = ["register"]


def register(problems: argparse._SubParsersAction) -> None:
    p = problems.add_parser("swe", help="2D shallow water, radial dam break (PDEBench rdb, CHONN Eqs. 62-65)",
                            description=__doc__.split("\n", 2)[2].strip())
    add_common_options(p, n_default=200, seed_default=0)
    add_device_options(p, "swe")
    add_parameter_options(p, "swe", {"n_grid": "cells per side on [-2.5, 2.5]^2", "t_final": "final time",
                                     "n_frames": "frames including t=0", "momenta": "also store hu and hv",
                                     "batch_size": "samples simulated together",
                                     "radius": "radius of the dam (default %(default)s: drawn per sample)",
                                     "height": "depth inside the dam, 1 outside"})
    add_pdebench_option(p, "rdb", variables=["h"])
    p.set_defaults(func=run)
    report_options(p, h="n_grid")  # the depth h is made at --n-grid


def run(args: argparse.Namespace) -> int:
    return run_generation(args, device=device_of(args))
