"""``circuitop generate swe``: the radial dam-break set (PDEBench ``2D_rdb_NA_NA``), streamed or sharded, atomic.

The command prints its estimated time once the first samples are made (PDEBench's set is ``--n 1000``).
Memory holds one batch of samples at a time, whatever ``--n``.
"""

from __future__ import annotations

import argparse

import pde_data
from operators.cli._generation import (add_common_options, add_pdebench_option, positive_float, positive_int,
                                       report_options, run_generation)
from operators.cli.gen_ns import add_device_options, device_of

__all__ = ["register", "spec"]


def register(problems: argparse._SubParsersAction) -> None:
    p = problems.add_parser("swe", help="2D shallow water, radial dam break (PDEBench rdb, CHONN Eqs. 62-65)",
                            description=__doc__.split("\n", 2)[2].strip())
    add_common_options(p, n_default=200, seed_default=0)
    add_device_options(p)
    p.add_argument("--n-grid", type=positive_int, default=128, help="cells per side on [-2.5, 2.5]^2 (default 128)")
    p.add_argument("--t-final", type=positive_float, default=1.0, help="final time (default 1)")
    p.add_argument("--frames", type=positive_int, default=101, help="frames including t=0 (default 101)")
    p.add_argument("--momenta", action="store_true", help="also store hu and hv")
    p.add_argument("--batch-size", type=positive_int, default=8, help="samples simulated together (default 8)")
    add_pdebench_option(p, "rdb", variables=["h"])
    p.set_defaults(func=run)
    report_options(p, h="n_grid")  # the depth h is made at --n-grid


def spec(args: argparse.Namespace) -> pde_data.GenerationSpec:
    """The set the options describe."""
    return pde_data.GenerationSpec("swe", args.n, args.seed, {
        "n_grid": args.n_grid, "t_final": args.t_final, "n_frames": args.frames, "momenta": args.momenta,
        "batch_size": args.batch_size, "dtype": args.dtype})


def run(args: argparse.Namespace) -> int:
    return run_generation(spec(args), args, device=device_of(args))
