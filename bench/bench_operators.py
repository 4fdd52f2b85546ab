"""Training-step cost of the CKB- and NAC-hosting FNOs against the FNO baseline, side by side.

One AdamW step as the trainer takes it (forward, relative-L2 loss, backward, multi-tensor update) on
a batch of 20 fields at 64×64 (the CHONN Navier–Stokes setting: width 20, 12 modes, 4 layers), for ``fno`` (neuraloperator's FNO),
``chonn_fno`` at order 0 (its SpectralConv host, no block) and order 2 (CKB in place of the 1×1 w0 branch,
the default and the paper's placement; on the grid coarsened by
2, the shallow-water setting, by 4, and in quick mode by 1, the default; and with ``expand=1``, the cells at the block's
width as Eq. 38 is written), and ``nac_fno`` (factor 2). Ratios are
``time / time(fno)`` measured in the same run — every model steps once per round, best of 5 rounds,
so that a slow spell of the machine hits all alike (target: CKB overhead ≤ 2×); samples/s = batch / time.

    python -m bench.bench_operators [--quick] [--threads N]
"""

from __future__ import annotations

import argparse

import torch

import evaluation
import operators
from operators.training import OptimSpec
from operators.training.optim import make_optimizer
from bench._util import Row, best_times_interleaved, print_table

__all__ = ["run"]


def _models(width: int, n_modes: int, n_layers: int, quick: bool) -> dict[str, dict]:
    common = {"width": width, "n_modes": n_modes, "n_layers": n_layers}
    full_grid = {"chonn_fno order 2, downsample 1": {"name": "chonn_fno", **common, "order": 2, "downsample": 1}}
    return {
        "fno": {"name": "fno", **common},
        "chonn_fno order 0 (host)": {"name": "chonn_fno", **common, "order": 0},
        "chonn_fno order 2, downsample 2": {"name": "chonn_fno", **common, "order": 2, "d_state": 16, "downsample": 2},
        "chonn_fno order 2, downsample 4": {"name": "chonn_fno", **common, "order": 2, "d_state": 16, "downsample": 4},
        # Eq. 38 as the paper writes it (Y = X + ȳ ⊙ g) needs the cells at the block's own width
        "chonn_fno order 2, ds 2, expand 1": {"name": "chonn_fno", **common, "order": 2, "d_state": 16, "expand": 1,
                                              "downsample": 2},
        "nac_fno": {"name": "nac_fno", **common, "num_heads": 2, "topk": 8},
        # the CKB on the full 64² grid needs ~10 GB on CPU at batch 20: quick mode only
        **(full_grid if quick else {}),
    }


def _step_fn(config: dict, x: torch.Tensor, y: torch.Tensor):
    config = dict(config)
    torch.manual_seed(0)
    model = operators.build(config.pop("name"), x.shape[1], y.shape[1], **config).to(x.device)
    optimizer = make_optimizer(model.parameters(), OptimSpec(optimizer="adamw", lr=1e-3))  # the trainer's

    def step():
        optimizer.zero_grad(set_to_none=True)
        loss = evaluation.rel_l2(model(x), y)
        loss.backward()
        optimizer.step()

    return step


def run(quick: bool = False) -> list[Row]:
    """Rows: seconds per training step, ratio to ``fno``, samples per second, for each model."""
    size, batch = (32, 4) if quick else (64, 20)
    width, n_modes, n_layers = (20, 8, 2) if quick else (20, 12, 4)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(batch, 1, size, size, generator=gen).to(device)
    y = torch.randn(batch, 1, size, size, generator=gen).to(device)
    steps = {name: _step_fn(cfg, x, y) for name, cfg in _models(width, n_modes, n_layers, quick).items()}
    times = best_times_interleaved(steps, rounds=3 if quick else 5)
    threads = f"{torch.get_num_threads()} thread(s)" if device.type == "cpu" else device.type
    detail = f"{threads}, batch {batch}×1×{size}×{size}, width {width}, {n_modes} modes, {n_layers} layers"
    rows = []
    for name, seconds in times.items():
        rows.append(Row("operators train step", name, seconds, "s", detail))
        rows.append(Row("operators train step", f"{name} / fno", seconds / times["fno"], "ratio", "time ratio"))
        rows.append(Row("operators throughput", name, batch / seconds, "samples/s", detail))
    return rows


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="32×32, batch 4, 2 layers")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print_table(run(quick=args.quick), "operators: training step, CKB/NAC hosts vs FNO")
