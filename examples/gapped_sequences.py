"""PDNA variants A-E under the Gapped protocol on sequential 8x8 digits (the paper's Table 4 form).

Each 8x8 handwritten digit that scikit-learn ships (offline) is read row by row: 8 time steps of 8
features. Every variant of PDNA (A baseline CfC, B noise control, C pulse,
D self-attend, E full PDNA) is trained on clean sequences for several seeds and evaluated with gaps at
test time only (0, 5, 15, 30 % centred and a 20 % multi-gap); degradation = acc(0 %) - acc(30 %).

    python examples/gapped_sequences.py --quick              # seconds on a CPU
    python examples/gapped_sequences.py                      # full setting: 5 seeds, 40 epochs

Writes the per-seed accuracies and the summary to a JSON file (atomically) and prints the table.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch
from sklearn.datasets import load_digits

from circuitop import PDNA, SequenceModel
from evaluation import GAP_LEVELS, gapped_evaluation

COLUMNS = [*GAP_LEVELS, "degradation"]
NAMES = {"A": "Baseline CfC", "B": "CfC + Noise", "C": "CfC + Pulse", "D": "CfC + SelfAttend", "E": "Full PDNA"}


def load_sequences(train_limit: int | None) -> tuple[torch.Tensor, ...]:
    """Digits as ``(n, 8 steps, 8 features)`` in [0, 1], split 80/20 with a fixed permutation."""
    digits = load_digits()
    x = torch.tensor(digits.images / 16.0, dtype=torch.float32)
    y = torch.tensor(digits.target, dtype=torch.long)
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))
    n_test = len(y) // 5
    test, train = order[:n_test], order[n_test:]
    if train_limit is not None:
        train = train[:train_limit]
    return x[train], y[train], x[test], y[test]


def train_one(variant: str, seed: int, data: tuple[torch.Tensor, ...], args: argparse.Namespace) -> dict:
    """Train one variant with one seed on clean sequences; return its gapped-evaluation report."""
    torch.manual_seed(seed)
    x_train, y_train, x_test, y_test = data
    core = PDNA(args.hidden, args.hidden, variant=variant, seed=seed, backbone_units=args.backbone_units)
    model = SequenceModel(core, in_features=8, out_features=10, dropout=0.1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=1e-4)
    steps_per_epoch = -(-len(y_train) // args.batch_size)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=args.epochs * steps_per_epoch)
    generator = torch.Generator().manual_seed(seed)
    model.train()
    for _ in range(args.epochs):
        for batch in torch.randperm(len(y_train), generator=generator).split(args.batch_size):
            loss = torch.nn.functional.cross_entropy(model(x_train[batch]), y_train[batch])
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            schedule.step()
    return gapped_evaluation(model, x_test, y_test)


def summarize(runs: dict[str, list[dict]]) -> dict[str, dict[str, tuple[float, float]]]:
    """variant -> column -> (mean, std) in percent over seeds."""
    out = {}
    for variant, reports in runs.items():
        out[variant] = {}
        for column in COLUMNS:
            values = [100 * r[column] for r in reports]
            out[variant][column] = (statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0)
    return out


def print_table(summary: dict, n_seeds: int) -> None:
    print(f"\nAccuracy (%) at each gap level, sequential 8x8 digits, mean ± std over {n_seeds} seed(s)")
    header = ["Variant", "0%", "5%", "15%", "30%", "Multi", "Degradation"]
    print(f"{header[0]:<22}" + "".join(f"{h:>15}" for h in header[1:]))
    for variant, row in summary.items():
        cells = "".join(f"{m:>8.2f} ± {s:<4.2f}" for m, s in (row[c] for c in COLUMNS))
        print(f"{variant + '. ' + NAMES[variant]:<22}{cells}")


def write_json_atomic(payload: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    with os.fdopen(fd, "w") as handle:
        json.dump(payload, handle, indent=2)
    os.replace(tmp, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small CPU budget (1 seed, few epochs, 16 units)")
    parser.add_argument("--variants", default="ABCDE", help="variants to run, e.g. ACE")
    parser.add_argument("--seeds", type=int, nargs="+", default=None, help="default 42 123 456 789 1337")
    parser.add_argument("--epochs", type=int, default=None, help="default 40 (quick: 5)")
    parser.add_argument("--hidden", type=int, default=None, help="CfC state size, default 64 (quick: 16)")
    parser.add_argument("--train-limit", type=int, default=None, help="use at most this many training digits")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=5e-3)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (small models: 1 is fastest)")
    parser.add_argument("--out", type=Path, default=Path("results/gapped_sequences.json"))
    args = parser.parse_args()
    args.seeds = args.seeds or ([42] if args.quick else [42, 123, 456, 789, 1337])
    args.epochs = args.epochs or (5 if args.quick else 40)
    args.hidden = args.hidden or (16 if args.quick else 64)
    args.backbone_units = 32 if args.quick else 128
    if args.quick and args.train_limit is None:
        args.train_limit = 768
    bad = set(args.variants) - set(NAMES)
    if bad:
        parser.error(f"--variants: expected letters from ABCDE, found {''.join(sorted(bad))}")

    torch.set_num_threads(args.threads)
    data = load_sequences(args.train_limit)
    start, runs = time.perf_counter(), {}
    for variant in args.variants:
        runs[variant] = []
        for seed in args.seeds:
            runs[variant].append(train_one(variant, seed, data, args))
            report = runs[variant][-1]
            print(f"variant {variant} seed {seed}: clean {100 * report['gap_0']:.2f} %, "
                  f"multi-gap {100 * report['multi']:.2f} % ({time.perf_counter() - start:.0f} s)", flush=True)
    summary = summarize(runs)
    settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    write_json_atomic({"settings": settings, "runs": runs, "summary": summary,
                       "seconds": time.perf_counter() - start}, args.out)
    print_table(summary, len(args.seeds))
    print(f"\nwrote {args.out} in {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
