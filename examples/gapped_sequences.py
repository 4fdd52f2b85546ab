"""PDNA variants A-E under the Gapped protocol on sequential 8x8 digits (the PDNA paper's Table 4 form).

Each 8x8 handwritten digit that scikit-learn ships (offline) is read row by row: 8 time steps of 8
features (``pde_data.generate_gapped_digits(gap=0)``: whole sequences, pixels / 16 in [0, 1]). Every
variant of PDNA (A baseline CfC, B noise control, C pulse, D self-attend, E full PDNA; the registry's
``pdna`` with ``variant``) is trained by the run layer (``operators.training.train_run``) on the clean
sequences for several seeds and evaluated with gaps at test time only (``evaluation.gapped_evaluation``:
0, 5, 15, 30 % centred and a 20 % multi-gap, the gapped steps' inputs set to zero); degradation =
acc(0 %) − acc(30 %). The pixels are already in [0, 1], so the runs do not normalize them
(``data.normalize`` none, as the paper's models see them): a gap is a row of black pixels.

Split (``--seed``, default 0): a seeded permutation of the 1,797 digits, its first fifth (359) the test
split, the rest the training split (no validation split; ``--quick`` and ``--smoke`` train on its first
768 / 64). Training: AdamW lr 5e-3, weight decay 1e-4, cosine schedule over the epochs, gradients
clipped at 1, batch 64, dropout 0.1 before the head; the training seed also seeds variant B's noise.

Scales:

- full: hidden 64 (CfC backbone 128), 40 epochs, training seeds 42, 123, 456, 789, 1337.
- ``--medium``: hidden 64, 15 epochs, seeds 42, 123, 456 (the setting of RESULTS.md's PDNA table).
- ``--quick``: hidden 16 (backbone 32), 5 epochs, seed 42, 768 training digits: seconds per variant.
- ``--smoke``: hidden 4, one epoch, 64 training digits.

Outputs in ``--out`` (default ``runs/gapped_sequences``): ``results.json`` (accuracies in % per seed and
their mean ± std), ``gaps.png`` (accuracy per gap level and variant), ``data.nc`` and the run folders
``runs/seed<k>/<variant>``.

Example:
    python examples/gapped_sequences.py --quick
"""

from __future__ import annotations

import torch

import _common
import pde_data
from evaluation import GAP_LEVELS, gapped_evaluation, plots
from operators.training import DataSpec, OptimSpec, RunSpec, Splits, load_run

SCRIPT = "gapped_sequences"
COMMON = dict(variants="ABCDE", batch_size=64, lr=5e-3, dropout=0.1, train_limit=None)
SCALES = {
    "full": dict(COMMON, hidden=64, backbone_units=128, epochs=40, seeds=(42, 123, 456, 789, 1337)),
    "medium": dict(COMMON, hidden=64, backbone_units=128, epochs=15, seeds=(42, 123, 456)),
    "quick": dict(COMMON, hidden=16, backbone_units=32, epochs=5, seeds=(42,), train_limit=768),
    "smoke": dict(COMMON, hidden=4, backbone_units=8, epochs=1, seeds=(42,), train_limit=64),
}
NAMES = {"A": "Baseline CfC", "B": "CfC + Noise", "C": "CfC + Pulse", "D": "CfC + SelfAttend", "E": "Full PDNA"}
COLUMNS = (*GAP_LEVELS, "degradation")


def write_digits(cfg: dict, seed: int, out) -> tuple:
    """``data.nc`` (every digit as a sequence) and the split: a ``seed``-ed permutation's first fifth is the
    test split, the rest (at most ``train_limit`` of it, in permutation order) the training split."""
    data = pde_data.save(pde_data.generate_gapped_digits(seed=seed, gap=0.0), out / "data.nc")
    with pde_data.open_source(data).dataset as ds:
        n = ds.sizes["sample"]
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed)).tolist()
    test, train = order[:n // 5], order[n // 5:][:cfg["train_limit"]]
    splits = Splits(tuple(sorted(train)), (), tuple(sorted(test)))
    print(f"data: digits as 8 rows of 8 pixels, train/test = {len(train)}/{len(test)}", flush=True)
    return data, splits


def models(cfg: dict, seed: int) -> dict[str, tuple[str, dict]]:
    """``variant -> ("pdna", config)``; ``seed`` seeds variant B's noise."""
    return {v: ("pdna", {"units": cfg["hidden"], "backbone_units": cfg["backbone_units"], "variant": v,
                         "seed": seed, "dropout": cfg["dropout"]}) for v in cfg["variants"]}


@torch.no_grad()
def gapped(run_dir, data) -> dict[str, float]:
    """The Gapped protocol on the run's test split (the model of the last epoch): accuracy in % per level."""
    run = load_run(run_dir, checkpoint="last")
    test = list(run.spec.data.splits.test)
    x = pde_data.open_source(data).read(run.spec.data.inputs, test)  # (n, time, features), as in the file
    batch = run.task.batches(pde_data.open_source(data), test, cache=True).read_batch(list(range(len(test))))
    report = gapped_evaluation(run.model, run.task.normalizers.encode(x), batch.targets, dt=batch.dt)
    return {k: 100 * v for k, v in report.items()}


def one_seed(seed: int, cfg: dict, data, splits: Splits, args, out) -> dict[str, dict[str, float]]:
    """Train every variant with training seed ``seed`` on the clean sequences; its gapped accuracies (%),
    parameters and training time."""
    spec = RunSpec(data=DataSpec(inputs=("pixels",), targets=("label",), splits=splits, normalize=None),
                   optim=OptimSpec(epochs=cfg["epochs"], batch_size=cfg["batch_size"], lr=cfg["lr"], weight_decay=1e-4,
                                   optimizer="adamw", scheduler="cosine", grad_clip=1.0, seed=seed))
    trained = _common.train_models(models(cfg, seed), data, out / "runs" / f"seed{seed}", spec=spec,
                                   device=args.device)
    rows = {}
    for variant, run in trained.items():
        row = rows[variant] = {**gapped(run.run_dir, data), "params": run.n_params, "train_s": run.seconds}
        print(f"  seed {seed}, {variant}: clean {row['gap_0']:.2f} %, multi-gap {row['multi']:.2f} %", flush=True)
    return rows


def main() -> None:
    args, out, cfg, seeds = _common.start(__doc__, SCRIPT, SCALES)
    data, splits = write_digits(cfg, args.seed, out)
    per_seed = {seed: one_seed(seed, cfg, data, splits, args, out) for seed in seeds}
    summary = _common.seed_summary(per_seed)
    rows = _common.summary_means(summary)
    _common.print_table({f"{v}. {NAMES[v]}": {c: row[c] for c in COLUMNS} for v, row in rows.items()},
                        f"accuracy (%) at each gap level, mean over seeds {seeds}", fmt="{:.2f}")
    plots.plot_metric_bars({v: {c: row[c] for c in GAP_LEVELS} for v, row in rows.items()}, path=out / "gaps.png")
    _common.write_results(out, SCRIPT, args, {
        "settings": cfg, "seeds": seeds, "names": NAMES, "metrics": summary, "per_seed": per_seed,
        "chance_pct": 10.0, "n_test": len(splits.test),
    })


if __name__ == "__main__":
    main()
