"""Sequence tasks: sequences ``(sample, time[, feature])`` with irregular times and padded unequal lengths
(the data model's ``length`` variable) → a target per sequence or per step.

==========================  ==========================  ============================================
target variable             model output                loss (auto) and metrics
==========================  ==========================  ============================================
integer label ``(sample,)``  logits ``(batch, classes)``  cross-entropy; top-1, top-5, cross-entropy
float ``(sample,)``          ``(batch, C_out)``           MSE (normalized); MSE and RMSE, and the PHM
                                                          score (NAC Eq. 58, mean and sum) of a
                                                          remaining-useful-life target named ``rul``
float ``(sample, time)``     ``(batch, time, C_out)``     MSE over valid steps; MSE and RMSE
==========================  ==========================  ============================================

A batch is ``(x, y, dt, mask)`` (:class:`pde_data.SequenceDataset`); every model of the registry's
``sequence`` task is called as ``model(x, dt=dt, mask=mask)``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import xarray as xr
from torch import nn

import evaluation
import pde_data
from operators.training.spec import RunSpec, SpecError
from operators.training.tasks.base import EvalOptions, Normalizers, Task
from operators.training.tasks.classify import CLASS_METRICS, check_labels, label_target
from pde_data.model import FEATURE, LENGTH, SAMPLE, TIME, spatial_dims

__all__ = ["Sequence", "RUL"]

#: the name of a remaining-useful-life target, which is also scored with the PHM score
RUL = "rul"


def _is_sequence(da: xr.DataArray) -> bool:
    return TIME in da.dims and not spatial_dims(da) and set(da.dims) <= {SAMPLE, TIME, FEATURE}


def _shape(ds: xr.Dataset, targets: list[str]) -> str:
    """``"label"``, ``"sequence"`` (one value per sample) or ``"step"`` (one per step) for the targets."""
    kinds = {"label" if pde_data.is_label(ds[v]) else "step" if TIME in ds[v].dims else "sequence" for v in targets}
    bad = [v for v in targets if ds[v].dims not in ((SAMPLE,), (SAMPLE, TIME))]
    if bad or len(kinds) != 1 or ("label" in kinds and len(targets) != 1):
        raise SpecError("data.targets", f"expected one label, or float targets all of dims ({SAMPLE},) or all of "
                        f"({SAMPLE}, {TIME}); found {[(v, ds[v].dims) for v in targets]}")
    return kinds.pop()


class Sequence(Task):
    """Sequences ``x (batch, time, C_in)`` with step sizes and masks → per-sequence or per-step targets."""

    kind, model_task, losses_allowed = "sequence", "sequence", ("mse", "cross_entropy")

    def __init__(self, spec: RunSpec, normalizers: Normalizers = Normalizers()):
        super().__init__(spec, normalizers)
        self.labels = spec.task.classes > 0
        if spec.task.loss == "auto":
            self.loss = "cross_entropy" if self.labels else "mse"
        if (self.loss == "cross_entropy") != self.labels:
            raise SpecError("task.loss", f"expected {'cross_entropy' if self.labels else 'mse'} (or auto) for these "
                            f"targets, found {spec.task.loss!r}")

    @classmethod
    def resolve(cls, spec: RunSpec, ds: xr.Dataset) -> RunSpec:
        names = list(ds.data_vars)
        label = label_target(spec, ds)
        targets = list(spec.data.targets) or ([label] if label else [])
        if not targets or any(v not in names for v in targets):
            raise SpecError("data.targets", f"expected target variables among {names}, found {targets or 'none'}")
        shape = _shape(ds, targets)
        inputs = list(spec.data.inputs) or [v for v in names if v not in targets and v != LENGTH and _is_sequence(ds[v])
                                            and v not in ds.coords]
        bad = [v for v in inputs if v not in names or not _is_sequence(ds[v])]
        if bad or not inputs:
            raise SpecError("data.inputs", f"expected sequence variables (sample, time[, feature]) among {names}, "
                            f"found {bad or 'none'}")
        classes = pde_data.n_classes(ds, targets[0]) if shape == "label" else 0
        config = dict(spec.model.config)
        if shape == "step":
            if config.get("readout", "steps") != "steps":
                raise SpecError("model.config", f"expected readout 'steps' for per-step targets, found "
                                f"{config['readout']!r}")
            config["readout"] = "steps"
        in_channels = sum(ds.sizes[FEATURE] if FEATURE in ds[v].dims else 1 for v in inputs)
        return spec.override({"data.inputs": inputs, "data.targets": targets, "task.classes": classes,
                              "model.config": config, "model.in_channels": in_channels,
                              "model.out_channels": classes or len(targets)})

    def fit_normalizers(self, source):
        train, kind = list(self.spec.data.splits.train), self.spec.data.normalize
        if kind is None:
            return Normalizers()
        fit = lambda vs: pde_data.fit_sequence_normalizer(source, list(vs), indices=train, kind=kind)  # noqa: E731
        return Normalizers(fit(self.spec.data.inputs), None if self.labels else fit(self.spec.data.targets))

    def dataset(self, source, indices, *, cache, dtype=torch.float32):
        n = self.normalizers
        return pde_data.SequenceDataset(source, self.spec.data.inputs, self.spec.data.targets, indices=list(indices),
                                        input_normalizer=n.input, output_normalizer=n.output, cache=cache, dtype=dtype)

    def predict(self, model: nn.Module, batch, *, training: bool):
        x, _, dt, mask = batch
        return model(x, dt=dt, mask=mask)

    def _errors(self, pred, batch) -> torch.Tensor:
        """Squared errors per sample, averaged over valid steps and channels ``(batch,)``, in the given units."""
        y, mask = batch[1], batch[3]
        sq = (pred - y).square()
        if sq.ndim == 3:  # per step: (batch, time, C) over the valid steps
            weight = mask.to(sq.dtype)[..., None]
            return (sq * weight).sum((1, 2)) / (weight.sum((1, 2)) * sq.shape[2]).clamp_min(1)
        return sq.mean(1)

    def losses(self, pred, batch):
        if self.labels:
            return evaluation.cross_entropy(pred, batch[1], reduce="none")
        return self._errors(pred, batch)

    def metrics(self, pred, batch):
        if self.labels:
            return {name: fn(pred, batch[1], reduce="none") for name, fn in CLASS_METRICS.items()}
        decode = self.normalizers.decode
        p, t = decode(pred), decode(batch[1])
        out = {"mse": self._errors(p, (batch[0], t, batch[2], batch[3]))}
        if self.rul_channel is not None and p.ndim == 2:
            c = self.rul_channel
            out["phm"] = evaluation.phm_score(p[:, c], t[:, c], reduce="none")
        return out

    @property
    def rul_channel(self) -> int | None:
        """The channel of a remaining-useful-life target, if the run has one."""
        targets = self.spec.data.targets
        return targets.index(RUL) if RUL in targets else None

    def summary(self, means: dict[str, float], n: int) -> dict[str, float]:
        """The RMSE of the whole set (root of the mean over samples of their MSE), the PHM score's sum."""
        out = dict(means)
        if "mse" in means:
            out["rmse"] = means["mse"] ** 0.5
        if "phm" in means:
            out["phm_sum"] = means["phm"] * n
        return out

    def score(self, record: dict) -> float:
        if self.labels:
            return 1.0 - record["val_top1"] if "val_top1" in record else record["train_loss"]
        return record.get("val_rmse", record["train_loss"])

    @torch.no_grad()
    def evaluate(self, model, source, samples, options: EvalOptions):
        if options.steps is not None:
            raise SpecError("steps", "expected none: a sequence run is scored on whole sequences")
        data = self.dataset(source, samples, cache=False)
        sums, preds = {}, []
        for start in range(0, len(samples), options.batch_size):
            batch = data.read_batch(list(range(start, min(start + options.batch_size, len(samples)))))
            if self.labels:
                check_labels(batch[1], self.spec.task.classes, source.name)
            pred = self.predict(model, tuple(t.to(options.device) for t in batch), training=False).float().cpu()
            for name, values in self.metrics(pred, batch).items():
                sums[name] = sums.get(name, 0.0) + float(values.sum())
            preds.append(pred.argmax(1) if self.labels else self.normalizers.decode(pred))
        metrics = self.summary({k: v / max(len(samples), 1) for k, v in sums.items()}, len(samples))
        files = [self._write(Path(options.out) / "pred.nc", source.dataset, samples, torch.cat(preds))] if options.write else []
        return {"metrics": metrics}, files

    def _write(self, path: Path, ds: xr.Dataset, samples: np.ndarray, pred: torch.Tensor) -> Path:
        """``pred.nc``: the predicted targets over the source's sample indices (and its time coordinate, per step)."""
        targets, values = self.spec.data.targets, pred.numpy()
        if self.labels:
            variables = {targets[0]: ((SAMPLE,), values.astype(np.int64))}
        elif values.ndim == 3:
            variables = {v: ((SAMPLE, TIME), values[..., k]) for k, v in enumerate(targets)}
        else:
            variables = {v: ((SAMPLE,), values[:, k]) for k, v in enumerate(targets)}
        out = xr.Dataset(variables, coords={SAMPLE: samples})
        if values.ndim == 3 and TIME in ds.coords:
            out = out.assign_coords({TIME: ds[TIME].isel({SAMPLE: samples}) if SAMPLE in ds[TIME].dims else ds[TIME]})
        return pde_data.save(out, path)
