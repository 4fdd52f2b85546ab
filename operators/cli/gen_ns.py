"""``circuitop generate ns``: the FNO Navier–Stokes vorticity set (streamed or sharded on Dask, atomic).

The defaults take a few minutes on 2 CPU cores; the FNO benchmark's own settings (``--n 1200 --n-sim 256
--t-final 50 --dt 1e-4``) take days there, hours on a GPU.
"""

from __future__ import annotations

import argparse

import torch

import pde_data
import pde_data.generate.registry
from operators.cli._generation import (add_common_options, add_pdebench_option, non_negative_float, positive_float,
                                       positive_int, report_options, run_generation)
from operators.training import distributed
from operators.training.spec_values import SpecError

__all__ = ["register", "spec", "add_device_options", "device_of", "resolve_device"]


def add_device_options(p: argparse.ArgumentParser) -> None:
    """``--device`` (default: cuda when available, else cpu) and ``--dtype`` (float32 or float64)."""
    if "--device" not in p._option_string_actions:  # the shared options may add it one day
        p.add_argument("--device", default=None, help="torch device (default: cuda if available, else cpu)")
    p.add_argument("--dtype", choices=sorted(pde_data.generate.registry.DTYPES), default="float32",
                   help="simulation dtype (default %(default)s)")


def resolve_device(name: str | None) -> torch.device:
    """The ``--device`` argument as a torch device (:func:`operators.training.distributed.device_of`: cuda:0
    by default when present); a bad one is a one-line ``--device: ...`` error."""
    try:
        return distributed.device_of(name)
    except SpecError as exc:
        raise ValueError(f"--device: {exc.message}") from None


def device_of(args: argparse.Namespace) -> str | None:
    """The solvers' device: ``--device`` checked here (cuda by default when present); on a ``--scheduler``'s
    workers, as given (None: each worker's cuda when present, else cpu)."""
    return args.device if args.scheduler is not None else str(resolve_device(args.device))


def register(problems: argparse._SubParsersAction) -> None:
    p = problems.add_parser("ns", help="2D Navier-Stokes vorticity (FNO benchmark, CHONN Eqs. 66-70)",
                            description=__doc__.split("\n", 2)[2].strip())
    defaults = pde_data.generate.registry.KINDS["ns"].defaults
    add_common_options(p, n_default=32, seed_default=pde_data.generate.registry.SEEDS["ns"])
    add_device_options(p)
    p.add_argument("--visc", type=non_negative_float, default=defaults["visc"], help="viscosity (default %(default)s)")
    p.add_argument("--n-sim", type=positive_int, default=defaults["n_sim"],
                   help="simulation grid size (default %(default)s; FNO: 256)")
    p.add_argument("--n-out", type=positive_int, default=defaults["n_out"],
                   help="stored grid size, every n_sim/n_out-th point (default %(default)s)")
    p.add_argument("--t-final", type=positive_float, default=defaults["t_final"],
                   help="final time (default %(default)s; FNO: 50)")
    p.add_argument("--records", type=positive_int, default=defaults["n_records"],
                   help="records after t=0 (default: one per time unit)")
    p.add_argument("--record-initial", action="store_true", default=defaults["record_initial"],
                   help="also store the initial vorticity (t=0)")
    p.add_argument("--dt", type=positive_float, default=defaults["dt"],
                   help="largest time step (default %(default)s; FNO: 1e-4; a step past the CFL limit is refused)")
    p.add_argument("--batch-size", type=positive_int, default=defaults["batch_size"],
                   help="samples simulated together, in blocks aligned by sample index (results depend on it at "
                        "round-off level; default %(default)s)")
    add_pdebench_option(p, "ns")
    p.set_defaults(func=run)
    report_options(p, w0="n_sim")  # the solver's initial field w0 is made at --n-sim


def spec(args: argparse.Namespace) -> pde_data.GenerationSpec:
    """The set the options describe."""
    return pde_data.GenerationSpec("ns", args.n, args.seed, {
        "visc": args.visc, "n_sim": args.n_sim, "n_out": args.n_out, "t_final": args.t_final,
        "n_records": args.records, "record_initial": args.record_initial, "dt": args.dt,
        "batch_size": args.batch_size, "dtype": args.dtype})


def run(args: argparse.Namespace) -> int:
    return run_generation(spec(args), args, device=device_of(args))
