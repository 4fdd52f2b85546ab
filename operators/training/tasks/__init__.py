"""The tasks of a run — :class:`Steady`, :class:`Window`, :class:`Classify`, :class:`Sequence` (run by
:class:`SequenceClassification` or :class:`SequenceRegression`) — and :func:`resolve`, which fixes a
:class:`~operators.training.spec.RunSpec` against its data.

Example:
    >>> spec = resolve(RunSpec(data=DataSpec("darcy.nc"), model=ModelSpec("fno")), "darcy.nc")
    >>> spec.task.kind, spec.data.inputs, spec.data.splits.sizes
    ('steady', ('a',), (205, 25, 26))
"""

from __future__ import annotations

import dataclasses

import numpy as np
import xarray as xr

import pde_data
from operators.training.spec import RunSpec, SpecError, Splits
from operators.training.tasks.base import EvalOptions, Normalizers, Task, TaskBatches
from operators.training.tasks.classify import Classify, label_target
from operators.training.tasks.fields import Steady, Window
from operators.training.tasks.sequence import Sequence, SequenceClassification, SequenceRegression
from pde_data.core.model import SAMPLE, family_of

__all__ = ["Task", "Steady", "Window", "Classify", "Sequence", "SequenceClassification", "SequenceRegression", "TASKS",
           "Normalizers", "TaskBatches", "EvalOptions", "resolve", "make_task", "held_out_values"]

#: the task that resolves each ``task.kind``; :meth:`Task.for_spec` names the one that runs a resolved spec
TASKS: dict[str, type[Task]] = {cls.kind: cls for cls in (Steady, Window, Classify, Sequence)}


def _kind(spec: RunSpec, ds: xr.Dataset) -> str:
    """The task the data and the spec call for (when ``task.kind`` is not given)."""
    if spec.task.window is not None:
        return "window"
    inputs = [v for v in spec.data.inputs if v in ds.data_vars]
    data = ds[inputs] if inputs else ds
    if family_of(data) == "sequence":
        return "sequence"
    return "classify" if label_target(spec, ds) is not None else "steady"


def held_out_values(values: np.ndarray, seed: int) -> np.ndarray:
    """The values of a parameter whose samples are the test split (``data.split_by``): a tenth of its distinct values
    (at least one), drawn with ``seed`` among all but the smallest and largest (the test lies inside the training
    range), sorted.

    Raises:
        SpecError: fewer than three distinct values.
    """
    distinct = np.unique(values)
    if distinct.size < 3:
        raise SpecError("data.split_by", "a parameter with at least 3 distinct values (the smallest and largest "
                        "train, one held out between them)", f"{distinct.size}: {distinct.tolist()}")
    inner = distinct[1:-1]
    count = max(1, distinct.size // 10)
    return np.sort(np.random.default_rng(seed).choice(inner, size=min(count, inner.size), replace=False))


def _split_by(spec: RunSpec, source: pde_data.Source) -> Splits:
    """Test: every sample of the :func:`held_out_values` of ``data.split_by``; of the other samples a ninth (at
    least one, once there are 3) validate, drawn with ``data.split_seed``, and the rest train."""
    if spec.data.split is not None:
        raise SpecError("data.split", "no split sizes beside {data.split_by} (the held-out values decide the test "
                        "split)", str(list(spec.data.split)), ["data.split_by"])
    try:
        values = source.parameters([spec.data.split_by])[:, 0]
    except ValueError as err:
        raise SpecError("data.split_by", f"a parameter of {source.name}", str(err)) from None
    test = np.flatnonzero(np.isin(values, held_out_values(values, spec.data.split_seed)))
    rest = np.setdiff1d(np.arange(values.size), test)
    n_val = max(1, rest.size // 9) if rest.size >= 3 else 0  # a tenth of the whole, as the default policy
    val = np.sort(np.random.default_rng(spec.data.split_seed).choice(rest, size=n_val, replace=False))
    return Splits(*(tuple(int(i) for i in part) for part in (np.setdiff1d(rest, val), val, test)))


def _splits(spec: RunSpec, n: int) -> Splits:
    """The stored split if the spec has one (checked), else drawn from ``data.split`` sizes with ``data.split_seed``."""
    if spec.data.splits is None:
        sizes = spec.data.split or pde_data.default_sizes(n)
        if sum(sizes) > n:
            raise SpecError("data.split", f"expected sizes summing to at most the {n} samples, found {list(sizes)}")
        parts = pde_data.split_indices(n, sizes=list(sizes), seed=spec.data.split_seed)
        splits = Splits(*(tuple(int(i) for i in parts[k]) for k in ("train", "val", "test")))
    else:
        splits = spec.data.splits
    parts = [sorted(getattr(splits, k)) for k in ("train", "val", "test")]
    every = [i for p in parts for i in p]
    generated = spec.data.generate is not None  # its training samples come from the generator, not the data
    in_range = not every or 0 <= min(every) <= max(every) < n
    if not (parts[0] or generated) or len(set(every)) != len(every) or not in_range:
        raise SpecError("data.splits", f"expected disjoint sample indices in [0, {n}) with at least one training "
                        f"sample; found sizes {[len(p) for p in parts]}")
    return Splits(*(tuple(p) for p in parts))


def _model_config(spec: RunSpec, task: type[Task], derived: dict) -> dict:
    """The model's whole config (validated by the registry; the defaults written out, the ``derived`` values apart),
    if the model fits the task."""
    from operators.models import MODELS, make_config

    name = spec.model.name
    if name not in MODELS:
        raise SpecError("model.name", f"expected one of {', '.join(sorted(MODELS))}; found {name!r}")
    if MODELS[name].domain != task.domain:
        fitting = sorted(n for n, entry in MODELS.items() if entry.domain == task.domain)
        raise SpecError("model.name", f"expected a model for a {task.kind} run (one of {', '.join(fitting)}), "
                        f"found {name!r}")
    try:
        full = dataclasses.asdict(make_config(name, **{**spec.model.config, **derived}))
    except SpecError:  # names its parameter already (model.config.<name>)
        raise
    except ValueError as exc:
        raise SpecError("model.config", str(exc)) from None
    return {k: v for k, v in full.items() if k not in derived}


def resolve(spec: RunSpec, data: pde_data.Source | xr.Dataset | str) -> RunSpec:
    """``spec`` fixed against ``data`` (a :class:`pde_data.Source`, or what :func:`pde_data.open_source`
    opens) in one pass: task kind, variables, split indices, fingerprint, classes, model channels and whole
    config, applied at once. Raises :class:`SpecError` naming the field that does not fit."""
    source = pde_data.open_source(data)
    ds = source.dataset
    conditioned = _conditioned(spec, ds, source.name)
    ds = ds.drop_vars(pde_data.parameters_of(ds))  # a sample's PDE parameters are neither inputs nor targets
    if SAMPLE not in ds.dims:
        raise SpecError("data.path", f"expected a '{SAMPLE}' dim in the data model; found dims {tuple(ds.dims)}")
    kind = spec.task.kind or _kind(spec, ds)
    task = TASKS[kind]
    task.check_loss(spec)
    if spec.data.split_by is not None and spec.data.splits is None:
        spec = spec.override({"data.splits": _split_by(spec, source)})
    splits = _splits(spec, ds.sizes[SAMPLE])
    if conditioned and task.domain != "fields":
        raise SpecError("data.condition", f"expected no parameters for a {kind} run (field runs take them), found "
                        f"{list(spec.data.condition)}")
    sizes = {} if spec.data.split_by else {"data.split": list(splits.sizes)}  # the held-out values decide them
    fixed = {"task.kind": kind, "data.splits": splits, **sizes,
             "data.fingerprint": source.fingerprint(), "model.params": conditioned, **task.resolve(spec, ds)}
    fixed["model.config"] = _model_config(spec, task, fixed.get("model.derived", {}))
    return spec.override(fixed)


def _conditioned(spec: RunSpec, ds: xr.Dataset, name: str) -> int:
    """How many PDE parameters of ``ds`` the run's model is conditioned on (``data.condition``, checked: numbers per
    sample, a model that takes them)."""
    from operators.models.conditioning import CONDITIONED

    names = spec.data.condition
    if not names:
        return 0
    if spec.model.name not in CONDITIONED:
        raise SpecError("model.name", f"expected a model conditioned on parameters ({', '.join(CONDITIONED)}), "
                        f"found {spec.model.name!r}")
    bad = [n for n in names if n not in ds.data_vars or ds[n].dims != (SAMPLE,)]
    if bad:
        found = "no such variable" if bad[0] not in ds.data_vars else f"a variable of dims {ds[bad[0]].dims}"
        raise SpecError("data.condition", f"per-sample parameters of {name} (dims ({SAMPLE},)), among "
                        f"{list(pde_data.parameters_of(ds))}", f"{bad[0]!r}: {found}")
    return len(names)


def make_task(spec: RunSpec, normalizers: Normalizers = Normalizers()) -> Task:
    """The task object of a resolved ``spec`` (a sequence run's: of a label or of float targets)."""
    return TASKS[spec.task.kind].for_spec(spec)(spec, normalizers)
