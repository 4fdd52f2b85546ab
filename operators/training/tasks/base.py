"""What every task shares: the :class:`Task` interface, the run's :class:`Normalizers`, and the choice of
the task from the data.

A task owns everything that depends on the kind of problem, so that the trainer and ``evaluate_run`` stay
generic: which variables a run reads (:meth:`Task.resolve`), its normalizers and datasets, prediction,
the per-sample loss, the per-sample metrics (the same in validation and in ``evaluate``), the score that
picks ``best.pt``, and how predictions are scored and written over a whole split (:meth:`Task.evaluate`).

A task reads a file one way: its :meth:`Task.dataset` (a ``pde_data`` dataset, in the data's units) and, for the
model, :meth:`Task.batches` — the same reads encoded by the run's one processor, :class:`Normalizers` (encode before
the model, decode after it; never inside ``pde_data``). Training, validation, ``evaluate``, ``predict`` and generated
runs all read their :class:`pde_data.Batch` there; a field run's ``evaluate`` scores the dataset's batches in the
data's units, encoding only the model's inputs.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import ClassVar, Iterator, Sequence

import numpy as np
import torch
import xarray as xr
from torch import nn

import pde_data
from operators.training.spec import RunSpec, SpecError
from pde_data.datasets.batch import Batch
from pde_data.datasets.batches import BatchReads

__all__ = ["Task", "Normalizers", "TaskBatches", "EvalOptions", "MetricSums", "fit_variables", "fit_parameters"]


def fit_variables(source: pde_data.Source, spec: RunSpec, variables) -> pde_data.Normalizer | None:
    """The normalizer of ``variables`` (``spec.data.normalize``; None: none): from the statistics the source's
    format ships (The Well's stats.yaml) when it has them, else fitted on the training split."""
    method = spec.data.normalize
    if method is None:
        return None
    shipped = pde_data.normalizer_from_stats(source, list(variables), method=method)
    return shipped or pde_data.fit_normalizer(source, list(variables), indices=list(spec.data.splits.train),
                                              method=method)


def fit_parameters(source: pde_data.Source, names, indices) -> pde_data.Normalizer:
    """The ``minmax`` scaling of the PDE parameters ``names`` over the training samples ``indices``: ``[0, 1]`` on
    the training range, which it keeps (``shift``, ``shift + scale``).

    Raises:
        SpecError: a parameter has one value over the training samples (nothing to condition on).
    """
    table = torch.as_tensor(source.parameters(names)[np.asarray(indices, dtype=np.int64)])
    low, high = table.min(0).values, table.max(0).values
    same = [name for name, a, b in zip(names, low.tolist(), high.tolist()) if a == b]
    if same:
        raise SpecError("data.condition", "parameters that vary over the training samples",
                        f"{same[0]} = {low[list(names).index(same[0])].item():g} in all {len(table)}")
    return pde_data.Normalizer("minmax", low.float(), (high - low).float())


@dataclass(frozen=True)
class Normalizers:
    """The run's processor: its normalizers of the model's inputs and outputs (``None``: not normalized), which
    encode a batch for the model (:meth:`encode_batch`) and decode the model's outputs (:meth:`decode`), and the
    scaling of a conditioned run's PDE parameters (``params``, :func:`fit_parameters`)."""

    input: pde_data.Normalizer | None = None
    output: pde_data.Normalizer | None = None
    params: pde_data.Normalizer | None = None

    def state_dict(self) -> dict:
        """Plain tensors and strings (``weights_only``-loadable); ``params`` only when there are some."""
        parts = (("input", self.input), ("output", self.output), *((("params", self.params),) if self.params else ()))
        return {k: (None if v is None else v.state_dict()) for k, v in parts}

    @classmethod
    def from_state_dict(cls, state: dict) -> "Normalizers":
        return cls(*(None if state.get(k) is None else pde_data.Normalizer.from_state_dict(state[k])
                     for k in ("input", "output", "params")))

    def encode_params(self, p: torch.Tensor | None) -> torch.Tensor | None:
        """Parameters ``(batch, P)`` as a conditioned model reads them (None stays None)."""
        return p if p is None or self.params is None else self.params.encode(p)

    @property
    def params_range(self) -> list[tuple[float, float]]:
        """Each conditioning parameter's training range ``(low, high)`` (empty without parameters)."""
        if self.params is None:
            return []
        return list(zip(self.params.shift.tolist(), (self.params.shift + self.params.scale).tolist()))

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        return x if self.input is None else self.input.encode(x)

    def decode(self, y: torch.Tensor) -> torch.Tensor:
        return y if self.output is None else self.output.decode(y)

    def encode_batch(self, batch: Batch) -> Batch:
        """``batch`` (a dataset's fresh read, data units) as the model reads it, encoded in place: the inputs, and
        the targets unless they are labels (no output normalizer); padded steps (``~mask``) of the inputs and of
        per-step targets ``(batch, time, C)`` 0 again."""
        x, y = batch.inputs, batch.targets
        padded = None if batch.mask is None else ~batch.mask[..., None]
        if self.input is not None:
            x = self.input.encode_(x)
            x = x if padded is None else x.masked_fill_(padded, 0.0)
        if self.output is not None and y is not None:
            y = self.output.encode_(y)
            y = y if padded is None or y.ndim != 3 else y.masked_fill_(padded, 0.0)
        return Batch(x, y, batch.dt, batch.mask, self.encode_params(batch.params))

    @property
    def has_mean(self) -> bool:
        """Whether the outputs' training mean is known: a gaussian output normalizer's shift."""
        return self.output is not None and self.output.method == "gaussian"

    def mean_prediction(self, like: torch.Tensor) -> torch.Tensor | None:
        """The training mean of every output channel, broadcast to ``like``'s shape ``(batch, [time,] C, *s)``
        (the mean predictor, a baseline every model must beat); ``None`` unless :attr:`has_mean`."""
        return self.output.decode(torch.zeros_like(like)) if self.has_mean else None


class TaskBatches(BatchReads):
    """A task's batches as its model reads them: ``dataset``'s reads (data units) encoded by ``normalizers``
    (:meth:`Normalizers.encode_batch`), in a DataLoader worker too (it pickles with both)."""

    def __init__(self, dataset: BatchReads, normalizers: Normalizers):
        self.dataset, self.normalizers = dataset, normalizers

    def __len__(self) -> int:
        return len(self.dataset)

    @property
    def buffers(self):
        """The dataset's reused batch memory (:class:`pde_data.datasets.batches.BatchBuffers`)."""
        return self.dataset.buffers

    def read_batch(self, items) -> Batch:
        return self.normalizers.encode_batch(self.dataset.read_batch(items))


@dataclass(frozen=True)
class EvalOptions:
    """How ``evaluate_run`` scores a run: ``steps`` of a rollout (window runs; None: to the end of the
    data), ``batch_size``, the model's ``device``, whether to write ``pred.nc`` and plots into ``out``;
    ``name`` is the run's, for plot titles; ``bootstrap`` resamples of the test samples for each metric's
    confidence interval (0: none), drawn from ``seed``."""

    out: object
    name: str = "model"
    steps: int | None = None
    batch_size: int = 16
    device: torch.device = torch.device("cpu")
    write: bool = True
    plots: bool = True
    bootstrap: int = 1000
    seed: int = 0


@dataclass
class MetricSums:
    """Running sums of per-sample metrics (:meth:`Task.metrics`) over the batches of a split, in float64 on the
    metrics' device (read once, by :meth:`means`: no device sync per batch)."""

    sums: dict[str, torch.Tensor] = field(default_factory=dict)
    n: int = 0

    def add(self, values: dict[str, torch.Tensor]) -> None:
        """Add one batch's ``{name: (batch,)}``."""
        for name, v in values.items():
            total = v.detach().double().sum()
            self.sums[name] = total if name not in self.sums else self.sums[name] + total
        self.n += len(next(iter(values.values())))

    def means(self) -> dict[str, float]:
        if not self.sums:
            return {}
        totals = torch.stack(list(self.sums.values())).tolist()
        return {name: total / max(self.n, 1) for name, total in zip(self.sums, totals)}


def standing_in(what: str, names: tuple[str, ...], given: Sequence[str] | None) -> tuple[str, ...]:
    """``given`` (the file's names for the run's ``names``, in order), checked; ``names`` when None."""
    if given is None:
        return names
    if len(given) != len(names):
        raise SpecError(what, f"expected {len(names)} variables of the file standing in for the run's "
                        f"{list(names)}, found {list(given)}")
    return tuple(given)


class Task:
    """One kind of problem (see the module docstring). Subclasses set :attr:`kind`, :attr:`domain`
    (the domain of the models that fit, :data:`operators.models.registry.DOMAINS`) and :attr:`losses_allowed`."""

    kind: ClassVar[str]
    domain: ClassVar[str]
    losses_allowed: ClassVar[tuple[str, ...]]
    #: spec fields of classification runs alone: any other task refuses them when they are set
    refused: ClassVar[tuple[str, ...]] = ("task.label_smoothing", "task.shift")

    def __init__(self, spec: RunSpec, normalizers: Normalizers = Normalizers()):
        self.check_loss(spec)  # again: a kind run by several tasks (sequences) allows each one its own loss
        self.spec, self.normalizers = spec, normalizers
        self.loss = self.losses_allowed[0] if spec.task.loss == "auto" else spec.task.loss

    # -- choosing the data (classmethods: before the run exists) --------------------------------
    @classmethod
    def resolve(cls, spec: RunSpec, ds: xr.Dataset) -> dict:
        """What ``ds`` fixes of ``spec``, ``{path: value}``: the variables chosen and checked, the classes, the model's
        channels and derived config values (:func:`operators.training.tasks.resolve` applies them at once)."""
        raise NotImplementedError

    @classmethod
    def check_loss(cls, spec: RunSpec) -> None:
        if spec.task.loss not in ("auto", *cls.losses_allowed):
            raise SpecError("task.loss", f"expected one of {['auto', *cls.losses_allowed]} for a {cls.kind} run, "
                            f"found {spec.task.loss!r}")
        used = [p for p in cls.refused if spec.get(p)]
        if used:
            raise SpecError(used[0], f"expected only in classification runs, found it in a {cls.kind} run")
        if spec.task.periodic and cls.domain != "fields":
            raise SpecError("task.periodic", "only in field runs (a grid that wraps around)",
                            f"it in a {cls.kind} run")

    @classmethod
    def for_spec(cls, spec: RunSpec) -> type["Task"]:
        """The task that runs a resolved ``spec`` of this kind: this one, unless the kind has several."""
        return cls

    def with_variables(self, inputs: Sequence[str] | None, targets: Sequence[str] | None) -> "Task":
        """This task reading the variables ``inputs``/``targets`` (None: its own) in place of its own, in
        order, with the same normalizers (evaluating or predicting on a file that names them otherwise)."""
        data = self.spec.data
        spec = self.spec.override({"data.inputs": standing_in("inputs", data.inputs, inputs),
                                   "data.targets": standing_in("targets", data.targets, targets)})
        return type(self)(spec, self.normalizers)

    # -- reading --------------------------------------------------------------------------------
    def fit_normalizers(self, source: pde_data.Source) -> Normalizers:
        raise NotImplementedError

    def processor(self, source: pde_data.Source) -> Normalizers:
        """:meth:`fit_normalizers`, with a conditioned run's parameter scaling (:func:`fit_parameters`), on the
        training split of ``source``."""
        norms, names = self.fit_normalizers(source), self.spec.data.condition
        if not names:
            return norms
        return dataclasses.replace(norms, params=fit_parameters(source, names, self.spec.data.splits.train))

    def dataset(self, source: pde_data.Source, indices, *, cache: bool = False, targets: bool = True,
                steps: int | None = None, dtype: torch.dtype = torch.float32) -> BatchReads:
        """The ``pde_data`` dataset of the samples ``indices`` of ``source``, in the data's units: the run's inputs and
        (``targets``) its targets; ``steps`` (a window run's ``evaluate``/``predict``): one item per sample, its given
        frames and ``steps`` frames of truth."""
        raise NotImplementedError

    def batches(self, source: pde_data.Source, indices, *, cache: bool = False, targets: bool = True,
                dtype: torch.dtype = torch.float32) -> TaskBatches:
        """The batches the model reads: :meth:`dataset`'s, encoded by the run's :class:`Normalizers`."""
        return TaskBatches(self.dataset(source, indices, cache=cache, targets=targets, dtype=dtype), self.normalizers)

    def data_lines(self, source: pde_data.Source) -> list[str]:
        """What ``train`` says about how it reads ``source`` beyond the memory plan: the parameters a conditioned
        run reads and their training ranges, the values a split by parameter holds out (a sequence run: its Δt)."""
        data, lines = self.spec.data, []
        for name, (low, high) in zip(data.condition, self.normalizers.params_range):
            lines.append(f"conditioned on {name}: training range {low:.4g}..{high:.4g}")
        if data.split_by:
            values = source.parameters([data.split_by])[:, 0]
            test = sorted(set(values[list(data.splits.test)].tolist()))
            lines.append(f"split by {data.split_by}: testing on the held-out values {[float(f'{v:.4g}') for v in test]} "
                         f"({len(data.splits.test)} samples); training on "
                         f"{len(set(values[list(data.splits.train)].tolist()))} other values")
        return lines

    def item_bytes(self, source: pde_data.Source) -> int:
        """Bytes one sample of the run's variables takes in memory (the cache decision)."""
        variables = sorted(set(self.spec.data.inputs) | set(self.spec.data.targets))
        return pde_data.item_bytes(source, variables)

    # -- learning -------------------------------------------------------------------------------
    def forward(self, model: nn.Module, batch: Batch, *, training: bool) -> torch.Tensor:
        raise NotImplementedError

    def losses(self, pred: torch.Tensor, batch: Batch) -> torch.Tensor:
        """Per-sample losses ``(batch,)``."""
        raise NotImplementedError

    def metrics(self, pred: torch.Tensor, batch: Batch) -> dict[str, torch.Tensor]:
        """Per-sample metrics ``{name: (batch,)}`` in physical units (validation and ``evaluate``)."""
        raise NotImplementedError

    def summary(self, means: dict[str, float], n: int) -> dict[str, float]:
        """Whole-set values from the means of :meth:`metrics` over ``n`` samples (e.g. an RMSE from the
        mean squared error); validation and ``evaluate`` report these."""
        return means

    def score(self, record: dict) -> float:
        """What ``best.pt`` minimises, from an epoch's record (``val_*`` metrics, ``train_loss``)."""
        raise NotImplementedError

    def result(self, sums: MetricSums) -> dict[str, float]:
        """The whole-set values (:meth:`summary`) of the metrics summed over a split."""
        return self.summary(sums.means(), sums.n)

    # -- evaluation -----------------------------------------------------------------------------
    @torch.no_grad()
    def predictions(self, model: nn.Module, source: pde_data.Source, samples, options: EvalOptions, *,
                    inputs_only: bool = False) -> Iterator[tuple[torch.Tensor, Batch]]:
        """``(prediction on the CPU, batch on the CPU)`` for ``samples``, ``options.batch_size`` at a time, read
        through the task's :meth:`batches` (the same reads as training; ``inputs_only``: targets None), by a task
        that predicts whole samples (no rollout ``steps``)."""
        if options.steps is not None:
            raise SpecError("steps", f"expected none: a {self.kind} run predicts whole samples, not a time-stepper")
        data = self.batches(source, samples, targets=not inputs_only)
        for start in range(0, len(samples), options.batch_size):
            batch = data.read_batch(list(range(start, min(start + options.batch_size, len(samples)))))
            pred = self.forward(model, batch.to(options.device), training=False)
            yield pred.float().cpu(), batch

    def evaluate(self, model: nn.Module, source: pde_data.Source, samples, options: EvalOptions) -> tuple[dict, list]:
        """``(result, files written)`` of the model on ``samples`` of ``source``: ``{"metrics", ["baseline"],
        ["per_variable"], ...}`` (``baseline``: the same metrics of a baseline, ``{"mean_predictor": ...}`` with a
        training mean, ``{"majority_class": ...}`` for labels; ``per_variable``: of each target alone)."""
        raise NotImplementedError

    def predict(self, model: nn.Module, source: pde_data.Source, samples,
              options: EvalOptions) -> Iterator[tuple[np.ndarray, xr.Dataset]]:
        """``(the chunk's sample indices, its predictions)`` from the run's inputs alone (no targets needed),
        ``options.batch_size`` samples at a time: data-model Datasets on the source's coordinates (by default
        :meth:`predictions` of the inputs alone, as :meth:`predicted` in :meth:`as_dataset`)."""
        batches = self.predictions(model, source, samples, options, inputs_only=True)
        for start, (pred, batch) in zip(range(0, len(samples), options.batch_size), batches):
            chunk = np.asarray(samples)[start:start + options.batch_size]
            yield chunk, self.as_dataset(source.dataset, chunk, self.predicted(pred, batch))

    def predicted(self, pred: torch.Tensor, batch: Batch) -> torch.Tensor:
        """The predicted targets in the data's units from the model's outputs ``pred`` for ``batch``."""
        raise NotImplementedError

    def as_dataset(self, ds: xr.Dataset, samples: np.ndarray, pred: torch.Tensor) -> xr.Dataset:
        """The predicted targets ``pred`` (:meth:`predicted`) over the source's sample indices ``samples``."""
        raise NotImplementedError
