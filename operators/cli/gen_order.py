"""``circuitop generate order``: the 1D order benchmark (CHONN, Eqs. 39-43), one set or the standard splits."""

from __future__ import annotations

import argparse
from pathlib import Path

import pde_data
import pde_data.generate.registry
from operators.cli._generation import (add_common_options, add_parameter_options, announce, check_out,
                                       generation_spec, positive_int, report_options, run_generation)

__all__ = ["register"]

_ORDERS = (1, 2, 3, 4)


def register(problems: argparse._SubParsersAction) -> None:
    p = problems.add_parser("order", help="1D order benchmark (I - tau^2 d_ss)^n y = x (CHONN Eqs. 39-43)")
    add_common_options(p, n_default=12_000, seed_default=pde_data.generate.registry.SEEDS["order"])
    add_parameter_options(p, "order", {"order": "operator order n (T1-T4; default %(default)s)",
                                       "tau": "length scale tau", "n_points": "grid points on [0, 1)"})
    p.add_argument("--splits", action="store_true",
                   help="write the standard train/val/test sets (seeds 42/43/44) for orders 1-4 into the "
                        "folder --out as order_T<n>_<split>.nc (--n, --seed, --order are not used)")
    sizes = tuple(size for size, _ in pde_data.generate.order.SPLITS.values())
    p.add_argument("--sizes", type=positive_int, nargs=3, default=sizes, metavar=("TRAIN", "VAL", "TEST"),
                   help=f"split sizes with --splits (default {' '.join(map(str, sizes))})")
    p.set_defaults(func=run)
    report_options(p)


def run(args: argparse.Namespace) -> int:
    if args.splits:
        return _run_splits(args)
    return run_generation(args)


def _run_splits(args: argparse.Namespace) -> int:
    if args.shards is not None:
        raise ValueError("--shards: expected one set to shard, found --splits (shard one set at a time)")
    if not isinstance(args.out, Path):
        raise ValueError("--out: expected a local folder for --splits' NetCDF files, found a URL")
    seeds = [s for _, s in pde_data.generate.order.SPLITS.values()]
    splits = {name: (size, seed) for name, size, seed in zip(("train", "val", "test"), args.sizes, seeds)}
    folder = Path(args.out)
    paths = {(name, order): check_out(folder / f"order_T{order}_{name}.nc", overwrite=args.overwrite)
             for name in splits for order in _ORDERS}
    announce(folder / "order_T{1-4}_{train,val,test}.nc", len(_ORDERS) * sum(args.sizes),
             sample_bytes=pde_data.generate.registry.sample_bytes(generation_spec(args)))
    sets = pde_data.generate_order_splits(orders=_ORDERS, n_points=args.n_points, tau=args.tau, splits=splits)
    for key, ds in sets.items():
        path = pde_data.save(ds, paths[key])
        print(f"wrote {path}: {dict(ds.sizes)}")
    return 0
