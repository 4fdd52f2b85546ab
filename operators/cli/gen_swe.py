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
    defaults = pde_data.generate.registry.KINDS["swe"].defaults
    p.add_argument("--n-grid", type=positive_int, default=defaults["n_grid"],
                   help="cells per side on [-2.5, 2.5]^2 (default %(default)s)")
    p.add_argument("--t-final", type=positive_float, default=defaults["t_final"], help="final time (default %(default)s)")
    p.add_argument("--frames", type=positive_int, default=defaults["n_frames"],
                   help="frames including t=0 (default %(default)s)")
    p.add_argument("--momenta", action="store_true", help="also store hu and hv")
    p.add_argument("--batch-size", type=positive_int, default=defaults["batch_size"],
                   help="samples simulated together (default %(default)s)")
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
