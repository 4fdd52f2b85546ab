"""``circuitop evaluate --run RUN_DIR --data FILE [--rollout N]``: called by ``operators.cli.evaluate``.

Writes ``metrics.json``, ``rollout.csv`` and plots into the run folder and prints the metric table.
"""

from __future__ import annotations

import argparse
import json

__all__ = ["run"]


def run(args: argparse.Namespace) -> int:
    from operators.training.evaluate import evaluate_run

    if getattr(args, "initial_step", 0):
        raise ValueError("--initial-step applies to --pred/--true; a run's given frames come from its --window")
    result = evaluate_run(args.run, args.data, rollout=args.rollout, all_samples=args.all_samples,
                          batch_size=args.batch_size, device=args.device)
    if getattr(args, "json", False):
        print(json.dumps(result))
        return 0
    print(f"run: {args.run} (epoch {result['epoch']})\ndata: {args.data} ({result['samples']}, {result['n_samples']} samples)")
    rows = dict(result["metrics"])
    if "rollout" in result:
        rows[f"rollout_mean_rel_l2 ({result['rollout']['steps']} steps)"] = result["rollout"]["mean_rel_l2"]
    width = max(len(k) for k in rows)
    print("\n".join(f"{k:<{width}}  {'nan' if v is None else f'{v:.6g}'}" for k, v in rows.items()))
    print("wrote " + ", ".join(result["files"]))
    return 0
