"""``circuitop generate degradation``: irregular degradation trajectories and their remaining useful life (NAC)."""

from __future__ import annotations

import argparse

import pde_data
from operators.cli._generation import (add_common_options, generate_chunked, positive_int, report_options,
                                       selected_samples, write)

__all__ = ["register", "sample_bytes"]


def register(problems: argparse._SubParsersAction) -> None:
    p = problems.add_parser("degradation", help="irregularly sampled health indicators -> remaining useful life "
                                                "(unequal lengths, padded; the NAC RUL task)")
    add_common_options(p, n_default=512, seed_default=0)
    p.add_argument("--min-length", type=positive_int, default=16,
                   help="fewest observations per trajectory (default 16)")
    p.add_argument("--max-length", type=positive_int, default=32,
                   help="most observations per trajectory; every one is padded to it (default 32)")
    p.set_defaults(func=run)
    report_options(p)


def sample_bytes(args: argparse.Namespace) -> int:
    """Bytes of one sample's variables, 8 each: ``health``, ``gap``, ``rul_step`` and the times, padded to
    ``max_length``, and ``rul``, ``length``, ``t_fail``, ``power``."""
    return (4 * args.max_length + 4) * 8


def run(args: argparse.Namespace) -> int:
    samples = selected_samples(args, sample_bytes=sample_bytes(args))

    def make(chunk: range):
        return pde_data.generate_degradation(args.n, min_length=args.min_length, max_length=args.max_length,
                                             seed=args.seed, samples=chunk)

    write(generate_chunked(make, samples, desc="degradation", chunk_size=4096), args)
    return 0
