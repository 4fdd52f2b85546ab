"""``circuitop generate darcy``: Darcy pairs a → u on cell centres (CHONN, Eqs. 51-53; PDEBench beta)."""

from __future__ import annotations

import argparse

import pde_data
from operators.cli._generation import (add_common_options, generate_chunked, positive_float, positive_int,
                                       report_options, selected_samples, write)

__all__ = ["register", "sample_bytes"]


def register(problems: argparse._SubParsersAction) -> None:
    p = problems.add_parser("darcy", help="Darcy flow -div(a grad u) = beta, PDEBench coefficients (CHONN Eqs. 51-53)",
                            description="Darcy pairs a -> u. The defaults take about 1.5 min on 2 CPU cores; "
                                        "PDEBench's size (--n 10000) about 7 min and 5 GB of memory.")
    add_common_options(p, n_default=2_000, seed_default=0)
    p.add_argument("--n-grid", type=positive_int, default=128, help="cells per axis (default 128)")
    p.add_argument("--beta", type=positive_float, default=1.0, help="constant forcing beta (default 1.0)")
    p.set_defaults(func=run)
    report_options(p)


def sample_bytes(args: argparse.Namespace) -> int:
    """Bytes of one sample's variables: ``a`` and ``u``, float64 (n_grid, n_grid) each."""
    return 2 * args.n_grid**2 * 8


def run(args: argparse.Namespace) -> int:
    samples = selected_samples(args, sample_bytes=sample_bytes(args))

    def make(chunk: range):
        return pde_data.generate_darcy(args.n, n_grid=args.n_grid, beta=args.beta, seed=args.seed, samples=chunk)

    write(generate_chunked(make, samples, desc="darcy", chunk_size=8), args)
    return 0
