"""``circuitop generate poisson``: Poisson pairs f → u with their coefficients (CHONN, Eqs. 56-58)."""

from __future__ import annotations

import argparse

import pde_data
from operators.cli._generation import (add_common_options, generate_chunked, positive_int, report_options,
                                       selected_samples, write)

__all__ = ["register", "sample_bytes"]


def register(problems: argparse._SubParsersAction) -> None:
    p = problems.add_parser("poisson", help="Poisson -Laplace(u) = f on [0,1]^2, CNO sources (CHONN Eqs. 56-58)")
    add_common_options(p, n_default=1024, seed_default=0)
    p.add_argument("--K", type=positive_int, default=16, help="modes per axis (16 in distribution, 20 out; default 16)")
    p.add_argument("--n-grid", type=positive_int, default=64, help="points per axis, boundaries included (default 64)")
    p.set_defaults(func=run)
    report_options(p)


def sample_bytes(args: argparse.Namespace) -> int:
    """Bytes of one sample's variables: ``f`` and ``u`` (n_grid, n_grid) and ``coef`` (K, K), float64."""
    return (2 * args.n_grid**2 + args.K**2) * 8


def run(args: argparse.Namespace) -> int:
    samples = selected_samples(args, sample_bytes=sample_bytes(args))

    def make(chunk: range):
        return pde_data.generate_poisson(args.n, K=args.K, n_grid=args.n_grid, seed=args.seed, samples=chunk)

    write(generate_chunked(make, samples, desc=f"poisson K={args.K}", chunk_size=128), args)
    return 0
