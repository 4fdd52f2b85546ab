"""``circuitop generate swe``: the radial dam-break set (PDEBench ``2D_rdb_NA_NA``), sharded and atomic."""

from __future__ import annotations

import argparse
import sys

from tqdm import tqdm

import pde_data
from operators.cli._generation import add_common_options, add_pdebench_option, selected_samples, write
from operators.cli.gen_ns import DTYPES, add_device_options, resolve_device

__all__ = ["register"]


def register(problems: argparse._SubParsersAction) -> None:
    p = problems.add_parser("swe", help="2D shallow water, radial dam break (PDEBench rdb, CHONN Eqs. 62-65)")
    add_common_options(p, n_default=1000, seed_default=0)
    add_device_options(p)
    p.add_argument("--n-grid", type=int, default=128, help="cells per side on [-2.5, 2.5]^2 (default 128)")
    p.add_argument("--t-final", type=float, default=1.0, help="final time (default 1)")
    p.add_argument("--frames", type=int, default=101, help="frames including t=0 (default 101)")
    p.add_argument("--momenta", action="store_true", help="also store hu and hv")
    p.add_argument("--batch-size", type=int, default=8, help="samples simulated together (default 8)")
    add_pdebench_option(p, "rdb")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    samples = selected_samples(args)
    with tqdm(total=len(samples) * args.t_final, unit="t", file=sys.stderr, desc="swe", dynamic_ncols=True) as bar:
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
