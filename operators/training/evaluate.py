"""Evaluate a trained run on a data file, or predict from its inputs alone, streaming over samples in batches.

Which samples ``evaluate_run`` scores (``samples``):

- ``"test"`` (default): the run's stored test split, when the file has the fingerprint of the run's source
  wherever it now lies. A run without a test split is refused: scoring the validation split instead needs
  the explicit ``samples="val"``, and the result says it is the split that chose ``best.pt``;
- ``"val"``: the stored validation split;
- ``"all"``: every sample of the file, e.g. another file (another file is refused with one line naming what
  differs unless ``"all"``).

The run's task scores them (:meth:`operators.training.tasks.Task.evaluate`: metrics of the model and of the
mean predictor, per variable, ``pred.nc``, plots). Each evaluation writes into its own folder, by default
``RUN_DIR/evaluations/<file>-<samples>[-last]``; an existing one is kept unless ``overwrite=True``. The
folder is filled under a temporary name and renamed into place at the end, and its ``metrics.json`` lists
every file in it. Fewer than :data:`FEW_SAMPLES` samples are flagged in the result (``warning``).

``inputs``/``targets`` name the file's variables that stand in for the run's, in order: a run trained on
``a``/``u`` scores on neuraloperator's ``input``/``target``.

Example:
    >>> result = evaluate_run("runs/ns-chonn", "ns.nc", steps=40)
    >>> result["rollout"]["mean_rel_l2"], result["metrics"]["nRMSE"], result["files"]
    >>> predict_run("runs/darcy", "darcy_test_16.pt", "pred.nc", inputs=["input"])
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

import pde_data
from operators.provenance import code_version
from operators.training.distributed import device_of
from operators.training.run import LoadedRun, check_source, load_run, trained_data
from operators.training.runfolder import EVALUATIONS
from operators.training.spec import SpecError
from operators.training.tasks import EvalOptions
from operators.training.tasks.report import markdown
from pde_data.core.model import SAMPLE, spatial_dims
from pde_data.core.params import ExistsError

__all__ = ["evaluate_run", "predict_run", "evaluation_folder", "staged", "scored_samples", "json_safe", "FEW_SAMPLES",
           "SAMPLE_CHOICES"]

#: below this many scored samples a result says it cannot separate models
FEW_SAMPLES = 10
SAMPLE_CHOICES = ("test", "val", "all")
_LABELS = {"test": "the test split", "val": "the validation split (it chose best.pt: not a test score)",
           "all": "every sample of the file"}


def scored_samples(run: LoadedRun, source: pde_data.Source, samples: str) -> np.ndarray:
    """The indices of ``samples`` (a stored split, or "all") of ``source`` a run is scored on."""
    if samples not in SAMPLE_CHOICES:
        raise SpecError("samples", f"expected one of {list(SAMPLE_CHOICES)}, found {samples!r}")
    if samples == "all":
        return np.arange(source.sizes[SAMPLE])
    check_source(run.spec, source, "pass {samples='all'} to score every sample of it", ["samples"])
    idx = getattr(run.spec.data.splits, samples)
    if not idx:
        sizes = dict(zip(("train", "val", "test"), run.spec.data.splits.sizes))
        other = "{samples='val'} scores the validation split (which chose best.pt, so it is no test score), or "
        raise SpecError("samples", f"expected a stored {samples} split to score, found none (split sizes {sizes}); "
                        f"{other if samples == 'test' and sizes['val'] else ''}{{samples='all'}} scores every sample",
                        mentions=["samples"])
    return np.asarray(idx, dtype=np.int64)


def _check_variables(run: LoadedRun, source: pde_data.Source, *, targets: bool) -> None:
    """One line unless ``source`` has the run's input (and ``targets``: target) variables."""
    data = run.spec.data
    wanted = list(dict.fromkeys((*data.inputs, *(data.targets if targets else ()))))
    missing = [v for v in wanted if v not in source.variables]
    if missing:
        raise SpecError("inputs" if set(missing) & set(data.inputs) else "targets",
                        f"expected the variables {wanted} in {source.name}; missing {missing}, found "
                        f"{list(source.variables)} (name the file's variables that stand in for the run's)")


def resolution_note(run: LoadedRun, source: pde_data.Source) -> str | None:
    """A line when the file's grid differs from the training data's (the model then runs at the file's)."""
    found = {d: source.sizes[d] for d in spatial_dims(source.dataset[run.spec.data.inputs[0]])}
    trained = dict(run.spec.data.fingerprint.sizes)
    if all(trained.get(d, n) == n for d, n in found.items()):
        return None
    return (f"{source.name} has the grid {found}, the run was trained on "
            f"{ {d: trained[d] for d in found if d in trained} }; the model runs at the file's resolution, on its "
            "inputs as stored (not resampled, as evaluate_resolutions does)")


def evaluation_folder(run_dir: str | os.PathLike, data: str | os.PathLike, samples: str, checkpoint: str) -> Path:
    """The default folder of an evaluation: ``RUN_DIR/evaluations/<file name>-<samples>[-last]`` (a glob's ``*?[]``
    written ``_``: ``adv_beta_.hdf5-test`` for ``adv_beta*.hdf5``)."""
    name = re.sub(r"[*?\[\]]", "_", Path(os.fspath(data).rstrip("/")).name)
    return Path(run_dir) / EVALUATIONS / f"{name}-{samples}{'' if checkpoint == 'best' else '-' + checkpoint}"


@contextlib.contextmanager
def staged(out: Path, overwrite: bool):
    """A temporary folder beside ``out``, renamed to ``out`` when the block succeeds (an existing ``out``
    replaced only with ``overwrite``, checked before anything is computed); removed when it fails."""
    if out.exists() and not out.is_dir():
        raise ValueError(f"{out}: expected an evaluation folder, found a file")
    if out.exists() and not overwrite:
        raise ExistsError((), f"{out}: expected a new evaluation folder, found an earlier evaluation; pass "
                          "{overwrite=True} to replace it, or choose another out folder", mentions=["overwrite"])
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
    except OSError as exc:
        raise SpecError("out", "a folder this process can create and write to", f"{out}, which cannot be "
                        f"created ({exc.strerror or type(exc).__name__})") from None
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if out.exists():
        shutil.rmtree(out)
    os.rename(tmp, out)


def json_safe(value):
    """JSON-ready copy: keys and paths as str, tuples as lists, numpy/torch numbers as floats, NaN and ±inf as None."""
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, (bool, int, str, Path)) or value is None:
        return str(value) if isinstance(value, Path) else value
    number = float(value)
    return number if math.isfinite(number) else None


def _opened(run_dir, data, checkpoint, device, inputs, targets) -> tuple[LoadedRun, pde_data.Source | None]:
    run = load_run(run_dir, checkpoint=checkpoint, device=device_of(device))
    return run.with_variables(inputs=inputs, targets=targets), None if data is None else pde_data.open_source(data)


def evaluate_run(run_dir: str | os.PathLike, data: str | os.PathLike | None = None, *, samples: str = "test",
                 steps: int | None = EvalOptions.steps, checkpoint: str = "best",
                 out: str | os.PathLike | None = None,
                 overwrite: bool = False, inputs: Sequence[str] | None = None, targets: Sequence[str] | None = None,
                 write: bool = EvalOptions.write, plots: bool = EvalOptions.plots,
                 batch_size: int = EvalOptions.batch_size, bootstrap: int = EvalOptions.bootstrap,
                 seed: int = EvalOptions.seed, device: str | torch.device | None = None) -> dict:
    """Metrics of the run's ``checkpoint`` on ``samples`` of ``data`` (module docstring); window runs
    are rolled out ``steps`` steps (default: to the end of the data) from their first ``window`` frames.
    Field runs give each per-sample metric a bootstrap interval over the samples (``bootstrap`` resamples drawn
    from ``seed``; 0: none), and window runs the long-rollout scores (:func:`evaluation.long_rollout.
    rollout_scores`).

    The model runs on ``device`` (default: CUDA if available, else CPU); data are read, and metrics
    computed, on the CPU. ``data`` None: the run's own data (its file, or a generated run's fixed set made
    again, :func:`~operators.training.run.trained_data`). Returns ``{"data", "samples", "scored", "n_samples",
    ["warning"], ["note"],
    "epoch", "metrics", ["baseline"], ["per_variable"], ["rollout"], "out", "files"}``; with ``write`` the
    same goes to ``out/metrics.json`` (default :func:`evaluation_folder`) beside ``pred.nc`` and plots.
    """
    if batch_size < 1:
        raise SpecError("batch_size", f"expected a positive integer, found {batch_size}")
    if bootstrap < 0:
        raise SpecError("bootstrap", f"expected 0 (no intervals) or a number of resamples, found {bootstrap}")
    run, source = _opened(run_dir, data, checkpoint, device, inputs, targets)
    if data is None:
        data, source = trained_data(run.spec, run.device)
    idx = scored_samples(run, source, samples)
    _check_variables(run, source, targets=True)
    folder = Path(out) if out is not None else evaluation_folder(run_dir, data, samples, checkpoint)
    header = {"data": os.fspath(data), "samples": samples, "scored": _LABELS[samples], "n_samples": int(len(idx))}
    if len(idx) < FEW_SAMPLES:
        header["warning"] = f"only {len(idx)} samples: too few to tell models apart (expected at least {FEW_SAMPLES})"
    note = resolution_note(run, source)
    header.update({"note": note} if note else {})
    with staged(folder, overwrite) if write else contextlib.nullcontext(folder) as staging:
        options = EvalOptions(staging, name=Path(run_dir).name, steps=steps, batch_size=batch_size,
                              device=run.device, write=write, plots=plots, bootstrap=bootstrap, seed=seed)
        scored, files = run.task.evaluate(run.model, source, idx, options)
        result = json_safe({**header, "epoch": run.epoch, **scored, "out": str(folder)})
        names = [f.name for f in files[:1]] + (["metrics.json", "metrics.md"] if write else []) + \
            [f.name for f in files[1:]]
        result["files"] = [str(folder / name) for name in names]
        if write:
            (Path(staging) / "metrics.json").write_text(json.dumps(result, indent=1))
            (Path(staging) / "metrics.md").write_text(markdown(result, Path(run_dir).name))
    return result


def _made_by(run_dir, checkpoint: str, run: LoadedRun, source: pde_data.Source) -> dict[str, str | int]:
    """What made a prediction file, as its global attributes: the run, checkpoint and epoch, the code (commit,
    whether uncommitted changes were in, version) and the data (path and fingerprint digest)."""
    code = code_version()
    return {"run": os.path.abspath(run_dir), "checkpoint": checkpoint, "epoch": int(run.epoch),
            "commit": str(code["commit"]) + (" (with uncommitted changes)" if code["dirty"] else ""),
            "circuitop_version": str(code["circuitop"]), "data": source.name,
            "data_fingerprint": source.fingerprint().digest}


def predict_run(run_dir: str | os.PathLike, data: str | os.PathLike, out: str | os.PathLike, *,
                steps: int | None = EvalOptions.steps, checkpoint: str = "best", overwrite: bool = False,
                inputs: Sequence[str] | None = None, batch_size: int = EvalOptions.batch_size,
                device: str | torch.device | None = None) -> dict:
    """Predictions of the run's ``checkpoint`` for every sample of ``data`` from its inputs alone,
    written to the NetCDF file ``out`` (atomically, batch by batch) on the file's coordinates.

    A window run rolls out ``steps`` steps from the file's first ``window`` frames (default: to its last
    frame); ``out`` then holds the given frames and the rollout, times past the file's extrapolated.
    Returns ``{"data", "out", "n_samples", "variables", ["note"]}``.
    """
    if batch_size < 1:
        raise SpecError("batch_size", f"expected a positive integer, found {batch_size}")
    pde_data.check_output(out, overwrite=overwrite)
    run, source = _opened(run_dir, data, checkpoint, device, inputs, None)
    _check_variables(run, source, targets=False)
    idx = np.arange(source.sizes[SAMPLE])
    options = EvalOptions(Path(out).parent, name=Path(run_dir).name, steps=steps, batch_size=batch_size,
                          device=run.device)
    names = list(run.spec.data.targets)
    chunks = run.task.predict(run.model, source, idx, options)
    first_chunk, first = next(chunks)
    made_by = _made_by(run_dir, checkpoint, run, source)
    with pde_data.PredictionWriter(out, first.isel({SAMPLE: [0]}), names, len(idx), attrs=made_by) as writer:
        writer.write(0, first, sample_ids=first_chunk)
        for chunk, pred in chunks:
            writer.write(int(np.searchsorted(idx, chunk[0])), pred, sample_ids=chunk)
    note = resolution_note(run, source)
    return {"data": os.fspath(data), "out": os.fspath(out), "n_samples": int(len(idx)), "variables": names,
            **({"note": note} if note else {})}
