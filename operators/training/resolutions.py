"""A field run scored at other resolutions (``circuitop evaluate --run R --resolutions 16,32,64``), as
neuraloperator tests its Darcy models at resolutions they never trained on: the scored samples (and the truth)
resampled to each grid (:func:`pde_data.core.resample.resample`: cell averages where the new size divides the
file's, else Fourier resampling; a grid finer than the file's cannot be made, so it is refused), written to a file
per resolution, and the model run at that grid by :func:`~operators.training.evaluate_run`. One table and one plot
of error against resolution, the training resolution marked.

Example:
    >>> result = evaluate_resolutions("runs/darcy16", [16, 32, 64], data="darcy_64.nc", samples="all")
    >>> [(row["resolution"], row["metrics"]["rel_l2"]) for row in result["rows"]]
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Sequence

import torch

import pde_data
from operators.training.evaluate import evaluate_run, evaluation_folder, json_safe, scored_samples, staged
from operators.training.run import load_run, trained_data
from operators.training.spec import SpecError
from operators.training.tasks import EvalOptions
from pde_data.core.model import SAMPLE, spatial_dims
from pde_data.core.resample import method_of, resample

__all__ = ["evaluate_resolutions"]


def evaluate_resolutions(run_dir: str | os.PathLike, resolutions: Sequence[int], data: str | os.PathLike | None = None,
                         *, samples: str = "test", checkpoint: str = "best", out: str | os.PathLike | None = None,
                         overwrite: bool = False, batch_size: int = EvalOptions.batch_size,
                         bootstrap: int = EvalOptions.bootstrap, seed: int = EvalOptions.seed,
                         device: str | torch.device | None = None) -> dict:
    """The run on ``samples`` of ``data`` (its own by default) at each of ``resolutions`` points per spatial axis;
    writes ``out`` (default ``RUN/evaluations/resolutions-<file>-<samples>``): ``metrics.json``,
    ``resolutions.png`` and per resolution ``<n>/`` (its evaluation) and ``data-<n>.nc`` (the resampled samples).
    Returns ``{"training": {dim: n}, "file": {dim: n}, "rows": [{"resolution", "method", "metrics",
    ["intervals"]}], "out"}``.

    Raises:
        SpecError: no resolution, a run that is no steady field run, or a resolution finer than the file's.
    """
    run = load_run(run_dir, checkpoint=checkpoint)
    if not resolutions or run.spec.task.window:
        raise SpecError("resolutions", "resolutions of a steady field run", f"{list(resolutions)} for a "
                        f"{'window' if run.spec.task.window else run.spec.task.kind} run" if resolutions else "none")
    label, source = (os.fspath(data), pde_data.open_source(data)) if data is not None else trained_data(run.spec)
    variables = [*run.spec.data.inputs, *run.spec.data.targets]
    grid = {d: source.sizes[d] for d in spatial_dims(source.dataset[variables[0]])}
    finer = [n for n in resolutions if any(n > size for size in grid.values())]
    if finer:
        raise SpecError("resolutions", f"at most the file's grid {grid} (a finer truth cannot be made from it; "
                        "evaluate on a finer file)", ", ".join(map(str, finer)))
    idx = scored_samples(run, source, samples)
    name = f"resolutions-{Path(label).name}"
    folder = Path(out) if out is not None else evaluation_folder(run_dir, name, samples, checkpoint)
    rows = []
    with staged(folder, overwrite) as staging:
        for n in resolutions:
            path = _resampled(source, variables, idx, {d: n for d in grid}, Path(staging) / f"data-{n}.nc", batch_size)
            scored = evaluate_run(run_dir, path, samples="all", checkpoint=checkpoint, out=Path(staging) / str(n),
                                  plots=False, batch_size=batch_size, bootstrap=bootstrap, seed=seed, device=device)
            rows.append({"resolution": n, "method": method_of(max(grid.values()), n), "metrics": scored["metrics"],
                         **({"intervals": scored["intervals"]} if "intervals" in scored else {})})
        trained = {d: n for d, n in dict(run.spec.data.fingerprint.sizes).items() if d in grid}
        result = json_safe({"data": label, "samples": samples, "training": trained,
                            "file": grid, "rows": rows, "out": str(folder)})
        (Path(staging) / "metrics.json").write_text(json.dumps(result, indent=1))
        _plot(result, Path(staging) / "resolutions.png", Path(run_dir).name)
    return result


def _resampled(source: pde_data.Source, variables: list[str], idx, sizes: dict[str, int], path: Path,
               batch_size: int) -> Path:
    """Samples ``idx`` of ``variables`` resampled to ``sizes``, written to ``path`` batch by batch."""
    ds = source.dataset[variables]
    first = resample(ds.isel({SAMPLE: idx[:1]}).load(), sizes)
    with pde_data.PredictionWriter(path, first, variables, len(idx)) as writer:
        for start in range(0, len(idx), batch_size):
            part = resample(ds.isel({SAMPLE: idx[start:start + batch_size]}).load(), sizes)
            writer.write(start, part, sample_ids=idx[start:start + batch_size])
    return path


def _plot(result: dict, path: Path, run: str) -> None:
    from evaluation import plots

    import matplotlib.pyplot as plt

    trained = max(result["training"].values(), default=None)
    plt.close(plots.plot_resolutions([r["resolution"] for r in result["rows"]],
                                     [r["metrics"]["rel_l2"] for r in result["rows"]],
                                     [r.get("intervals", {}).get("rel_l2") for r in result["rows"]], trained=trained,
                                     path=path, title=f"{run} on {Path(result['data']).name}: relative L2 error "
                                                      "against resolution"))
