"""``circuitop info [PATH] [--verify]``: versions, torch device and threads; a summary of a data file; of a
generated set's folder (its manifest: generator, parameters, shards, statistics; its shards checked against
their sha256 as every reading command does, ``--verify`` recomputing every one); or of a run (a run folder, or
one of its checkpoints ``last.pt``/``best.pt``): its spec, data, and its last and best epochs apart, each with
its scores."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

import pde_data
from operators.cli._remote import add_storage_option, use_storage_options
from pde_data.formats.opener import ZARR_METADATA
import pde_data.formats.manifest
from pde_data import model

_PACKAGES = ("circuitop", "torch", "neuraloperator", "ncps", "numpy", "scipy", "xarray", "h5py",
             "netCDF4", "h5netcdf", "dask", "distributed", "matplotlib")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("info", help="print versions and devices, or describe a data file or a run")
    p.add_argument("path", nargs="?", help="a data file (any format train reads), a generated set's folder, "
                                           "a run folder or a checkpoint")
    p.add_argument("--verify", action="store_true",
                   help="with a generated set's folder: recompute every shard's sha256 against its manifest, "
                        "whatever its stamp says (without it: the shards changed since they were last checked)")
    add_storage_option(p)
    p.set_defaults(func=run)


def environment() -> dict[str, str]:
    """Versions, the torch device that would be used and the thread count."""
    info = {name: version or "not installed"
            for name, version in pde_data.core.versions.package_versions(_PACKAGES).items()}
    info["device"] = f"cuda ({torch.cuda.get_device_name(0)})" if torch.cuda.is_available() else "cpu"
    info["torch threads"] = str(torch.get_num_threads())
    return info


def describe(path: str) -> list[str]:
    """One line per fact about a data file (any that :func:`pde_data.open_source` reads).

    Raises:
        FileNotFoundError / ValueError: the file is missing, unreadable or not in the data model.
    """
    with pde_data.open_source(path) as source:
        ds = source.dataset
        lines = [f"file: {path}", f"format: {source.format}", f"family: {model.family_of(ds)}",
                 f"dims: {dict(ds.sizes)}"]
        lines += [f"variable {name}: {var.dims} {var.dtype}" for name, var in ds.data_vars.items()]
        lines += [f"parameter {name}: {ds[name].dims}, {_span(ds[name])}" for name in pde_data.parameters_of(ds)]
        lines += [f"time: {model.describe_time(ds)}"] if model.family_of(ds) == "sequence" else []
        lines += [f"attr {key}: {value}" for key, value in ds.attrs.items()]
    return lines


def _span(da) -> str:
    """``"from LOW to HIGH"`` of a parameter (one value per sample: read whole), or its one value."""
    low, high = (float(v) for v in (da.min(), da.max()))
    return f"{low:g} everywhere" if low == high else f"from {low:g} to {high:g}"


def describe_set(folder: Path, *, verify: bool = False) -> list[str]:
    """One line per fact about a generated set's folder (:mod:`pde_data.formats.manifest`), after its shards are checked
    against the manifest's sha256 (:func:`pde_data.formats.verification.verify_set`: those its stamp does not vouch for;
    with ``verify``, every one).

    Raises:
        ManifestError: a shard disagrees with the manifest (every one that does, in one line).
    """
    from operators.cli._verified import summary, verified_set
    from pde_data.formats.manifest import read_manifest

    verified = verified_set(folder, full=verify)
    manifest = read_manifest(folder)
    spec = pde_data.generate.registry.GenerationSpec.from_json(manifest.generator)
    with pde_data.open_source(folder) as source:  # checks each shard's bytes, samples and variables
        sizes = dict(source.sizes)
    lines = [f"set: {folder}", f"generator: {spec.name}, {spec.n} samples, seed {spec.seed}",
             f"parameters: {dict(spec.params)}", f"dims: {sizes}",
             f"shards: {len(manifest.shards)} shards, {manifest.bytes:,} bytes"]
    lines += [f"  {s.file}: samples {s.start}-{s.stop - 1}, {s.bytes:,} bytes, sha256 {s.sha256[:12]}…"
              for s in manifest.shards]
    lines += [f"statistics {name}: mean {v['mean']:.6g}, std {v['std']:.6g}, min {v['min']:.6g}, max {v['max']:.6g} "
              f"({v['count']:,} values)" for name, v in manifest.statistics.items()]
    lines += ["made with: " + ", ".join(f"{k} {v}" for k, v in manifest.versions.items() if v)]
    return lines + [f"verified: {summary(verified)}"] + ([f"note: {verified.note}"] if verified.note else [])


def _is_checkpoint(path: Path) -> bool:
    """A run's checkpoint (``last.pt``/``best.pt`` beside a ``run.json``), not a neuraloperator data ``.pt``."""
    return path.name in ("last.pt", "best.pt") and (path.parent / "run.json").is_file()


def _scores(record: dict) -> str:
    return ", ".join(f"{k} {v:.4g}" for k, v in record.items() if k == "train_loss" or k.startswith("val_"))


def _epoch_line(name: str, state: dict, *, of: int | None = None) -> str:
    """``last: epoch 45 of 45 (last.pt): train_loss ..., val_rel_l2 ...``: the epoch ``{name}.pt`` holds
    (counted from 1, as the training log counts) and the scores its history recorded for it."""
    record = state["history"][-1] if state["history"] else {}
    stopped = ", stopped early" if record.get("stopped_early") else ""
    return (f"{name}: epoch {state['epoch']}{f' of {of}' if of else ''}{stopped} ({name}.pt)"
            + (f": {_scores(record)}" if record else ""))


def describe_run(path: Path) -> list[str]:
    """One line per fact about a run folder or one of its checkpoints: the spec (of the checkpoint named, or of
    the folder's ``last.pt``), then the last epoch and the best one apart, each read from its own checkpoint
    (``last.pt``, ``best.pt``; ``weights_only`` loading).

    Raises:
        ValueError: the folder holds no checkpoint.
    """
    from operators.training import RunSpec, load_checkpoint

    folder = path if path.is_dir() else path.parent
    states = {name: load_checkpoint(folder / f"{name}.pt") for name in ("last", "best")
              if (folder / f"{name}.pt").is_file()}
    if path.is_dir():
        if not states:
            raise ValueError(f"{path}: expected a run folder with best.pt or last.pt, or a data file; found neither")
        path = folder / f"{next(iter(states))}.pt"
    state = states[path.stem] if path.name in ("last.pt", "best.pt") else load_checkpoint(path)
    spec = RunSpec.from_dict(state["spec"])
    data, task, model = spec.data, spec.task, spec.model
    parameters = sum(p.numel() for p in model.build().parameters() if p.requires_grad)
    lines = [f"checkpoint: {path} (epoch {state['epoch']} of {spec.optim.epochs})",
             f"task: {task.kind}" + (f", window {task.window} → horizon {task.horizon}" if task.window else ""),
             f"model: {model.name} ({model.in_channels} → {model.out_channels} channels, {parameters:,} parameters), "
             f"config {model.settings}",
             f"data: {data.path or 'generated fixed set'} ({data.fingerprint.format}, sizes "
             f"{dict(data.fingerprint.sizes)})",
             f"variables: {list(data.inputs)} → {list(data.targets)}"
             + (f", conditioned on {list(data.condition)}" if data.condition else ""),
             f"split: train {len(data.splits.train)}, val {len(data.splits.val)}, test {len(data.splits.test)} "
             f"(seed {data.split_seed}" + (f"; the test holds out values of {data.split_by})" if data.split_by else ")")]
    if data.generate is not None:  # a run on generated data (--generate): its training stream
        lines.insert(4, f"generated: {data.generate}, {data.samples_per_epoch} new samples per epoch, seeds "
                        f"{list(data.generate_seeds)} (training, fixed set), {data.generator}")
    if "last" in states:
        lines.append(_epoch_line("last", states["last"], of=RunSpec.from_dict(states["last"]["spec"]).optim.epochs))
    if "best" in states:
        recorded = states.get("last", {}).get("best_epoch", states["best"]["epoch"])
        lines.append(_epoch_line("best", states["best"]) + ("" if recorded == states["best"]["epoch"] else
                     f" (last.pt records epoch {recorded} as the best: best.pt was not updated)"))
    return lines + _evaluations(folder)


def _evaluations(run_dir: Path) -> list[str]:
    """One line per evaluation folder of the run: its data, samples and first metric."""
    from operators.training.runfolder import EVALUATIONS

    lines = []
    for folder in sorted((run_dir / EVALUATIONS).glob("*/metrics.json")):
        result = json.loads(folder.read_text())
        name, value = next(iter(result["metrics"].items()), ("", None))
        score = f", {name} {value:.4g}" if isinstance(value, float) else ""
        lines.append(f"evaluation {folder.parent.name}: {result['data']} ({result['samples']}, "
                     f"{result['n_samples']} samples{score})")
    return lines


def run(args: argparse.Namespace) -> int:
    use_storage_options(args)
    if args.verify and not (args.path and pde_data.formats.manifest.is_manifest_folder(args.path)):
        raise ValueError(f"--verify: expected a generated set's folder (with manifest.json), found {args.path}")
    if not args.path:
        lines = [f"{k}: {v}" for k, v in environment().items()]
    elif pde_data.formats.manifest.is_manifest_folder(args.path):
        lines = describe_set(Path(args.path), verify=args.verify)
    elif (Path(args.path).is_dir() and not (Path(args.path) / ZARR_METADATA).is_file()
          or Path(args.path).suffix == ".pt" and _is_checkpoint(Path(args.path))):
        lines = describe_run(Path(args.path))
    else:
        lines = describe(args.path)
    print("\n".join(lines))
    return 0
