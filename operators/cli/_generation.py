"""Shared pieces of ``circuitop generate <problem>``: common options, shards, atomic output."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Callable

import xarray as xr
from tqdm import tqdm

import pde_data

__all__ = ["add_common_options", "add_pdebench_option", "selected_samples", "output_path", "write", "generate_chunked"]


def add_common_options(p: argparse.ArgumentParser, *, n_default: int, seed_default: int = 0) -> None:
    """``--out PATH --n N --seed S --shard i/n --device DEV``."""
    p.add_argument("--out", type=Path, required=True, help="output NetCDF file (shards get -00003 suffixes)")
    p.add_argument("--n", type=int, default=n_default, help=f"number of samples (default {n_default})")
    p.add_argument("--seed", type=int, default=seed_default, help=f"random seed (default {seed_default})")
    p.add_argument("--shard", type=_shard, default=None, metavar="i/n",
                   help="write only shard i of n (samples split contiguously; same bytes as the full set)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out file (default: refuse)")


def _shard(text: str) -> tuple[int, int]:
    """argparse type: :func:`pde_data.parse_shard` with its own message, naming ``shard`` (argparse would
    print "invalid parse_shard value")."""
    try:
        return pde_data.parse_shard(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def selected_samples(args: argparse.Namespace) -> range:
    """The sample indices this invocation generates (all, or the shard's slice), after checking the output
    path (:func:`pde_data.check_output`: no existing file without ``--overwrite``, a writable folder),
    so nothing is computed for an output that could not be written."""
    if args.n < 1:
        raise ValueError(f"--n: expected a positive number of samples, found {args.n}")
    pde_data.check_output(output_path(args), overwrite=args.overwrite)
    if args.shard is None:
        return range(args.n)
    return pde_data.shard_range(args.n, *args.shard)


def output_path(args: argparse.Namespace) -> Path:
    """``--out`` itself, or its shard name ``name-0000i.nc``."""
    return args.out if args.shard is None else pde_data.shard_path(args.out, args.shard[0])


def add_pdebench_option(p: argparse.ArgumentParser, layout: str) -> None:
    """``--pdebench``: write PDEBench's HDF5 ``layout`` instead of NetCDF (see :func:`write`)."""
    p.add_argument("--pdebench", action="store_true",
                   help=f"write PDEBench's HDF5 layout ('{layout}': groups '0000'.., data (T, X, Y, C)) instead of NetCDF")
    p.set_defaults(pdebench_layout=layout)


def write(ds: xr.Dataset, args: argparse.Namespace, *, variables: list[str] | None = None) -> Path:
    """Save atomically to the output path (NetCDF, or with ``--pdebench`` the problem's PDEBench layout,
    ``variables`` only) and print where it went."""
    if getattr(args, "pdebench", False):
        path = pde_data.write_pdebench(ds, output_path(args), layout=args.pdebench_layout, variables=variables)
        print(f"wrote {path}: {dict(ds.sizes)} (PDEBench {args.pdebench_layout} layout)")
        return path
    path = pde_data.save(ds, output_path(args))
    print(f"wrote {path}: {dict(ds.sizes)}")
    return path


def generate_chunked(make: Callable[[range], xr.Dataset], samples: range, *, desc: str,
                     chunk_size: int = 64) -> xr.Dataset:
    """``make(sub_range)`` chunk by chunk under a tqdm progress bar (stderr), concatenated along ``sample``.

    For generators that seed each sample on its own, the result does not depend on ``chunk_size``.
    """
    parts = []
    with tqdm(total=len(samples), unit="sample", file=sys.stderr, desc=desc, dynamic_ncols=True) as bar:
        for start in range(samples.start, samples.stop, chunk_size):
            parts.append(make(range(start, min(start + chunk_size, samples.stop))))
            bar.update(parts[-1].sizes["sample"])
    if len(parts) == 1:
        return parts[0]
    return xr.concat(parts, dim="sample", data_vars="minimal", coords="minimal", compat="override", join="exact")
