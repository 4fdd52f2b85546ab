"""How long the PDEBench metric suite takes per sample on a Navier-Stokes-sized test set.

200 samples x 40 steps x 64 x 64 (``--quick``: 20 samples), one channel, float32 data as stored on
disk, channel-first ``(sample, time, channel, x, y)``. Prints seconds per sample for numpy input
(computed in float64), for float32 tensors, and for float32 tensors streamed through
``PDEBenchAccumulator`` in batches of 10 samples, and the per-sample time of ``rel_l2`` for scale.

    .venv/bin/python -m bench.bench_metrics [--quick]
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

from bench._util import Row, best_time, max_rss_mb, print_table
from evaluation import PDEBenchAccumulator, pdebench_metrics, rel_l2

_NAME = "metrics"


def _data(n_samples: int, n_time: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    true = rng.standard_normal((n_samples, n_time, 1, n, n), dtype=np.float32)  # (sample, time, channel, x, y)
    pred = true + np.float32(0.1) * rng.standard_normal(true.shape, dtype=np.float32)
    return pred, true


def _streamed(pred: torch.Tensor, true: torch.Tensor, *, batch: int) -> dict[str, float]:
    acc = PDEBenchAccumulator(window=10)
    for i in range(0, pred.shape[0], batch):
        acc.update(pred[i:i + batch], true[i:i + batch])
    return acc.result()


def run(quick: bool = False) -> list[Row]:
    """Rows of seconds per sample (and the process's peak RSS)."""
    n_samples, n_time, n = (20 if quick else 200), 40, 64
    pred, true = _data(n_samples, n_time, n)
    shape = f"{n_samples}x{n_time}x{n}x{n}"
    repeat = 3 if quick else 2
    t_numpy = best_time(lambda: pdebench_metrics(pred, true, window=10), repeat=repeat)
    p32, t32 = torch.from_numpy(pred), torch.from_numpy(true)
    t_torch = best_time(lambda: pdebench_metrics(p32, t32, window=10), repeat=repeat)
    t_stream = best_time(lambda: _streamed(p32, t32, batch=10), repeat=repeat)
    t_l2 = best_time(lambda: rel_l2(p32, t32), repeat=repeat)
    return [
        Row(_NAME, f"pdebench_metrics numpy->float64 {shape}", t_numpy / n_samples, "s/sample"),
        Row(_NAME, f"pdebench_metrics torch float32 {shape}", t_torch / n_samples, "s/sample"),
        Row(_NAME, f"PDEBenchAccumulator batches of 10, float32 {shape}", t_stream / n_samples, "s/sample"),
        Row(_NAME, f"rel_l2 torch float32 {shape}", t_l2 / n_samples, "s/sample"),
        Row(_NAME, "float64 / float32 time", t_numpy / t_torch, "ratio"),
        Row(_NAME, "peak RSS", max_rss_mb(), "MB"),
    ]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="20 samples instead of 200")
    print_table(run(quick=parser.parse_args().quick), title="evaluation metrics on CPU")
