"""Sequence tasks: sequences ``(sample, time[, feature])`` with irregular times and padded unequal lengths
(the data model's ``length`` variable) → a target per sequence or per step.

==========================  ==========================  ============================================
target variable             model output                loss (auto) and metrics
==========================  ==========================  ============================================
integer label ``(sample,)``  logits ``(batch, classes)``  cross-entropy; top-1, top-5, cross-entropy
float ``(sample,)``          ``(batch, C_out)``           MSE (normalized); MSE and RMSE, and the PHM
                                                          score (NAC Eq. 58, mean and sum) of a
                                                          remaining-useful-life target named ``rul``
float ``(sample, time)``     ``(batch, time, C_out)``     MSE over valid steps; MSE and RMSE over
                                                          every valid step of the set
==========================  ==========================  ============================================

With several float targets ``evaluate`` also scores each alone (``per_variable``: their units differ, so the pooled
MSE mixes them). A label target's baseline is the majority class; a float target's is the training mean when its
normalizer has one (gaussian).

:class:`Sequence` resolves a run; :class:`SequenceClassification` (a label target) or :class:`SequenceRegression`
(float targets) runs it. A batch is a :class:`pde_data.Batch` of :class:`pde_data.SequenceDataset`; every model of
the registry's ``sequence`` task is called as ``model(inputs, dt=dt, mask=mask)``.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import torch
import xarray as xr
from torch import nn

import evaluation
import pde_data
from operators.training.spec import RunSpec, SpecError
from operators.training.tasks.base import EvalOptions, MetricSums, Normalizers, Task
from operators.training.tasks.classify import LabelTask, label_target
from pde_data.core.model import FEATURE, LENGTH, ROLE, SAMPLE, TARGET, TIME, describe_time
from pde_data.datasets.batch import Batch

__all__ = ["Sequence", "SequenceRegression", "SequenceClassification", "RUL"]

#: the name of a remaining-useful-life target, which is also scored with the PHM score
RUL = "rul"


def _is_input(ds: xr.Dataset, name: str, targets) -> bool:
    """Whether variable ``name`` is a default input: a sequence, neither a target nor marked as one, nor ``length``."""
    da = ds[name]
    return (name not in targets and name != LENGTH and da.attrs.get(ROLE) != TARGET and pde_data.is_step(da))


def _target_form(ds: xr.Dataset, targets: list[str]) -> str:
    """``"label"``, ``"sequence"`` or ``"step"`` (:func:`pde_data.target_form`); per-step targets one channel each."""
    try:
        form = pde_data.target_form(ds, targets, "data.targets")
    except ValueError as exc:
        raise SpecError("data.targets", str(exc).removeprefix("data.targets: ")) from None
    wide = [v for v in targets if FEATURE in ds[v].dims]
    if wide:
        raise SpecError("data.targets", f"expected per-step targets of dims ({SAMPLE}, {TIME}), found {wide} with "
                        f"a '{FEATURE}' dim (name one variable per channel)")
    return form


def _padding_nan(pred: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Per-step predictions ``(batch, time, C)`` with NaN on padded steps (per-sequence ones as they are)."""
    return pred.masked_fill(~mask[..., None], float("nan")) if pred.ndim == 3 else pred


class Sequence(Task):
    """Sequences ``inputs (batch, time, C_in)`` with step sizes ``dt`` and a ``mask`` → per-sequence or per-step
    targets: what the two sequence tasks share. :meth:`resolve` fixes the targets; :meth:`for_spec` then picks
    :class:`SequenceClassification` (a label) or :class:`SequenceRegression` (float targets)."""

    kind, domain, losses_allowed = "sequence", "sequences", ("mse", "cross_entropy")

    @classmethod
    def for_spec(cls, spec: RunSpec) -> type[Task]:
        return SequenceClassification if spec.task.classes > 0 else SequenceRegression

    @classmethod
    def resolve(cls, spec: RunSpec, ds: xr.Dataset) -> dict:
        names = list(ds.data_vars)
        label = label_target(spec, ds)
        targets = list(spec.data.targets) or ([label] if label else [])
        if not targets:
            raise SpecError("data.targets", f"expected target variables among {names}, found none")
        form = _target_form(ds, targets)
        inputs = list(spec.data.inputs) or [v for v in names if _is_input(ds, v, targets)]
        bad = [v for v in inputs if v not in names or not pde_data.is_step(ds[v]) or v in targets]
        if bad or not inputs:
            raise SpecError("data.inputs", f"expected sequence variables (sample, time[, feature]) among {names}, "
                            f"other than the targets; found {bad or 'none'}")
        readout = spec.model.config.get("readout", "steps" if form == "step" else "last")
        if (readout == "steps") != (form == "step"):
            expected = ("'steps' for per-step targets" if form == "step"
                        else "'last' or 'mean' for one value per sequence")
            raise SpecError("model.config.readout", f"expected {expected}, found {readout!r}")
        classes = pde_data.n_classes(ds, targets[0]) if form == "label" else 0
        in_channels = sum(ds.sizes[FEATURE] if FEATURE in ds[v].dims else 1 for v in inputs)
        derived = {} if "readout" in spec.model.config else {"readout": readout}
        return {"data.inputs": inputs, "data.targets": targets, "task.classes": classes, "model.derived": derived,
                "model.in_channels": in_channels, "model.out_channels": classes or len(targets)}

    def _fit(self, source, variables) -> pde_data.Normalizer | None:
        """The normalizer of ``variables`` over the training split's valid steps (``data.normalize``; None: none)."""
        method, train = self.spec.data.normalize, list(self.spec.data.splits.train)
        return None if method is None else pde_data.fit_sequence_normalizer(source, list(variables), indices=train,
                                                                            method=method)

    def dataset(self, source, indices, *, cache=False, targets=True, steps=None, dtype=torch.float32):
        names = self.spec.data.targets if targets else ()
        return pde_data.SequenceDataset(source, self.spec.data.inputs, names, indices=list(indices), cache=cache,
                                        dtype=dtype)

    def data_lines(self, source):
        return [*super().data_lines(source), f"time steps: {describe_time(source.dataset)}"]

    def forward(self, model: nn.Module, batch: Batch, *, training: bool):
        return model(batch.inputs, dt=batch.dt, mask=batch.mask)


class SequenceClassification(LabelTask, Sequence):
    """Sequences → logits ``(batch, classes)`` of one integer label per sequence."""

    def fit_normalizers(self, source):
        return Normalizers(self._fit(source, self.spec.data.inputs), None)


class SequenceRegression(Sequence):
    """Sequences → float targets per sequence ``(batch, C_out)`` or per step ``(batch, time, C_out)``."""

    losses_allowed = ("mse",)

    def fit_normalizers(self, source):
        return Normalizers(self._fit(source, self.spec.data.inputs), self._fit(source, self.spec.data.targets))

    def _squares(self, pred, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        """Per sample: the sum of squared errors over valid steps and channels, and their number ``(batch,)`` each."""
        y = batch.targets
        if pred.shape != y.shape:
            raise ValueError(f"pred: expected the targets' shape {tuple(y.shape)}, found {tuple(pred.shape)}")
        sq = (pred - y).square()
        if sq.ndim == 3:  # per step: (batch, time, C), padded steps left out
            weight = batch.mask.to(sq.dtype)[..., None]
            return (sq * weight).sum((1, 2)), weight.sum((1, 2)) * sq.shape[2]
        return sq.sum(1), torch.full_like(sq[:, 0], sq.shape[1])

    def losses(self, pred, batch):
        sq, n = self._squares(pred, batch)
        return sq / n.clamp_min(1)

    def metrics(self, pred, batch):
        return self._errors(self.normalizers.decode(pred), self._decoded(batch), self.rul_channel)

    def _decoded(self, batch: Batch) -> Batch:
        """``batch`` with its targets in physical units."""
        return replace(batch, targets=self.normalizers.decode(batch.targets))

    def _errors(self, p: torch.Tensor, batch: Batch, rul: int | None) -> dict[str, torch.Tensor]:
        """Per sample: squared errors and their number over the channels of ``p`` (physical units), and the PHM
        score of channel ``rul`` (a per-sequence remaining useful life)."""
        sq, n = self._squares(p, batch)
        out = {"squares": sq, "entries": n}
        if rul is not None and p.ndim == 2:
            out["phm"] = evaluation.phm_score(p[:, rul], batch.targets[:, rul], reduce="none")
        return out

    def _per_variable(self, p: torch.Tensor, batch: Batch) -> dict[str, dict[str, torch.Tensor]]:
        """:meth:`_errors` of each float target alone, from predictions ``p`` and a :meth:`_decoded` ``batch``, both
        in physical units (several targets only: their units differ)."""
        targets, t = self.spec.data.targets, batch.targets
        if len(targets) < 2:
            return {}
        return {name: self._errors(p[..., c:c + 1], replace(batch, targets=t[..., c:c + 1]),
                                   0 if c == self.rul_channel else None) for c, name in enumerate(targets)}

    @property
    def rul_channel(self) -> int | None:
        """The channel of a remaining-useful-life target, if the run has one."""
        targets = self.spec.data.targets
        return targets.index(RUL) if RUL in targets else None

    def summary(self, means: dict[str, float], n: int) -> dict[str, float]:
        """The MSE and RMSE over every valid step of the set, and the PHM score's sum."""
        out = dict(means)
        if "squares" in out:  # over every valid step and channel of the set (not a mean of per-sample RMSEs)
            out["mse"] = out.pop("squares") / max(out.pop("entries"), 1e-300)
            out["rmse"] = out["mse"] ** 0.5
        if "phm" in means:
            out["phm_sum"] = means["phm"] * n
        return out

    def score(self, record: dict) -> float:
        return record.get("val_rmse", record["train_loss"])

    def predicted(self, pred, batch):
        return _padding_nan(self.normalizers.decode(pred), batch.mask)

    def evaluate(self, model, source, samples, options: EvalOptions):
        sums, preds, per_variable = MetricSums(), [], {}
        # the mean predictor: the training mean of each target, i.e. zero in a gaussian normalizer's units
        mean = MetricSums() if self.normalizers.has_mean else None
        for pred, batch in self.predictions(model, source, samples, options):
            p, truth = self.normalizers.decode(pred), self._decoded(batch)  # physical units, decoded once
            sums.add(self._errors(p, truth, self.rul_channel))
            for name, values in self._per_variable(p, truth).items():
                per_variable.setdefault(name, MetricSums()).add(values)
            if mean is not None:
                mean.add(self._errors(self.normalizers.decode(torch.zeros_like(pred)), truth, self.rul_channel))
            preds.append(_padding_nan(p, batch.mask))
        files = [pde_data.save(self.as_dataset(source.dataset, samples, torch.cat(preds)),
                               Path(options.out) / "pred.nc")] if options.write else []
        result = {"metrics": self.result(sums)}
        if mean is not None:
            result["baseline"] = {"mean_predictor": self.result(mean)}
        if per_variable:
            result["per_variable"] = {name: self.result(v) for name, v in per_variable.items()}
        return result, files

    def as_dataset(self, ds, samples, pred):
        """Per step: with the time coordinate (NaN on padded steps)."""
        targets, values = self.spec.data.targets, pred.numpy()
        if values.ndim == 3:
            variables = {v: ((SAMPLE, TIME), values[..., k]) for k, v in enumerate(targets)}
        else:
            variables = {v: ((SAMPLE,), values[:, k]) for k, v in enumerate(targets)}
        out = xr.Dataset(variables, coords={SAMPLE: samples})
        if values.ndim == 3 and TIME in ds.coords:
            out = out.assign_coords({TIME: ds[TIME].isel({SAMPLE: samples}) if SAMPLE in ds[TIME].dims else ds[TIME]})
        return out
