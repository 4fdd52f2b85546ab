"""Shared pieces of the example scripts: options and scales, tensors from the data model, the
model-comparison loop (built on ``operators.training.Trainer``), results JSON and printed tables.

Every example runs at one of three scales, chosen on the command line:

- ``full``  (default): the paper's protocol; a GPU run (see each script's docstring).
- ``--quick``: a CPU-sized version, a few minutes on two cores.
- ``--smoke``: a few samples and one epoch, seconds; used by ``tests/test_examples.py``.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

import evaluation
import operators
import pde_data
from operators.training import TrainConfig, Trainer, epoch_order
from operators.training.distributed import DistInfo
from pde_data import atomic_path

__all__ = ["parser", "setup", "settings", "fit_normalizers", "split_in_order", "encode", "Fitted", "train_model",
           "compare_models", "n_params", "field_metrics", "SelfAttention", "fit_regression",
           "predict_regression", "write_results", "print_table", "ratios", "finite", "positive_int"]

SCALES = ("smoke", "quick", "full")


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1, with a clear error otherwise."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, found {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, found {value}")
    return value


def parser(doc: str) -> argparse.ArgumentParser:
    """An argparse parser with the options every example shares."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    scale = p.add_mutually_exclusive_group()
    scale.add_argument("--quick", action="store_true", help="CPU-sized run (a few minutes)")
    scale.add_argument("--smoke", action="store_true", help="tiny run for the tests (seconds)")
    p.add_argument("--out", type=Path, default=None, help="output folder (default runs/<script>)")
    p.add_argument("--seed", type=int, default=0, help="seed of data splits, initialisation and batches")
    p.add_argument("--epochs", type=positive_int, default=None, help="override the scale's epoch count")
    p.add_argument("--device", default=None, help="torch device (default: cuda if available, else cpu)")
    p.add_argument("--threads", type=positive_int, default=None, help="torch CPU threads")
    return p


def setup(args: argparse.Namespace, script: str) -> Path:
    """Scale, seeds, threads and the output folder; returns the folder."""
    args.scale = "smoke" if args.smoke else "quick" if args.quick else "full"
    if args.device is None:
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit(f"--device {args.device}: CUDA is not available on this machine")
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    out = args.out or Path("runs") / script
    if out.exists() and not out.is_dir():
        raise SystemExit(f"--out {out}: expected a folder, found a file")
    _warm_up()
    out.mkdir(parents=True, exist_ok=True)
    print(f"{script}: scale {args.scale}, device {args.device}, {torch.get_num_threads()} threads, out {out}",
          flush=True)
    return out


def _warm_up() -> None:
    """One Adam step on a throwaway layer: the first optimizer step of a process pays a one-time setup
    (seconds here), which would otherwise be counted in the first model's training time."""
    layer = torch.nn.Linear(1, 1)
    optimizer = torch.optim.Adam(layer.parameters())
    layer(torch.ones(1, 1)).sum().backward()
    optimizer.step()


def settings(table: dict[str, dict], args: argparse.Namespace) -> dict:
    """The settings of ``args.scale`` from a ``{scale: {name: value}}`` table, with ``--epochs`` applied."""
    chosen = dict(table[args.scale])
    if args.epochs is not None:
        chosen["epochs"] = args.epochs
    return chosen


# -- tensors ------------------------------------------------------------------------------------
def fit_normalizers(train_ds, inputs: list[str], targets: list[str]) -> dict:
    """Per-channel Gaussian normalizers fitted on the training set only."""
    return {"input": pde_data.fit_normalizer(train_ds, inputs), "output": pde_data.fit_normalizer(train_ds, targets)}


def split_in_order(ds, sizes: dict[str, int]) -> dict:
    """Consecutive sample slices ``{name: ds[start:start+size]}`` (generated samples are independent draws)."""
    parts, start = {}, 0
    for name, size in sizes.items():
        parts[name] = ds.isel(sample=slice(start, start + size))
        start += size
    return parts


def encode(ds, inputs: list[str], targets: list[str], normalizers: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """Encoded ``(inputs (n, C_in, *s), targets (n, C_out, *s))`` of an in-memory Dataset."""
    x = pde_data.to_tensor(ds, inputs)
    y = pde_data.to_tensor(ds, targets)
    return normalizers["input"].encode(x), normalizers["output"].encode(y)


# -- the model-comparison loop ------------------------------------------------------------------
@dataclass
class Fitted:
    """One trained model of a comparison."""

    label: str
    trainer: Trainer
    seconds: float
    n_params: int

    def predict(self, x: torch.Tensor, y_like: torch.Tensor) -> torch.Tensor:
        """Decoded (physical-unit) predictions for encoded inputs ``x``."""
        return self.trainer.predict(x, y_like)

    @property
    def history(self) -> list[dict]:
        return self.trainer.history


def n_params(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def train_model(label: str, name: str, channels: tuple[int, int], config: dict, train, val,
                train_config: TrainConfig, out: Path, *, normalizers: dict | None = None,
                kind: str = "steady", device: str = "cpu") -> Fitted:
    """Build registry model ``name`` and train it with the project trainer into ``out/checkpoints/label``."""
    torch.manual_seed(train_config.seed)
    model = operators.build(name, *channels, **config)
    meta = {"model": operators.model_spec(name, *channels, **config), "data": {"kind": kind}}
    dist = DistInfo(device=torch.device(device))
    trainer = Trainer(model, train, val, train_config, out / "checkpoints" / label, meta=meta,
                      normalizers=normalizers, dist=dist, windowed=kind == "window")
    start = time.perf_counter()
    trainer.fit()
    seconds = time.perf_counter() - start
    print(f"  {label}: {n_params(model):,} parameters, trained in {seconds:.1f} s", flush=True)
    return Fitted(label, trainer, seconds, n_params(model))


def compare_models(specs: dict[str, tuple[str, dict]], channels: tuple[int, int], train, val,
                   train_config: TrainConfig, out: Path, **kwargs) -> dict[str, Fitted]:
    """Train every ``label -> (registry name, config)`` on the same data with the same settings."""
    fitted = {}
    for label, (name, config) in specs.items():
        print(f"training {label} ({name}, {config})", flush=True)
        fitted[label] = train_model(label, name, channels, config, train, val, train_config, out, **kwargs)
    return fitted


def field_metrics(pred: torch.Tensor, true: torch.Tensor, *, steady: bool, initial_step: int = 0) -> dict[str, float]:
    """PDEBench's suite plus mean relative L2, for steady ``(n, C, *s)`` or time-dependent ``(n, T, C, *s)``."""
    if steady:
        pred, true = pred.unsqueeze(1), true.unsqueeze(1)  # one "time" frame: (n, 1, C, *s)
    return {**evaluation.pdebench_metrics(pred, true, initial_step=initial_step),
            "rel_l2": float(evaluation.rel_l2(pred[:, initial_step:], true[:, initial_step:]))}


# -- sequence regression (the field trainer takes one input tensor; these models also take timestamps) --
class SelfAttention(torch.nn.MultiheadAttention):
    """``torch.nn.MultiheadAttention`` as a sequence core: ``x (batch, time, d_model)`` → self-attention."""

    def __init__(self, d_model: int, num_heads: int):
        super().__init__(d_model, num_heads, batch_first=True)
        self.d_model = d_model

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return super().forward(x, x, x, need_weights=False)[0]


def _call(model, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """``model(x, timestamps=t)`` for cores that take time, else ``model(x)``."""
    return model(x, timestamps=t) if getattr(model, "time_arg", None) else model(x)


def fit_regression(model, x: torch.Tensor, t: torch.Tensor, y: torch.Tensor, *, epochs: int, batch_size: int,
                   lr: float, seed: int) -> list[float]:
    """Adam + cosine schedule on the mean squared error, seeded batches (``epoch_order``); losses per epoch."""
    torch.manual_seed(seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=max(epochs, 1))
    history = []
    model.train()
    for epoch in range(epochs):
        total = 0.0
        for idx in epoch_order(len(y), seed, epoch).split(batch_size):
            loss = torch.nn.functional.mse_loss(_call(model, x[idx], t[idx]), y[idx])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            total += loss.item() * len(idx)
        schedule.step()
        history.append(total / len(y))
    return history


@torch.no_grad()
def predict_regression(model, x: torch.Tensor, t: torch.Tensor, *, batch_size: int = 256) -> torch.Tensor:
    """Predictions in batches, eval mode."""
    model.eval()
    return torch.cat([_call(model, xb, tb) for xb, tb in zip(x.split(batch_size), t.split(batch_size))])


# -- results ------------------------------------------------------------------------------------
def write_results(out: Path, script: str, args: argparse.Namespace, results: dict) -> Path:
    """``out/results.json``: the measured numbers with the scale, arguments and environment."""
    payload = {
        "script": script, "scale": args.scale,
        "args": vars(args),
        "environment": {"python": platform.python_version(), "torch": torch.__version__,
                        "device": args.device, "threads": torch.get_num_threads()},
        "results": results,
    }
    path = out / "results.json"
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(_plain(payload), indent=1, allow_nan=False))
    print(f"wrote {path}", flush=True)
    return path


def _plain(value):
    """JSON-ready copy: tuples as lists, tensors and numpy scalars as floats, NaN/inf as None."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, (bool, int, str)) or value is None:
        return value
    number = float(value)
    return number if math.isfinite(number) else None


def print_table(rows: dict[str, dict[str, float]], title: str = "", *, fmt: str = "{:.4g}") -> None:
    """A plain text table: one row per model, one column per metric."""
    if not rows:
        return
    columns = list(next(iter(rows.values())))
    width = max(12, *(len(c) + 1 for c in columns))
    label_w = max(len(r) for r in rows) + 2
    lines = [title] if title else []
    lines.append("".ljust(label_w) + "".join(c.rjust(width) for c in columns))
    for label, row in rows.items():
        cells = [fmt.format(row[c]) if isinstance(row.get(c), (int, float)) else str(row.get(c, "")) for c in columns]
        lines.append(label.ljust(label_w) + "".join(cell.rjust(width) for cell in cells))
    print("\n".join(lines), file=sys.stdout, flush=True)


def finite(rows: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    """``rows`` without the metrics that are NaN/inf for some model (e.g. fRMSE_high on a 16² grid)."""
    keep = [m for m in next(iter(rows.values())) if all(math.isfinite(r[m]) for r in rows.values())]
    return {label: {m: r[m] for m in keep} for label, r in rows.items()}


def ratios(rows: dict[str, dict[str, float]], ours: str, baselines: list[str]) -> dict[str, dict[str, float]]:
    """``{f"{ours}/{b}": {metric: ours/b}}``: error ratios (< 1 means ``ours`` has the lower error)."""
    return {f"{ours}/{b}": {m: rows[ours][m] / rows[b][m] if rows[b][m] else float("nan") for m in rows[ours]}
            for b in baselines}
