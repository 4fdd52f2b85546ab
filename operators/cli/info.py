"""``circuitop info [PATH]``: versions, torch device and threads; or a summary of a data file."""

from __future__ import annotations

import argparse
import platform
from importlib import metadata

import torch

import pde_data
from pde_data import model

_PACKAGES = ("circuitop", "torch", "neuraloperator", "ncps", "numpy", "scipy", "xarray", "h5py",
             "netCDF4", "h5netcdf", "dask", "matplotlib")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("info", help="print versions and devices, or describe a data file")
    p.add_argument("path", nargs="?", help="a NetCDF file, NetCDF shard glob or PDEBench HDF5 file")
    p.set_defaults(func=run)


def _version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def environment() -> dict[str, str]:
    """Versions, the torch device that would be used and the thread count."""
    info = {"python": platform.python_version()}
    info.update({name: _version(name) for name in _PACKAGES})
    info["device"] = f"cuda ({torch.cuda.get_device_name(0)})" if torch.cuda.is_available() else "cpu"
    info["torch threads"] = str(torch.get_num_threads())
    return info


def describe(path: str) -> list[str]:
    """One line per fact about a data file (any that :func:`pde_data.open_source` reads).

    Raises:
        FileNotFoundError / ValueError: the file is missing, unreadable or not in the data model.
    """
    with pde_data.open_source(path) as source:
        ds = source.dataset
        lines = [f"file: {path}", f"format: {source.format}", f"kind: {model.kind_of(ds)}", f"dims: {dict(ds.sizes)}"]
        lines += [f"variable {name}: {var.dims} {var.dtype}" for name, var in ds.data_vars.items()]
        lines += [f"attr {key}: {value}" for key, value in ds.attrs.items()]
    return lines


def run(args: argparse.Namespace) -> int:
    lines = describe(args.path) if args.path else [f"{k}: {v}" for k, v in environment().items()]
    print("\n".join(lines))
    return 0
