"""``circuitop generate digits``: scikit-learn's 8x8 digits as sequences of rows, whole or gapped (PDNA, Sec. 4)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pde_data
import pde_data.generate.registry
from operators.cli._generation import add_parameter_options, announce, check_out, non_negative_int, report_options

__all__ = ["register"]


def register(problems: argparse._SubParsersAction) -> None:
    p = problems.add_parser("digits", help="8x8 digits read row by row (8 steps of 8 pixels), optionally with "
                                           "centred gaps removed (irregular times, unequal lengths; PDNA)")
    p.add_argument("--out", type=Path, required=True, help="output NetCDF file")
    add_parameter_options(p, "digits", {"gap": "largest centred gap, a fraction of the 8 rows in [0, 1): each digit "
                                               "loses 0 .. max(1, round(8 * GAP)) rows (default %(default)s: whole "
                                               "sequences)"})
    p.add_argument("--seed", type=non_negative_int, default=pde_data.generate.registry.SEEDS["digits"],
                   help="seed of the gap sizes (default %(default)s)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out file (default: refuse)")
    p.set_defaults(func=run)
    report_options(p)


def run(args: argparse.Namespace) -> int:
    path = check_out(args.out, overwrite=args.overwrite)
    ds = pde_data.generate_gapped_digits(seed=args.seed, gap=args.gap)  # a fixed set of 1797, made in a second
    n = ds.sizes["sample"]
    announce(path, n, sample_bytes=(ds.nbytes - ds["sample"].nbytes) // n)
    print(f"wrote {pde_data.save(ds, path)}: {dict(ds.sizes)}")  # atomically
    return 0
