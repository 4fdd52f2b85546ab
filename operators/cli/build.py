"""``circuitop build``: compile the native CPU kernels now (once, about a minute each), with a progress
line per kernel, instead of at their first use. ``make install`` runs it."""

from __future__ import annotations

import argparse

import circuitop
from pde_data.core.native import build_kernels
from pde_data.solvers.shallow_water import SWE_KERNEL


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("build", help="compile the native CPU kernels now (they are cached)")
    p.add_argument("--require", action="store_true",
                   help="exit 1 when a kernel cannot be built (default: report it; the torch paths run instead)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    built = {**circuitop.build_native_kernels(), **build_kernels([SWE_KERNEL])}
    failed = {stem: why for stem, why in built.items() if why is not None}
    if failed and args.require:
        raise RuntimeError(f"native kernels not built: {', '.join(sorted(failed))} (see the lines above)")
    return 0
