"""``circuitop generate ns``: the FNO Navier–Stokes vorticity set (streamed or sharded on Dask, atomic).

The defaults take a few minutes on 2 CPU cores; the FNO benchmark's own settings (``--n 1200 --n-sim 256
--t-final 50 --dt 1e-4``) take days there, hours on a GPU.
"""

from __future__ import annotations

import argparse

import pde_data.generate.registry
from operators.cli._generation import (add_common_options, add_parameter_options, add_pdebench_option, report_options,
                                       run_generation)
from operators.training import distributed

__all__ = ["register", "add_device_options", "device_of"]


def add_device_options(p: argparse.ArgumentParser, generator: str) -> None:
    """``--device`` (default: cuda when available, else cpu) and the ``generator``'s ``--dtype``."""
    p.add_argument("--device", default=None, help="torch device (default: cuda if available, else cpu)")
    add_parameter_options(p, generator, {"dtype": "simulation dtype"})


def device_of(args: argparse.Namespace) -> str | None:
    """The solvers' device: ``--device`` checked here (:func:`operators.training.distributed.device_of`: cuda by
    default when present); on a ``--scheduler``'s workers, as given (None: each worker's cuda when present, else
    cpu)."""
    return args.device if args.scheduler is not None else str(distributed.device_of(args.device))


def register(problems: argparse._SubParsersAction) -> None:
    p = problems.add_parser("ns", help="2D Navier-Stokes vorticity (FNO benchmark, CHONN Eqs. 66-70)",
                            description=__doc__.split("\n", 2)[2].strip())
    add_common_options(p, n_default=32, seed_default=pde_data.generate.registry.SEEDS["ns"])
    add_device_options(p, "ns")
    add_parameter_options(p, "ns", {
        "visc": "viscosity", "n_sim": "simulation grid size (default %(default)s; FNO: 256)",
        "n_out": "stored grid size, every n_sim/n_out-th point", "t_final": "final time (default %(default)s; FNO: 50)",
        "n_records": "records after t=0 (default: one per time unit)",
        "record_initial": "also store the initial vorticity (t=0)",
        "dt": "largest time step (default %(default)s; FNO: 1e-4; a step past the CFL limit is refused)",
        "batch_size": "samples simulated together, in blocks aligned by sample index (results depend on it at "
                      "round-off level; default %(default)s)"})
    add_pdebench_option(p, "ns")
    p.set_defaults(func=run)
    report_options(p, w0="n_sim")  # the solver's initial field w0 is made at --n-sim


def run(args: argparse.Namespace) -> int:
    return run_generation(args, device=device_of(args))
