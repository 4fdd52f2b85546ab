"""``circuitop generate degradation``: irregular degradation trajectories and their remaining useful life (NAC)."""

from __future__ import annotations

import argparse

import pde_data
from operators.cli._generation import add_common_options, generate_chunked, selected_samples, write

__all__ = ["register"]


def register(problems: argparse._SubParsersAction) -> None:
    p = problems.add_parser("degradation", help="irregularly sampled health indicators -> remaining useful life "
                                                "(unequal lengths, padded; the NAC RUL task)")
    add_common_options(p, n_default=512, seed_default=0)
    p.add_argument("--min-length", type=int, default=16, help="fewest observations per trajectory (default 16)")
    p.add_argument("--max-length", type=int, default=32,
                   help="most observations per trajectory; every one is padded to it (default 32)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if not 1 <= args.min_length <= args.max_length:
        raise ValueError(f"--min-length, --max-length: expected 1 <= --min-length <= --max-length, found "
                         f"{args.min_length}, {args.max_length}")
    samples = selected_samples(args)

    def make(chunk: range):
        return pde_data.generate_degradation(args.n, min_length=args.min_length, max_length=args.max_length,
                                             seed=args.seed, samples=chunk)

    write(generate_chunked(make, samples, desc="degradation", chunk_size=4096), args)
    return 0
