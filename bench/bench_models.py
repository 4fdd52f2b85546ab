"""What every registry model costs: ``python -m bench.bench_models [--quick] [--only NAME ...] [--json FILE]``
(or ``circuitop bench models``).

For each model of :data:`operators.MODELS` at the sizes of :data:`FULL` (quick: the tiny ones of
:data:`bench.gpu_check.MODELS`), rows ``"<model>: <measure>"``:

- ``parameters``;
- ``peak MB eager`` / ``compiled``: the peak rise of live tensor memory over one training step (forward,
  mean-square loss, backward, gradients from none), replayed from torch.profiler's allocation events
  (:func:`evaluation.resources.peak_memory_mb`): tensors only, not the process's RSS;
- ``fwd`` (a forward under ``torch.no_grad``) and ``fwd+bwd`` (the training step above, no optimizer step)
  in ms, ``eager`` and ``compiled`` (``torch.compile(model)``, default mode), the minimum over interleaved
  rounds (eager, compiled, eager, ...), the range over the rounds in the detail; ``speed-up`` rows are
  eager / compiled per round;
- ``compile s``: the wall time of the first compiled forward and step (tracing, Inductor, C++ builds;
  the cache in ``TORCHINDUCTOR_CACHE_DIR``, default ``.torchinductor`` of the checkout, makes later runs faster);
- ``CKB share`` of the models hosting Cascaded Kirchhoff Blocks (or the vision backbone's Kirchhoff
  routing): the wall time between the outermost blocks' forward and backward hooks over the eager
  step's, the median over three steps.

Each model runs in its own process (``--worker NAME``) that prints its rows as it measures them: a compile
that outlasts the budget (:data:`BUDGET_S`) is stopped there and the model keeps its eager rows.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import torch
from torch import nn

import operators
from bench._util import Row, best_times_interleaved, busy_warning, peak_memory_mb, print_table
from bench.gpu_check import MODELS as TINY

__all__ = ["Case", "FULL", "BUDGET_S", "BENCHMARK", "cases", "run", "main"]

BENCHMARK = "models"
ROOT = Path(__file__).resolve().parents[1]
#: seconds one model's process may run (eager and compiled together), full and quick sizes
BUDGET_S = {False: 210.0, True: 90.0}


@dataclass(frozen=True)
class Case:
    """One model's benchmark input: ``config`` for :func:`operators.build`, fields ``(batch, 3, *[size] * n_dim)``
    (images: the same, 10 classes), or sequences ``(batch, length, 3)`` with step sizes and a padding mask
    when ``n_dim`` is 0."""

    config: dict = field(default_factory=dict)
    n_dim: int = 2
    batch: int = 8
    size: int = 64

    @property
    def shape(self) -> str:
        """The input, e.g. ``8x3x64^2`` or ``8x256x3 (batch, time, channels)``."""
        if self.n_dim == 0:
            return f"{self.batch}x{self.size}x3 (batch, time, channels)"
        return f"{self.batch}x3x{self.size}" + (f"^{self.n_dim}" if self.n_dim > 1 else "")

    def inputs(self, device: str = "cpu") -> tuple[torch.Tensor, ...]:
        """The model's inputs on ``device`` (drawn on the CPU); sequences: ``x (batch, length, 3)``,
        ``dt (batch, length)`` and a mask whose valid lengths fall from ``length`` to half of it."""
        if self.n_dim:
            return (torch.randn(self.batch, 3, *[self.size] * self.n_dim).to(device),)
        lengths = torch.linspace(self.size, self.size // 2, self.batch).round().long()
        made = (torch.randn(self.batch, self.size, 3), torch.rand(self.batch, self.size) + 0.1,
                torch.arange(self.size) < lengths[:, None])
        return tuple(t.to(device) for t in made)


_FNO = dict(n_modes=12, width=32, n_layers=4)
_UNET = dict(channel_multiplier=32)
_LINE = dict(n_dim=1, size=1024)
_SEQUENCE = dict(n_dim=0, size=256)
#: the full sizes: 2D fields 8x3x64² at width 32, the order-benchmark models on 1D fields 8x3x1024 at the
#: paper's blocks, the image classifiers' ``cpu`` size on 8x3x64² images, sequences 8x256x3 at width 32
FULL = {
    "fno": Case(_FNO), "chonn_fno": Case({**_FNO, "order": 2}), "nac_fno": Case(_FNO),
    "unet": Case(_UNET), "chonn_unet": Case({**_UNET, "order": 2}), "nac_unet": Case(_UNET),
    "ckb_chain": Case({"order": 2}, **_LINE), "depth_stack": Case({"depth": 2}, **_LINE),
    "ckb_stack": Case({"order": 2, "n_blocks": 2}, **_LINE),
    "chonn_vision": Case({"size": "cpu"}), "conv_vision": Case({"size": "cpu"}),
    "ltc": Case({"units": 32}, **_SEQUENCE), "cfc": Case({"units": 32}, **_SEQUENCE),
    "pdna": Case({"units": 32}, **_SEQUENCE), "nac": Case({"d_model": 32}, **_SEQUENCE),
    "ckb_seq": Case({"d_model": 32}, **_SEQUENCE), "gru": Case({"units": 32}, **_SEQUENCE),
    "attention": Case({"d_model": 32}, **_SEQUENCE),
}


def cases(quick: bool) -> dict[str, Case]:
    """Every registry model's case: :data:`FULL`, or gpu_check's tiny configs (batch 2, fields 16 wide,
    1D fields and sequences 64 long)."""
    if not quick:
        return FULL
    return {name: Case(config, n_dim, batch=2, size=16 if n_dim == 2 else 64) for name, (config, n_dim) in TINY.items()}


def _build(name: str, case: Case) -> nn.Module:
    torch.manual_seed(0)
    return operators.build(name, 3, 10 if operators.MODELS[name].domain == "images" else 1, **case.config)


def _forward(model: nn.Module, inputs: tuple) -> Callable[[], object]:
    def forward():
        with torch.no_grad():
            return model(*inputs)
    return forward


def _step(model: nn.Module, inputs: tuple) -> Callable[[], object]:
    """A training step without the optimizer: forward, mean-square loss, backward (gradients from none)."""
    def step():
        for p in model.parameters():
            p.grad = None
        model(*inputs).float().square().mean().backward()
    return step


def _rounds(fns: dict[str, Callable[[], object]], rounds: int) -> dict[str, list[float]]:
    """Seconds of each function in each of ``rounds`` interleaved rounds (after one warm-up call each); a
    function under 50 ms is called three times a round and keeps its fastest."""
    first = {name: best_times_interleaved({name: fn}, rounds=1, warmup=1)[name] for name, fn in fns.items()}
    repeat = {name: 3 if seconds < 0.05 else 1 for name, seconds in first.items()}
    times = [best_times_interleaved(fns, rounds=1, warmup=0, repeat=repeat) for _ in range(rounds)]
    return {name: [t[name] for t in times] for name in fns}


def _timing_rows(name: str, times: dict[str, list[float]], detail: str) -> Iterator[Row]:
    for what, seconds in times.items():
        yield Row(BENCHMARK, f"{name}: {what}", min(seconds) * 1e3, "ms",
                  f"{detail}; range {min(seconds) * 1e3:.4g}-{max(seconds) * 1e3:.4g} ms over {len(seconds)} rounds")
    for what in ("fwd", "fwd+bwd"):
        if f"{what} compiled" in times:
            ratios = [e / c for e, c in zip(times[f"{what} eager"], times[f"{what} compiled"])]
            yield Row(BENCHMARK, f"{name}: speed-up {what} (eager / compiled)", min(times[f"{what} eager"])
                      / min(times[f"{what} compiled"]), "x", f"per round {min(ratios):.3g}-{max(ratios):.3g}")


#: the outermost modules that make a model's Cascaded Kirchhoff Blocks
_BLOCKS = ("CascadedKirchhoffBlock", "CascadedKirchhoffBlock1d", "CascadedKirchhoffBlock2d", "KirchhoffRouting2d")


def _blocks(model: nn.Module) -> list[nn.Module]:
    """The model's outermost Kirchhoff blocks (:data:`_BLOCKS`), none inside another."""
    found, inner = [], set()
    for module in model.modules():
        if type(module).__name__ in _BLOCKS and id(module) not in inner:
            found.append(module)
            inner |= {id(m) for m in module.modules()}
    return found


def ckb_share(model: nn.Module, step: Callable[[], object], *, steps: int = 3) -> float:
    """Fraction of the eager ``step``'s wall time spent between the hooks of the outermost Kirchhoff blocks
    (forward: pre-hook to hook; backward: the gradient of the outputs to that of the inputs); the median
    over ``steps`` steps. NaN for a model without such blocks."""
    blocks = _blocks(model)
    if not blocks:
        return float("nan")
    spent, starts = [0.0], {}

    def begin(module, *_):
        starts[id(module)] = time.perf_counter()

    def end(module, *_):
        spent[0] += time.perf_counter() - starts.pop(id(module))

    handles = [h for b in blocks for h in (b.register_forward_pre_hook(begin), b.register_forward_hook(end),
                                          b.register_full_backward_pre_hook(begin), b.register_full_backward_hook(end))]
    try:
        shares = []
        for _ in range(steps):
            spent[0], start = 0.0, time.perf_counter()
            step()
            shares.append(spent[0] / (time.perf_counter() - start))
    finally:
        for handle in handles:
            handle.remove()
    return statistics.median(shares)


def measure(name: str, case: Case, *, rounds: int, device: str = "cpu", compile: bool = True) -> Iterator[Row]:
    """The rows of one model (module docstring) on ``device``: eager first, then compiled (eager retimed
    beside it) unless ``compile`` is False."""
    model, inputs = _build(name, case).to(device), case.inputs(device)
    sizes = f"{case.shape}, config {case.config}" + ("" if device == "cpu" else f", {device}")
    yield Row(BENCHMARK, f"{name}: parameters", sum(p.numel() for p in model.parameters()), "", sizes)
    fns = {"fwd eager": _forward(model, inputs), "fwd+bwd eager": _step(model, inputs)}
    yield from _timing_rows(name, _rounds(fns, rounds), "eager")
    yield Row(BENCHMARK, f"{name}: peak MB eager", peak_memory_mb(fns["fwd+bwd eager"], device), "MB",
              _PEAK[torch.device(device).type])
    share = ckb_share(model, fns["fwd+bwd eager"])
    if share == share:
        yield Row(BENCHMARK, f"{name}: CKB share", share, "", "outermost Kirchhoff blocks' hooks / eager step")
    if not compile:
        return
    compiled = torch.compile(model)
    fns |= {"fwd compiled": _forward(compiled, inputs), "fwd+bwd compiled": _step(compiled, inputs)}
    start = time.perf_counter()
    fns["fwd compiled"]()
    fns["fwd+bwd compiled"]()
    yield Row(BENCHMARK, f"{name}: compile s", time.perf_counter() - start, "s", "first compiled forward and step")
    yield from _timing_rows(name, _rounds(fns, rounds), "eager and compiled interleaved")
    yield Row(BENCHMARK, f"{name}: peak MB compiled", peak_memory_mb(fns["fwd+bwd compiled"], device), "MB",
              _PEAK[torch.device(device).type])


#: how the peak memory rows were measured, by device type
_PEAK = {"cpu": "live tensors over one training step (torch.profiler)",
         "cuda": "live tensors over one training step (torch.cuda.max_memory_allocated)"}


def _worker(name: str, quick: bool, device: str, compile: bool) -> int:
    """Print the rows of one model as JSON lines, each as soon as it is measured."""
    import logging
    import warnings

    warnings.simplefilter("ignore")  # dynamo's notes on graph breaks (the native kernels) go nowhere useful here
    torch._logging.set_logs(dynamo=logging.ERROR, inductor=logging.ERROR)
    threads = torch.get_num_threads()
    for row in measure(name, cases(quick)[name], rounds=2 if quick else 5, device=device, compile=compile):
        row.threads = threads
        print(json.dumps(asdict(row)), flush=True)
    return 0


def _run_model(name: str, *, quick: bool, device: str, compile: bool, budget: float | None = None) -> list[Row]:
    """One model's rows from its own process (:func:`_worker`); past :data:`BUDGET_S`, the process is stopped
    and the rows so far are kept with one that says so."""
    env = {"TORCHINDUCTOR_CACHE_DIR": str(ROOT / ".torchinductor"), "TORCH_EXTENSIONS_DIR": str(ROOT / ".torch_extensions"),
           **os.environ}
    cmd = [sys.executable, "-m", "bench.bench_models", "--worker", name, "--device", device]
    cmd += (["--quick"] if quick else []) + ([] if compile else ["--eager"])
    lines: list[str] = []
    with tempfile.TemporaryFile("w+") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=log, text=True)
        reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
        reader.start()
        try:
            proc.wait(timeout=budget or BUDGET_S[quick])
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        reader.join()
        log.seek(0)
        lines_err = log.read().splitlines()
        tail = [line for line in lines_err if "Error" in line.split(":")[0]][-1:] or lines_err[-1:] or [""]
    rows = {row.case: row for row in (Row(**json.loads(line)) for line in lines)}
    if proc.returncode != 0:
        why = (f"stopped after {budget or BUDGET_S[quick]:.0f} s" if proc.returncode == -9 else f"failed: {tail[0][:200]}")
        rows["stopped"] = Row(BENCHMARK, f"{name}: not finished", float("nan"), "", why)
    return list(rows.values())


def run(quick: bool = False, only: list[str] | None = None, device: str = "cpu", compile: bool = True,
        budget: float | None = None) -> list[Row]:
    """The rows of every registry model (or of ``only``) on ``device``, one process per model, each within
    ``budget`` seconds (default :data:`BUDGET_S`)."""
    rows = []
    for name in only or list(cases(quick)):
        print(f"bench_models: {name} ...", file=sys.stderr, flush=True)
        rows += _run_model(name, quick=quick, device=device, compile=compile, budget=budget)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.bench_models", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="gpu_check's tiny sizes, for a fast check")
    parser.add_argument("--only", nargs="+", metavar="MODEL", help=f"some of {sorted(FULL)}")
    parser.add_argument("--json", type=Path, help="also write the rows and the environment to this JSON file")
    parser.add_argument("--device", default="cpu", help="torch device of the models (default cpu)")
    parser.add_argument("--eager", action="store_true", help="eager rows only (no torch.compile)")
    parser.add_argument("--budget", type=float, default=None, metavar="S",
                        help=f"seconds per model's process (default {BUDGET_S[False]:.0f}, quick {BUDGET_S[True]:.0f})")
    parser.add_argument("--worker", metavar="MODEL", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    unknown = sorted(set(args.only or []) - set(FULL) | ({args.worker} - set(FULL) if args.worker else set()))
    if unknown:
        parser.error(f"unknown models {unknown}; expected some of {sorted(FULL)}")
    if args.worker:
        return _worker(args.worker, args.quick, args.device, not args.eager)
    from bench.__main__ import _write_json

    busy = busy_warning()
    rows = run(quick=args.quick, only=args.only, device=args.device, compile=not args.eager, budget=args.budget)
    footer = [f"{line} ({when})" for line, when in ((busy, "at the start"), (busy_warning(), "at the end")) if line]
    print_table(rows, title=f"circuitop models ({'quick' if args.quick else 'full'})", footer=footer)
    if args.json:
        _write_json(args.json, rows, argv if argv is not None else sys.argv[1:], quick=args.quick, busy=footer,
                    program="python -m bench.bench_models")
    return 1 if any(r.case.endswith("not finished") and r.detail.startswith("failed") for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
