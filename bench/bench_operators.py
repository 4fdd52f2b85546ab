"""Training-step cost of the CKB- and NAC-hosting FNOs against the FNO baseline, side by side.

One AdamW step as the trainer takes it (forward, relative-L2 loss, backward, multi-tensor update) on
a batch of 20 fields at 64×64 (the CHONN Navier–Stokes setting: width 20, 12 modes, 4 layers), for ``fno`` (neuraloperator's FNO),
``chonn_fno`` at order 0 (its SpectralConv host, no block) and order 2 (CKB in place of the 1×1 w0 branch,
the default and the paper's placement; on the grid coarsened by
2, the shallow-water setting, by 4, and in quick mode by 1, the default; and with ``expand=1``, the cells at the block's
width as Eq. 38 is written), and ``nac_fno`` (factor 2). Ratios are
``time / time(fno)`` measured in the same run — every model steps once per round, best of 5 rounds,
so that a slow spell of the machine hits all alike (target: CKB overhead ≤ 2×); the CKB-hosting rows are also
given against their own host, ``chonn_fno`` at order 0 (``/ chonn_fno order 0 (host)``), which isolates
what the blocks cost; samples/s = batch / time.

Full mode adds the full-grid rows (:data:`FULL_GRID_SIZES`): ``chonn_fno`` order 2, downsample 1 (the CKB
scanning all size² points) against ``fno`` at width 32, 8 modes, batch 8, best of 3 interleaved rounds,
with the peak rise of live tensor memory of one ``chonn_fno`` step, and the bound row: the 8 cells' native
scans alone (forward and backward, nothing around them) against a whole ``fno`` step. The bound: every
cell advances batch × size² × d_inner × d_state = 8 · size² · 64 · 16 potentials, each with one exp/expm1
in the forward and one in the backward's recomputation (chunk checkpoints: storing the states instead
would take 8 · 134 MB at 64²), sequential along the scan. Where the scans alone already take more than
2× an ``fno`` step (RESULTS.md gives the measured rows), ≤ 2× on the full grid needs less work per point
(``downsample``, ``d_state``, ``expand``), not a faster kernel. On CUDA the bound row times the Triton
kernels instead (``Triton scan kernels alone``).

    python -m bench.bench_operators [--quick] [--threads N]
"""

from __future__ import annotations

import argparse
import importlib.util

import torch

import evaluation
import operators
import circuitop
from operators.training import OptimSpec
from operators.training.optim import make_optimizer
from bench._util import Row, best_times_interleaved, peak_memory_mb, print_table

__all__ = ["run", "FULL_GRID_SIZES", "HOST"]

#: grids of the full-grid rows (full mode): the CKB's scan runs over the flattened size² points
FULL_GRID_SIZES = (16, 64, 128)
_SCANS = "scan kernels alone (8 cells, fwd + bwd)"
#: the CKB's own host: the same FNO with no blocks
HOST = "chonn_fno order 0 (host)"


def _models(width: int, n_modes: int, n_layers: int, quick: bool) -> dict[str, dict]:
    common = {"width": width, "n_modes": n_modes, "n_layers": n_layers}
    full_grid = {"chonn_fno order 2, downsample 1": {"name": "chonn_fno", **common, "order": 2, "downsample": 1}}
    return {
        "fno": {"name": "fno", **common},
        HOST: {"name": "chonn_fno", **common, "order": 0},
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


def _scan_kernels_fn(*, batch: int, length: int, d_inner: int, d_state: int, cells: int, device: torch.device):
    """One forward and backward of the fused ZOH scan for each of ``cells`` cells on ``(batch, length, d_inner)``
    with ``d_state`` potentials: the scans of a ``chonn_fno`` training step without anything around them. On the
    CPU the native kernels (``circuitop/csrc/kirchhoff.cpp``), on CUDA the Triton ones (:mod:`circuitop.knc_triton`);
    None where the device has neither."""
    gen = torch.Generator().manual_seed(0)
    u, grad = (torch.randn(batch, length, d_inner, generator=gen).to(device) for _ in range(2))
    proj = (torch.randn(batch, length, d_inner + 2 * d_state, generator=gen) - 2.0).to(device)
    lam, skip = torch.arange(1.0, d_state + 1).repeat(d_inner, 1).to(device), torch.ones(d_inner, device=device)
    if device.type == "cuda":
        if importlib.util.find_spec("triton") is None:
            return None
        from circuitop.knc_triton import TritonZohScanFn

        u.requires_grad_(True)
        proj.requires_grad_(True)

        def triton_scans():
            for _ in range(cells):
                TritonZohScanFn.apply(u, proj, None, lam, skip).backward(grad)

        return triton_scans
    ops = circuitop.kirchhoff_kernels() if device.type == "cpu" else None
    if ops is None:
        return None

    def scans():
        for _ in range(cells):
            _, checkpoints = ops.zoh_forward(u, proj, None, lam, skip)
            ops.zoh_backward(u, proj, None, lam, skip, checkpoints, grad)

    return scans


def _full_grid_rows(device: torch.device) -> list[Row]:
    """``chonn_fno`` (order 2, downsample 1: the CKB on the full grid) against ``fno`` at each of
    :data:`FULL_GRID_SIZES`, width 32, 8 modes, 4 layers, batch 8, interleaved best of 3 rounds; with
    the peak rise of live tensor memory of one ``chonn_fno`` step."""
    common = {"width": 32, "n_modes": 8, "n_layers": 4}
    models = {"fno": {"name": "fno", **common},
              "chonn_fno order 2, downsample 1": {"name": "chonn_fno", **common, "order": 2, "downsample": 1}}
    threads = f"{torch.get_num_threads()} thread(s)" if device.type == "cpu" else device.type
    rows = []
    for size in FULL_GRID_SIZES:
        gen = torch.Generator().manual_seed(0)
        x, y = (torch.randn(8, 1, size, size, generator=gen).to(device) for _ in range(2))
        steps = {name: _step_fn(cfg, x, y) for name, cfg in models.items()}
        # the bound: the native CPU kernels, or on a GPU the Triton ones (named apart: earlier GPU runs timed the CPU's)
        scans = _scan_kernels_fn(batch=8, length=size * size, d_inner=64, d_state=16, cells=8, device=device)
        scans_name = _SCANS if device.type == "cpu" else f"Triton {_SCANS}"
        times = best_times_interleaved(steps | ({scans_name: scans} if scans else {}), rounds=3)
        memory = peak_memory_mb(steps["chonn_fno order 2, downsample 1"], device)
        detail = f"{threads}, batch 8×1×{size}×{size}, width 32, 8 modes, 4 layers"
        grid = f"full grid {size}²"
        for name, seconds in times.items():
            rows.append(Row("operators train step", f"{name}, {grid}", seconds, "s", detail))
        ratio = times["chonn_fno order 2, downsample 1"] / times["fno"]
        rows.append(Row("operators train step", f"chonn_fno order 2, downsample 1 / fno, {grid}", ratio, "ratio",
                        "time ratio (target ≤ 2)"))
        if scans:
            rows.append(Row("operators train step", f"{scans_name} / fno, {grid}", times[scans_name] / times["fno"],
                            "ratio", "the bound: chonn_fno's scans alone, against a whole fno step"))
        rows.append(Row("operators train step", f"chonn_fno order 2, downsample 1 memory, {grid}", memory, "MB",
                        f"{detail}: peak rise of live tensors in one step"))
    return rows


def run(quick: bool = False) -> list[Row]:
    """Rows: seconds per training step, ratio to ``fno``, samples per second, for each model; in full
    mode also the full-grid comparison at 16², 64² and 128² (:func:`_full_grid_rows`)."""
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
        if name.startswith("chonn_fno") and name != HOST:
            rows.append(Row("operators train step", f"{name} / {HOST}", seconds / times[HOST], "ratio",
                            "time ratio: the blocks' cost over their own host"))
        rows.append(Row("operators throughput", name, batch / seconds, "samples/s", detail))
    return rows if quick else rows + _full_grid_rows(device)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="32×32, batch 4, 2 layers")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print_table(run(quick=args.quick), "operators: training step, CKB/NAC hosts vs FNO")
