"""``circuitop generate darcy``: Darcy pairs a → u on cell centres (CHONN, Eqs. 51-53; PDEBench beta)."""

from __future__ import annotations

import argparse

import pde_data
from operators.cli._generation import add_common_options, generate_chunked, selected_samples, write

__all__ = ["register"]


def register(problems: argparse._SubParsersAction) -> None:
    p = problems.add_parser("darcy", help="Darcy flow -div(a grad u) = beta, PDEBench coefficients (CHONN Eqs. 51-53)")
    add_common_options(p, n_default=10_000, seed_default=0)
    p.add_argument("--n-grid", type=int, default=128, help="cells per axis (default 128)")
    p.add_argument("--beta", type=float, default=1.0, help="constant forcing beta (default 1.0)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    samples = selected_samples(args)

    def make(chunk: range):
        return pde_data.generate_darcy(args.n, n_grid=args.n_grid, beta=args.beta, seed=args.seed, samples=chunk)

    write(generate_chunked(make, samples, desc="darcy", chunk_size=8), args)
    return 0
