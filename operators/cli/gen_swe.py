"""``circuitop generate swe``: the radial dam-break set (PDEBench ``2D_rdb_NA_NA``), sharded and atomic.

The defaults take under a minute on 2 CPU cores and about 3 GB of memory; PDEBench's set (``--n 1000``)
takes about 1.5 min there and 13 GB of memory (the whole set is held in memory before it is written).
"""

from __future__ import annotations

import argparse

import pde_data
from operators.cli._generation import (add_common_options, add_pdebench_option, positive_float, positive_int,
                                       progress_bar, report_options, selected_samples, write)
from operators.cli.gen_ns import DTYPES, add_device_options, resolve_device

__all__ = ["register", "sample_bytes"]


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
    add_pdebench_option(p, "rdb")
    p.set_defaults(func=run)
    report_options(p, h="n_grid")  # the depth h is made at --n-grid


def sample_bytes(args: argparse.Namespace) -> int:
    """Bytes of one sample's ``h`` (and ``hu``, ``hv``) (frames, n_grid, n_grid) in the simulation dtype and
    its float64 ``dam_radius``."""
    fields = 3 if args.momenta else 1
    return fields * args.frames * args.n_grid**2 * DTYPES[args.dtype].itemsize + 8


def run(args: argparse.Namespace) -> int:
    samples = selected_samples(args, sample_bytes=sample_bytes(args))
    with progress_bar(len(samples) * args.t_final, unit="t", desc="swe") as bar:
        last: dict[int, float] = {}

        def progress(start: int, t: float) -> None:  # simulated sample-time units
            kept = min(args.batch_size, samples.stop - start)
            bar.update((t - last.get(start, 0.0)) * kept)
            last[start] = t
            bar.set_postfix_str(f"samples from {start}, t={t:.4g}")

        ds = pde_data.generate_dam_break(
            len(samples), n_grid=args.n_grid, seed=args.seed, first_sample=samples.start, t_final=args.t_final,
            n_frames=args.frames, momenta=args.momenta, batch_size=args.batch_size, dtype=DTYPES[args.dtype],
            device=resolve_device(args.device), callback=progress,
        )
    write(ds, args, variables=["h"] if args.pdebench else None)
    return 0
