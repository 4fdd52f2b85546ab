"""``circuitop predict --run RUN_DIR --data FILE --out pred.nc``: a trained run's predictions from the inputs alone.

    circuitop predict --run RUN_DIR --data FILE --out pred.nc [--input VAR ..] [--steps N] [--overwrite]

The file needs only the run's input variables (or ``--input`` naming the file's variables that stand in for
them); the predictions are written at the file's resolution, on its coordinates, batch by batch. A generated
set's shards are checked against their manifest first (``--no-verify`` skips it).
"""

from __future__ import annotations

import argparse
import json
import sys

from operators.cli._verified import add_no_verify, verify_data
from operators.cli._remote import add_storage_option, use_storage_options
from operators.cli.evaluate import add_run_options, run_values
from operators.threads import choose_threads, say


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("predict", help="predict with a trained run from input fields alone",
                       description="Write a trained run's predictions for every sample of a file that holds its "
                                   "inputs (no targets needed) to NetCDF, on the file's coordinates.")
    p.add_argument("--run", metavar="RUN_DIR", required=True, help="a training run directory")
    p.add_argument("--data", metavar="FILE", required=True, help="the inputs (any format train reads)")
    p.add_argument("--out", metavar="PRED.nc", required=True, help="the NetCDF file to write")
    p.add_argument("--steps", metavar="N",
                   help="rollout steps of a window run (default: to the file's last frame)")
    add_run_options(p)
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out file")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a summary")
    add_no_verify(p)
    add_storage_option(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from operators.training import predict_run

    say(choose_threads(args.threads))
    use_storage_options(args)
    values = run_values(args)
    verify_data(args.data, skip=args.no_verify)
    result = predict_run(args.run, args.data, args.out, checkpoint=args.checkpoint, overwrite=args.overwrite,
                         inputs=args.input, device=args.device, **values)
    if args.json:
        print(json.dumps(result))
        return 0
    if "note" in result:
        print(f"note: {result['note']}", file=sys.stderr)
    print(f"wrote {result['out']}: {', '.join(result['variables'])} for {result['n_samples']} samples of {args.data}")
    return 0
