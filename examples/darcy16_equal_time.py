"""Darcy flow at 16²: ``fno`` against ``chonn_fno`` (order 2; full and 2× coarsened grid) at equal wall time.

Data: neuraloperator 0.3.0's ``darcy_train_16.pt`` (1,000 samples: the first 800 train, the next 100
validate) and ``darcy_test_16.pt`` (50 samples), read with :func:`pde_data.open_source`. All models have
width 32 and 8 modes (the whole 16² spectrum), 4 layers; AdamW, the same learning rate, batch 20; the loss is
the relative L2 error of the prediction in physical units (inputs standardised, targets scaled by the
training mean and standard deviation).

Fairness: the models train in one process on one thread, interleaved step by step (the model that has
spent less time so far steps next), so a busy spell of the machine slows every model alike; each gets
``--seconds`` of wall time counted around its own steps (after one untimed warm-up pass), then is
scored once on the validation and test sets. Writes ``--out`` (default
``results/medium/darcy16_equal_time.json``): rel. L2 errors, steps, seconds, parameters per model and
seed, means, and the code version.

Example:
    OMP_NUM_THREADS=1 python examples/darcy16_equal_time.py --data-dir /tmp/nop/neuralop/datasets/data
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np
import torch

import evaluation
import operators
import pde_data
from operators.provenance import code_version
from operators.training import OptimSpec
from operators.training.optim import make_optimizer

MODELS = {
    "fno": dict(name="fno", width=32, n_modes=8),
    "chonn_fno": dict(name="chonn_fno", width=32, n_modes=8, order=2, downsample=1),
    # the CKB on a 2x coarsened grid: the placement whose step costs <= 2x fno's (RESULTS, bench)
    "chonn_fno_coarse": dict(name="chonn_fno", width=32, n_modes=8, order=2, downsample=2),
}
N_TRAIN, N_VAL, BATCH = 800, 100, 20


def load_fields(path: Path) -> tuple[torch.Tensor, torch.Tensor]:
    """``(input, target)`` of a neuraloperator Darcy file, each ``(sample, 1, x, y)`` float32."""
    ds = pde_data.open_source(path).dataset
    try:
        x, y = (torch.from_numpy(np.asarray(ds[name].values, dtype=np.float32)) for name in ("input", "target"))
    finally:
        ds.close()
    return x.unsqueeze(1), y.unsqueeze(1)


class Trainee:
    """One model, its optimizer and its own batch order; :meth:`step` is one AdamW step."""

    def __init__(self, config: dict, seed: int, lr: float, x: torch.Tensor, y: torch.Tensor, y_scale):
        config = dict(config)
        torch.manual_seed(seed)
        self.model = operators.build(config.pop("name"), 1, 1, **config)
        self.optimizer = make_optimizer(self.model.parameters(), OptimSpec(optimizer="adamw", lr=lr))
        self.x, self.y, (self.mean, self.std) = x, y, y_scale
        self.order = torch.Generator().manual_seed(seed)
        self.batches: list[torch.Tensor] = []
        self.steps, self.seconds = 0, 0.0
        # one untimed forward and backward (kernel loading, allocator warm-up), gradients then dropped
        evaluation.rel_l2(self.predict(x[:BATCH]), y[:BATCH]).backward()
        self.optimizer.zero_grad(set_to_none=True)

    def predict(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x) * self.std + self.mean

    def step(self) -> None:
        if not self.batches:
            self.batches = list(torch.randperm(len(self.x), generator=self.order).split(BATCH))
        index = self.batches.pop()
        start = time.perf_counter()
        self.optimizer.zero_grad(set_to_none=True)
        loss = evaluation.rel_l2(self.predict(self.x[index]), self.y[index])
        loss.backward()
        self.optimizer.step()
        self.seconds += time.perf_counter() - start
        self.steps += 1

    @torch.no_grad()
    def score(self, x: torch.Tensor, y: torch.Tensor) -> float:
        """Mean relative L2 error over the samples of ``(x, y)``."""
        self.model.eval()
        return float(evaluation.rel_l2(self.predict(x), y))


def train_equal_time(seed: int, seconds: float, lr: float, data: dict) -> dict[str, dict]:
    """Train every model of :data:`MODELS` for ``seconds`` of its own steps, interleaved; their scores."""
    x, y = data["train"]
    trainees = {name: Trainee(cfg, seed, lr, x, y, data["y_scale"]) for name, cfg in MODELS.items()}
    while any(t.seconds < seconds for t in trainees.values()):
        min(trainees.values(), key=lambda t: t.seconds).step()
    return {name: {"steps": t.steps, "seconds": round(t.seconds, 2),
                   "params": sum(p.numel() for p in t.model.parameters()),
                   "val_rel_l2": t.score(*data["val"]), "test_rel_l2": t.score(*data["test"])}
            for name, t in trainees.items()}


def prepare(data_dir: Path) -> dict:
    """Train/val/test tensors (inputs standardised by the training statistics) and the target scale."""
    x, y = load_fields(data_dir / "darcy_train_16.pt")
    x_test, y_test = load_fields(data_dir / "darcy_test_16.pt")
    train = slice(0, N_TRAIN)
    x_mean, x_std = x[train].mean(), x[train].std()
    standard = lambda v: (v - x_mean) / x_std  # noqa: E731
    return {"train": (standard(x[train]), y[train]),
            "val": (standard(x[N_TRAIN:N_TRAIN + N_VAL]), y[N_TRAIN:N_TRAIN + N_VAL]),
            "test": (standard(x_test), y_test), "y_scale": (y[train].mean(), y[train].std())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, required=True, help="folder with darcy_{train,test}_16.pt")
    parser.add_argument("--seconds", type=float, default=45.0, help="training wall time per model and seed")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--out", type=Path, default=Path("results/medium/darcy16_equal_time.json"))
    args = parser.parse_args()
    data = prepare(args.data_dir)
    runs = {}
    for seed in args.seeds:
        runs[str(seed)] = train_equal_time(seed, args.seconds, args.lr, data)
        print(f"seed {seed}: " + ", ".join(f"{m} test {r['test_rel_l2']:.4f} ({r['steps']} steps)"
                                           for m, r in runs[str(seed)].items()), flush=True)
    keys = ("test_rel_l2", "val_rel_l2", "steps")
    summary = {m: {key: statistics.mean(runs[s][m][key] for s in runs) for key in keys} for m in MODELS}
    result = {"setup": {"models": MODELS, "seconds": args.seconds, "lr": args.lr, "batch": BATCH,
                        "split": f"{N_TRAIN} train / {N_VAL} val of darcy_train_16.pt, test darcy_test_16.pt (50)",
                        "threads": torch.get_num_threads(), "fairness": "one process, steps interleaved by time used"},
              "runs": runs, "mean": summary, "code_version": code_version()}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
