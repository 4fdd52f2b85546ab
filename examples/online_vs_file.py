"""Online against file-based training on Navier–Stokes at equal wall-clock time (a small CPU scale).

Both arms train the same FNO (one-step, ``window 1``) for the same budget of seconds and are scored on the same
test file (16 samples of their own seed): one step from the first frame, and rolled out from it to the last
frame (relative L2 over the whole rollout):

- **file**: ``circuitop generate ns`` writes ``N_FILE`` samples, then training cycles over them. The generation's
  wall clock counts in the budget (a file that is not there yet has to be made).
- **online**: ``train --generate ns``: each epoch trains on ``N_EPOCH`` new samples, made as it goes (the next
  epoch's in a background thread), the generation inside the budget too.

The budget is wall clock: the file's generation, then a ``circuitop train`` process (start-up, the first epoch's
samples and the normalizers included) stopped when the budget is spent; each arm is scored with the ``last.pt``
of its last finished epoch (neither validates). Then ``overlap`` times the online arm's epochs with the next
epoch made in a background thread against made in turn, interleaved.

Run with ``OMP_NUM_THREADS=1``; the machine's two cores are shared with other work (the JSON says so).

    OMP_NUM_THREADS=1 python examples/online_vs_file.py [--smoke] [--out results/medium/online_vs_file.json]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from operators.provenance import code_version  # noqa: E402
from operators.training import RunSpec, evaluate_run, load_checkpoint, train_run  # noqa: E402
from pde_data.generate.registry import GenerationSpec, make_samples  # noqa: E402

#: scale -> generator parameters, samples of the file, samples per online epoch, budget (s), test samples
SCALES = {
    "medium": dict(gen={"n_sim": 32, "n_out": 32, "t_final": 5.0, "n_records": 10, "batch_size": 8},
                   n_file=64, n_epoch=32, budget=150.0, n_test=16),
    "smoke": dict(gen={"n_sim": 32, "n_out": 16, "t_final": 1.0, "n_records": 4, "batch_size": 4},
                  n_file=8, n_epoch=4, budget=45.0, n_test=4),
}
MODEL = {"n_modes": 8, "width": 16, "n_layers": 3}
TEST_SEED = 1000


def _base(seed: int) -> RunSpec:
    return RunSpec().override({"task.window": 1, "task.periodic": True, "model.name": "fno", "model.config": MODEL, "optim.epochs": 1,
                               "optim.batch_size": 16, "optim.scheduler": "none", "optim.seed": seed})


def _generate_file(path: Path, scale: dict, seed: int) -> float:
    """``circuitop generate ns`` of the file arm's samples; returns its wall clock (s)."""
    g = scale["gen"]
    cmd = [sys.executable, "-m", "operators.cli", "generate", "ns", "--out", str(path), "--n", str(scale["n_file"]),
           "--seed", str(seed), "--n-sim", str(g["n_sim"]), "--n-out", str(g["n_out"]), "--t-final", str(g["t_final"]),
           "--records", str(g["n_records"]), "--batch-size", str(g["batch_size"]), "--device", "cpu"]
    start = time.perf_counter()
    subprocess.run(cmd, check=True, cwd=ROOT, capture_output=True)
    return time.perf_counter() - start


def _train_for(spec: RunSpec, out: Path, seconds: float) -> list[dict]:
    """``circuitop train`` of ``spec`` (endless epochs) into ``out``, stopped after ``seconds`` of wall clock;
    the history of its last finished epoch."""
    out.mkdir(parents=True)
    config = out.parent / f"{out.name}.yaml"
    config.write_text(spec.request().to_yaml())
    cmd = [sys.executable, "-m", "operators.cli", "train", "--config-file", str(config), "--epochs", "100000",
           "--out", str(out), "--overwrite", "--no-progress", "--threads", "1"]
    try:
        subprocess.run(cmd, cwd=ROOT, capture_output=True, timeout=max(seconds, 1.0), check=True)
    except subprocess.TimeoutExpired:
        pass  # the budget is spent: last.pt holds the last finished epoch
    return list(load_checkpoint(out / "last.pt")["history"])


def _arm(label: str, history: list[dict], out: Path, test: Path, spent: float, samples_seen: int) -> dict:
    one, whole = (evaluate_run(out, test, samples="all", checkpoint="last", write=False, steps=steps)
                  for steps in (1, None))
    return {"arm": label, "epochs": len(history), "samples_seen": samples_seen,
            "distinct_samples": samples_seen if label == "online" else None, "generation_s": spent,
            "train_s": sum(r["epoch_s"] for r in history), "final_train_loss": history[-1]["train_loss"],
            "test_step_rel_l2": one["metrics"]["rel_l2"], "test_rollout_rel_l2": whole["metrics"]["rel_l2"],
            "rollout_steps": whole["rollout"]["steps"]}


def compare(scale: dict, seed: int, work: Path, test: Path) -> list[dict]:
    """The file arm and the online arm of training seed ``seed`` (data seed ``seed`` for both)."""
    data = work / f"train-{seed}.nc"
    spent = _generate_file(data, scale, seed)
    spec = _base(seed).override({"data.path": str(data), "data.split": (scale["n_file"], 0, 0),
                                 "loading.cache": "memory"})
    history = _train_for(spec, work / f"file-{seed}", scale["budget"] - spent)
    rows = [_arm("file", history, work / f"file-{seed}", test, spent, len(history) * scale["n_file"])]
    rows[0]["distinct_samples"] = scale["n_file"]
    online = _base(seed).override({"data.generate": "ns", "data.generator": scale["gen"], "data.path": str(test),
                                   "data.split": (0, 0, scale["n_test"]), "data.samples_per_epoch": scale["n_epoch"],
                                   "data.generate_seeds": (seed, TEST_SEED + 1)})
    history = _train_for(online, work / f"online-{seed}", scale["budget"])
    rows.append(_arm("online", history, work / f"online-{seed}", test, 0.0, len(history) * scale["n_epoch"]))
    return rows


def overlap(scale: dict, work: Path, *, epochs: int = 4, repeats: int = 2) -> dict:
    """Seconds per online epoch with the next epoch made in the background (``loading.workers`` default) and
    in turn (``workers 0``), interleaved; epochs 2.. (epoch 1's samples are made before training starts)."""
    times: dict[str, list[float]] = {"background": [], "in_turn": []}
    for _ in range(repeats):
        for mode, workers in (("in_turn", 0), ("background", None)):
            spec = _base(0).override({"data.generate": "ns", "data.generator": scale["gen"], "optim.epochs": epochs,
                                      "data.samples_per_epoch": scale["n_epoch"], "data.split": (0, 0, 1),
                                      "loading.workers": workers})
            history = train_run(spec, work / f"overlap-{mode}", progress=False, overwrite=True)
            times[mode].append(sum(r["epoch_s"] for r in history[1:]) / (epochs - 1))
    ratios = [a / b for a, b in zip(times["in_turn"], times["background"])]
    return {"epoch_s": times, "in_turn_over_background": {"min": min(ratios), "max": max(ratios)}}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--smoke", action="store_true", help="seconds-long check of the script")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--out", type=Path, default=ROOT / "results" / "medium" / "online_vs_file.json")
    args = p.parse_args()
    scale = SCALES["smoke" if args.smoke else "medium"]
    start = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="online_vs_file."))
    try:
        test = work / "test.nc"
        fixed = GenerationSpec("ns", scale["n_test"], TEST_SEED, scale["gen"])
        make_samples(fixed, range(fixed.n)).to_netcdf(test)
        rows = [row | {"seed": seed} for seed in args.seeds for row in compare(scale, seed, work, test)]
        timing = overlap(scale, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    payload = {"script": "examples/online_vs_file.py", "scale": "smoke" if args.smoke else "medium",
               "settings": {**scale, "model": MODEL, "test_seed": TEST_SEED,
                            "budget_counts": "wall clock of the file's generation plus the training process, stopped "
                                             "when spent; the file arm's generation counts in its budget"},
               "environment": {"torch": torch.__version__, "threads": torch.get_num_threads(), "device": "cpu",
                               "note": "2 CPU cores shared with other agents' jobs: timings are noisy",
                               **code_version()},
               "rows": rows, "overlap": timing, "wall_s": time.perf_counter() - start}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(payload, indent=1))
    from examples._online_tables import online_vs_file

    print("\n".join(online_vs_file(payload)))


if __name__ == "__main__":
    main()
