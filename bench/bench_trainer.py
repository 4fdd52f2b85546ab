"""Our trainer against neuraloperator 2.0's ``Trainer``, both training neuraloperator's own ``FNO`` on its Darcy data.

``circuitop train --model fno`` builds neuraloperator's ``FNO`` class, so neuraloperator's ``Trainer`` on the
same data is the direct reference. Both train width 32, 8 modes (FNO-paper meaning; neuraloperator's
``n_modes=(16, 14)``), 4 layers, on the 800/100 training/validation split (``pde_data.split_indices``, seed 0)
of ``darcy_train_16.pt`` (1000 samples, 16²), batches of 32, ``Adam`` at 3e-3 without weight decay, Gaussian
normalisation of inputs and outputs, and report the validation relative L2 error in physical units.

Each measurement is a whole process (imports, data, normalisers, training, validation, and what each writes:
ours checkpoints, ``history.json``, ``metrics.csv`` and ``curves.png``; theirs nothing), run back to back in
rounds that interleave ours in memory, theirs, ours streamed, on one torch thread each. The ratio ours /
theirs is taken within each round; the rows give the median and the range over rounds. The per-epoch times
measured inside each process (training only) are in the details.

- in memory: ours reads the ``.pt`` file (cached in memory, no workers); theirs loads it in memory.
- streamed: ours trains from the same data written as a PDEBench Darcy HDF5 file in /tmp, read batch by batch
  (``--cache stream``, default workers); theirs still from the ``.pt`` in memory.

Where the whole-process difference comes from (wall-clock phases of one of our processes on a quiet machine,
10 epochs, 2026-11-26): the training loops take the same time (ratio 0.99-1.02), and so do the validation
passes (0.8 s in all: the same forward over 100 samples; our four metrics add 0.04 s). The rest, about 2.5 s, is
what ours does beside training: the start, 1.7 s longer than theirs (0.6 s of it imports: the xarray/pandas
data model, the HDF5/NetCDF readers, TensorBoard; the rest opening and checking the data, resolving the run
spec, fitting normalisers, claiming the run folder), ``curves.png`` (0.6 s), a checkpoint, the history and
metrics.csv each epoch (0.2 s) and TensorBoard events (0.05 s). Both pay torch._dynamo's import (1.1 s, from
``torch.optim.Adam``) and neuraloperator's (0.7 s, wandb included).

The data: neuraloperator 0.3.0's wheel ships ``neuralop/datasets/data/darcy_train_16.pt``; the benchmark
fetches the wheel once with ``pip download neuraloperator==0.3.0 --no-deps`` into :data:`CACHE` (never at
test time). Run: ``python -m bench.bench_trainer [--quick]`` (quick: 2 epochs, 2 rounds).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

from bench._util import Row, busy_warning, print_table

__all__ = ["run", "darcy_file", "CACHE"]

#: where the neuraloperator 0.3.0 wheel and the data file extracted from it are kept between runs
CACHE = Path(tempfile.gettempdir()) / "circuitop-bench"
_WHEEL = "neuraloperator-0.3.0-py3-none-any.whl"
_MEMBER = "neuralop/datasets/data/darcy_train_16.pt"
_ROOT = Path(__file__).resolve().parents[1]
_SPLIT, _WIDTH, _MODES, _BATCH, _LR = (800, 100, 100), 32, 8, 32, 3e-3


def darcy_file(cache: Path = CACHE) -> Path:
    """``darcy_train_16.pt`` from neuraloperator 0.3.0's wheel, downloaded into ``cache`` the first time."""
    target = cache / Path(_MEMBER).name
    if target.is_file():
        return target
    wheel = cache / _WHEEL
    if not wheel.is_file():
        command = [sys.executable, "-m", "pip", "download", "neuraloperator==0.3.0", "--no-deps", "-d", str(cache)]
        if subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode != 0:
            raise RuntimeError(f"expected {wheel} (from `{' '.join(command[2:])}`), found none and the download "
                               "failed; put the wheel there")
    with zipfile.ZipFile(wheel) as zf, open(target, "wb") as out:
        out.write(zf.read(_MEMBER))
    return target


def _pdebench_copy(pt: Path, folder: Path) -> Path:
    """The ``.pt`` file's inputs and targets as ``a`` and ``u`` of a PDEBench Darcy-layout HDF5 file."""
    import pde_data

    ds = pde_data.open_source(pt).dataset.rename(input="a", target="u").astype("float32")
    return pde_data.write_pdebench(ds, folder / "darcy_train_16.h5", layout="darcy")


@dataclass
class _Result:
    """One whole process: its wall and CPU time (with its workers'), the training time of each epoch inside it,
    the final validation rel. L2."""

    wall_s: float
    cpu_s: float
    epoch_s: list[float]
    val_rel_l2: float


def _cpu_of_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _timed(command: list[str]) -> tuple[float, float, str]:
    """Wall and CPU seconds of ``command`` as a whole process on one torch thread, and its stdout."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    cpu, start = _cpu_of_children(), time.perf_counter()
    done = subprocess.run(command, cwd=_ROOT, env=env, capture_output=True, text=True)
    wall, cpu = time.perf_counter() - start, _cpu_of_children() - cpu
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command[:4])} ...: exit status {done.returncode}: {done.stderr[-2000:]}")
    return wall, cpu, done.stdout


def _ours(data: Path, out: Path, epochs: int, extra: list[str], device: str) -> _Result:
    split = ",".join(map(str, _SPLIT))
    # padding=0: neuraloperator's side builds its FNO without domain padding (the same model on both sides)
    options = ["--model", "fno", "--config", f"width={_WIDTH}", f"n_modes={_MODES}", "padding=0", "--split", split,
               "--epochs", str(epochs), "--batch-size", str(_BATCH), "--lr", str(_LR), "--optimizer", "adam",
               "--weight-decay", "0", "--normalize", "gaussian", "--threads", "1", "--device", device, "--out", str(out),
               "--overwrite"]
    wall, cpu, _ = _timed([sys.executable, "-m", "operators.cli", "train", "--data", str(data), *options, *extra])
    history = json.loads((out / "history.json").read_text())
    return _Result(wall, cpu, [r["epoch_s"] for r in history], history[-1]["val_rel_l2"])


def _theirs(data: Path, splits: Path, epochs: int, device: str) -> _Result:
    from operators.models.fno import expand_modes, neuralop_modes

    modes = neuralop_modes(expand_modes(_MODES, 2))
    options = ["--splits", str(splits), "--epochs", str(epochs), "--batch-size", str(_BATCH), "--lr", str(_LR),
               "--width", str(_WIDTH), "--n-modes", *map(str, modes), "--device", device]
    wall, cpu, stdout = _timed([sys.executable, "-m", "bench._neuralop_trainer", "--data", str(data), *options])
    result = json.loads(stdout.strip().splitlines()[-1])
    return _Result(wall, cpu, result["epoch_s"], result["val_rel_l2"])


def _rows(case: str, ours: list[_Result], theirs: list[_Result], epochs: int, note: str) -> list[Row]:
    ratios = [a.wall_s / b.wall_s for a, b in zip(ours, theirs)]
    inside = [statistics.median(r.epoch_s) / statistics.median(t.epoch_s) for r, t in zip(ours, theirs)]
    cpu = [a.cpu_s / b.cpu_s for a, b in zip(ours, theirs)]

    def per_epoch(results: list[_Result], who: str) -> Row:
        walls = [r.wall_s / epochs for r in results]
        epoch = statistics.median(e for r in results for e in r.epoch_s)
        return Row("trainer", f"{case}: {who} whole process / epoch", min(walls), "s",
                   f"min over {len(walls)}, range {min(walls):.3g}-{max(walls):.3g}; training alone "
                   f"{epoch:.3g} s/epoch (median)", threads=1)

    acc = ours[-1].val_rel_l2 / theirs[-1].val_rel_l2
    return [
        per_epoch(ours, "ours"), per_epoch(theirs, "neuraloperator"),
        Row("trainer", f"{case}: time ours / neuraloperator", statistics.median(ratios), "x",
            f"whole processes, median of {len(ratios)} rounds, range {min(ratios):.3f}-{max(ratios):.3f} "
            f"(<1: ours faster); training alone {statistics.median(inside):.3f} "
            f"({min(inside):.3f}-{max(inside):.3f}); CPU time {statistics.median(cpu):.3f} "
            f"({min(cpu):.3f}-{max(cpu):.3f}); {note}", threads=1),
        Row("trainer", f"{case}: val rel L2 ours / neuraloperator", acc, "x",
            f"ours {ours[-1].val_rel_l2:.4f}, neuraloperator {theirs[-1].val_rel_l2:.4f} after {epochs} epochs",
            threads=1),
    ]


def run(quick: bool = False, device: str = "cpu", rounds: int | None = None) -> list[Row]:
    """The rows of both cases on ``device`` (both trainers; ``cuda``: the models and batches on the GPU, the
    data files and our streaming workers on the CPU as a user's run has them), over ``rounds`` rounds (default
    3, quick 2)."""
    import pde_data

    epochs, rounds = (2, rounds or 2) if quick else (10, rounds or 3)
    pt = darcy_file()
    folder = Path(tempfile.mkdtemp(prefix="bench-trainer-"))
    try:
        h5 = _pdebench_copy(pt, folder)
        splits = folder / "splits.json"
        parts = pde_data.split_indices(1000, sizes=list(_SPLIT), seed=0)
        splits.write_text(json.dumps({k: v.tolist() for k, v in parts.items()}))
        memory, theirs, streamed = [], [], []
        for _ in range(rounds):
            memory.append(_ours(pt, folder / "memory", epochs, [], device))
            theirs.append(_theirs(pt, splits, epochs, device))
            streamed.append(_ours(h5, folder / "streamed", epochs, ["--input", "a", "--target", "u",
                                                                    "--cache", "stream"], device))
        on = "" if device == "cpu" else f", {device}"
        return (_rows(f"in memory{on}", memory, theirs, epochs, "both from the .pt file in memory")
                + _rows(f"streamed{on}", streamed, theirs, epochs, "ours streams a PDEBench HDF5 copy in /tmp "
                        "(--cache stream, default workers), theirs reads the .pt in memory"))
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 epochs, 2 rounds")
    parser.add_argument("--device", default="cpu", help="torch device of both trainers (default cpu)")
    parser.add_argument("--rounds", type=int, default=None, help="rounds of the three processes (default 3, quick 2)")
    parser.add_argument("--json", type=Path, help="also write the rows to this JSON file")
    args = parser.parse_args()
    warning = busy_warning()
    rows = run(quick=args.quick, device=args.device, rounds=args.rounds)
    print_table(rows, "trainer: ours vs neuraloperator's Trainer", footer=[warning] if warning else [])
    if args.json:
        from bench.__main__ import _write_json

        _write_json(args.json, rows, sys.argv[1:], quick=args.quick, busy=[warning] if warning else [],
                    program="python -m bench.bench_trainer")


if __name__ == "__main__":
    main()
