"""Field tasks: :class:`Steady` (input fields → target fields, e.g. Darcy ``a → u``) and :class:`Window`
(``window`` given frames → the next ``horizon`` frames of the same variables, rolled out autoregressively).

Losses and validation metrics are relative errors in physical units (decoded), per sample; ``evaluate``
adds the PDEBench suite and, for windows, per-step rollout errors (:mod:`operators.training.tasks.field_eval`,
which reads the task's :meth:`~Steady.dataset` in the data's units, predicts with :meth:`~Steady.predict_physical`,
scores against its :meth:`~Steady.truth` and writes on the :meth:`~Steady.template` of the task: a :class:`Window`
rolls out).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch
import xarray as xr
from torch import nn

import evaluation
import pde_data
from operators.rollout import call, rollout
from operators.training.spec import RunSpec, SpecError
from operators.training.tasks.base import EvalOptions, Normalizers, Task, fit_variables, standing_in
from pde_data.core.model import TIME, spatial_dims

__all__ = ["Steady", "Window", "FIELD_LOSSES", "FIELD_METRICS"]

FIELD_LOSSES = {"rel_l2": evaluation.rel_l2, "rel_l1": evaluation.rel_l1, "h1": evaluation.rel_h1}
#: per-sample validation metrics of field runs (``evaluate`` reports them too, beside the PDEBench suite)
FIELD_METRICS = {"rel_l2": evaluation.rel_l2, "rel_l1": evaluation.rel_l1,
                 "rel_l2_spectral": evaluation.rel_l2_spectral, "nrmse_range": evaluation.nrmse_range}


#: the fraction of each axis a Fourier model's latent field is zero-padded by on a grid that is not periodic
#: (``task.periodic`` false; ``model.config.padding`` overrides): measured against none, and against N/2 modes, by
#: ``examples/darcy_resolutions.py`` (RESULTS.md)
PADDING = 0.25


def _model_fields(spec: RunSpec, ds: xr.Dataset, inputs: list[str], in_channels: int, out_channels: int,
                  **auto) -> dict:
    """The model's channels, and the config values the data decide unless given (``n_dim``; ``frames``; Fourier
    ``n_modes`` and, on a grid that is not periodic, ``padding``)."""
    from operators.models import MODELS

    entry = MODELS.get(spec.model.name)
    names = {f.name for f in dataclasses.fields(entry.config)} if entry else set()
    grid = tuple(ds.sizes[d] for d in spatial_dims(ds[inputs[0]]))
    values = {"n_dim": len(grid), **auto, **(_fitted_modes(spec, entry.config, grid) if "n_modes" in names else {}),
              **({"padding": PADDING} if "padding" in names and not spec.task.periodic else {})}
    derived = {k: v for k, v in values.items() if k in names and k not in spec.model.config}
    return {"model.in_channels": in_channels, "model.out_channels": out_channels, "model.derived": derived}


def _fitted_modes(spec: RunSpec, config: type, grid: tuple[int, ...]) -> dict:
    """``{"n_modes": ...}`` the training ``grid`` resolves without aliasing when the config's default keeps more: at
    most ``N // 3`` per axis (the FNO paper's count: wavenumbers ``-k..k-1``), the 2/3 rule of spectral methods
    (Orszag 1971): a pointwise nonlinearity on ``N`` points folds the products of modes above ``N/3`` back onto kept
    modes, so weights trained there learn the training grid's aliasing and act otherwise on a finer grid (measured
    against ``N // 2`` by ``examples/darcy_resolutions.py``, in RESULTS.md); none when the default fits. Modes given
    above ``N // 2`` (the grid holds ``-N/2..N/2-1``) are refused (never trained, at any resolution the model runs
    at later they act as untrained weights), unless ``model.force``."""
    from operators.models.fno import expand_modes

    held = tuple(max(1, n // 2) for n in grid)
    given = spec.model.config.get("n_modes")
    if given is not None:
        modes = expand_modes(given, len(grid))
        if any(m > h for m, h in zip(modes, held)) and not spec.model.force:
            largest = held[0] if len(set(held)) == 1 else held
            raise SpecError("model.config.n_modes", f"at most {largest} Fourier modes per axis on the training "
                            f"grid {'x'.join(map(str, grid))} (N/2: more are never trained; {{model.force}} keeps "
                            "them)", str(given), ["model.force"])
        return {}
    default = expand_modes(config().n_modes, len(grid))
    fitted = tuple(min(m, max(1, n // 3)) for m, n in zip(default, grid))
    return {} if fitted == default else {"n_modes": fitted[0] if len(set(fitted)) == 1 else fitted}


def _device(t: torch.Tensor | None, device) -> torch.Tensor | None:
    return None if t is None else t.to(device)


class _FieldTask(Task):
    domain = "fields"
    losses_allowed = ("rel_l2", "rel_l1", "h1")
    #: axes of a prediction before its spatial ones: ``(batch, channels)``; a window's ``(batch, horizon, channels)``
    lead_axes = 2

    def losses(self, pred, batch):
        decode = self.normalizers.decode
        grid = {"periodic": self.spec.task.periodic, "n_spatial": pred.ndim - self.lead_axes} if self.loss == "h1" else {}
        return FIELD_LOSSES[self.loss](decode(pred), decode(batch.targets), reduce="none", **grid)

    def metrics(self, pred, batch):
        p, t = self.normalizers.decode(pred), self.normalizers.decode(batch.targets)
        return {name: fn(p, t, reduce="none") for name, fn in FIELD_METRICS.items()}

    def score(self, record: dict) -> float:
        return record.get("val_rel_l2", record["train_loss"])

    def evaluate(self, model, source, samples, options: EvalOptions):
        from operators.training.tasks.field_eval import evaluate_fields

        self.check_data(source)
        return evaluate_fields(self, model, source, samples, options)

    def predict(self, model, source, samples, options: EvalOptions):
        from operators.training.tasks.field_eval import predict_fields

        self.check_data(source)
        return predict_fields(self, model, source, samples, options)

    def check_data(self, source: pde_data.Source) -> None:
        """One line when a variable of ``source`` the run reads has another number of spatial dims than the run's
        model (``n_dim``), e.g. a 1D field standing in for a 2D one, or ``source`` lacks a parameter the run is
        conditioned on (:meth:`pde_data.Source.parameters`)."""
        ds, names = source.dataset, self.spec.data.condition
        for name in names:
            try:
                source.parameters([name])
            except ValueError:
                raise SpecError("data.path", f"the parameters {list(names)} the run is conditioned on, per sample or "
                                "once for the file (an attribute, or a name token such as beta0.4)",
                                f"no {name!r} (its parameters: {list(pde_data.parameters_of(ds))})") from None
        n_dim = self.spec.model.settings.get("n_dim")
        for path, names in (("data.inputs", self.spec.data.inputs), ("data.targets", self.spec.data.targets)):
            bad = [v for v in names if n_dim is not None and v in ds.data_vars and len(spatial_dims(ds[v])) != n_dim]
            if bad:
                raise SpecError(path, f"variables with {n_dim} spatial dims, as the run was trained on",
                                f"{bad[0]!r} of dims {tuple(ds[bad[0]].dims)}")


class Steady(_FieldTask):
    """``inputs`` fields of a sample → its ``targets`` fields: ``(batch, C_in, *s)`` → ``(batch, C_out, *s)``."""

    kind = "steady"

    @classmethod
    def resolve(cls, spec: RunSpec, ds: xr.Dataset) -> dict:
        names = list(ds.data_vars)
        inputs = list(spec.data.inputs) or names[:1]
        timed = [v for v in inputs if v in names and TIME in ds[v].dims]
        if timed:
            raise SpecError("task.window", f"expected the number of given frames of the time-dependent variables "
                            f"{timed} (a window run), found none")
        targets = list(spec.data.targets)
        if not targets:  # the other variables on the inputs' grid (not, e.g., Poisson's coefficients (sample, i, j))
            dims = ds[inputs[0]].dims if inputs[0] in names else None
            targets = [v for v in names if v not in inputs and ds[v].dims == dims]
        missing = [v for v in inputs + targets if v not in names]
        if missing or not targets:
            raise SpecError("data.inputs" if set(missing) & set(inputs) else "data.targets",
                            f"expected variables among {names}; missing {missing or 'a target'}")
        timed = [v for v in targets if TIME in ds[v].dims]
        if timed:
            raise SpecError("data.targets", f"expected steady targets for steady inputs, found {timed} with a '{TIME}' "
                            "dim")
        return {"data.inputs": inputs, "data.targets": targets,
                **_model_fields(spec, ds, inputs, len(inputs), len(targets))}

    def fit_normalizers(self, source):
        spec = self.spec
        return Normalizers(fit_variables(source, spec, spec.data.inputs), fit_variables(source, spec, spec.data.targets))

    def dataset(self, source, indices, *, cache=False, targets=True, steps=None, dtype=torch.float32):
        names = self.spec.data.targets if targets else ()
        return pde_data.PairDataset(source, self.spec.data.inputs, names, indices=list(indices), cache=cache,
                                    dtype=dtype, params=self.spec.data.condition)

    def forward(self, model: nn.Module, batch, *, training: bool):
        return call(model, batch.inputs, batch.params)

    def rollout_steps(self, n_time: int, steps: int | None, *, truth: bool) -> int:
        """The rollout steps ``evaluate``/``predict`` take for ``steps`` asked for on data of ``n_time`` frames
        (``truth``: scored against them): none for a steady run."""
        if steps is not None:
            raise SpecError("steps", "expected none: the run is a steady (input → target) model, not a time-stepper")
        return 0

    def template(self, ds: xr.Dataset, steps: int) -> xr.Dataset:
        """The target variables' dims and coordinates (values unused): the data's own targets where it has them,
        else the first input's grid."""
        targets = list(self.spec.data.targets)
        if all(v in ds.data_vars for v in targets):
            return ds[targets]
        grid = ds[self.spec.data.inputs[0]]
        return xr.Dataset({v: grid.copy(deep=False) for v in targets}, coords=grid.coords)

    @torch.no_grad()
    def predict_physical(self, model: nn.Module, batch, steps: int, device) -> torch.Tensor:
        """Predictions in physical units from ``batch``'s inputs in physical units, ``(batch, C_out, *s)``."""
        norms = self.normalizers
        params = _device(norms.encode_params(batch.params), device)
        return norms.decode(call(model, norms.encode(batch.inputs).to(device), params).cpu())

    def truth(self, batch) -> torch.Tensor:
        """What a prediction of :meth:`predict_physical` is scored against: the targets of ``batch``."""
        return batch.targets


class Window(_FieldTask):
    """``window`` frames ``(batch, window, C, *s)`` → the next ``horizon`` frames ``(batch, horizon, C, *s)`` by
    a one-step model rolled out (:func:`operators.rollout.rollout`; ``pushforward`` in training)."""

    kind = "window"
    lead_axes = 3

    @classmethod
    def resolve(cls, spec: RunSpec, ds: xr.Dataset) -> dict:
        names, inputs, targets = list(ds.data_vars), list(spec.data.inputs), list(spec.data.targets)
        variables = inputs or [v for v in names if TIME in ds[v].dims]
        if not variables:  # none given, none in time: the data are steady, the window is what does not fit
            raise SpecError("task.window", f"expected data with a '{TIME}' dim to roll out (a window run), found "
                            f"{names} without one (a steady input -> target run takes no window)")
        if targets and targets != variables:
            raise SpecError("data.targets", f"expected the input variables {variables} (a window run predicts "
                            f"its inputs), found {targets}")
        missing = [v for v in variables if v not in names or TIME not in ds[v].dims]
        if missing:
            raise SpecError("data.inputs", f"expected variables with a '{TIME}' dim among {names}; not found or "
                            f"without time: {missing}")
        m, k, n_time = spec.task.window, spec.task.horizon, ds.sizes[TIME]
        if m is None or m + k > n_time:
            raise SpecError("task.window", f"expected window >= 1 and window + horizon <= {n_time} frames; found "
                            f"window={m}, horizon={k}")
        return {"data.inputs": variables, "data.targets": variables,
                **_model_fields(spec, ds, variables, m * len(variables), len(variables), frames=m)}

    def fit_normalizers(self, source):
        norm = fit_variables(source, self.spec, self.spec.data.inputs)
        return Normalizers(norm, norm)

    def dataset(self, source, indices, *, cache=False, targets=True, steps=None, dtype=torch.float32):
        """Training windows (every start, ``horizon`` frames of truth); with ``steps``, one per sample from its first
        frame with ``steps`` frames of truth (``targets``) or none."""
        source, t, rollout_from_start = pde_data.open_source(source), self.spec.task, steps is not None
        horizon = (steps if rollout_from_start else t.horizon) if targets else 0
        stride = source.dataset.sizes[TIME] if rollout_from_start else 1
        return pde_data.WindowDataset(source, self.spec.data.inputs, window=t.window, horizon=horizon, stride=stride,
                                      indices=list(indices), cache=cache, dtype=dtype, params=self.spec.data.condition)

    def with_variables(self, inputs, targets):
        """A window run predicts its inputs: its targets follow them (``targets``: None or the same)."""
        names = standing_in("inputs", self.spec.data.inputs, inputs)
        if targets is not None and tuple(targets) != names:
            raise SpecError("targets", f"expected none or the inputs {list(names)}: a window run predicts its inputs; "
                            f"found {list(targets)}")
        return type(self)(self.spec.override({"data.inputs": names, "data.targets": names}), self.normalizers)

    def forward(self, model: nn.Module, batch, *, training: bool):
        push = training and self.spec.task.pushforward
        return rollout(model, batch.inputs, batch.targets.shape[1], pushforward=push, params=batch.params)

    def rollout_steps(self, n_time: int, steps: int | None, *, truth: bool) -> int:
        """``steps``, by default to the data's last frame; with ``truth`` no further than the data's frames."""
        m = self.spec.task.window
        last = n_time - m
        if steps is None and last < 1:
            raise SpecError("steps", f"expected a number of rollout steps: the data's {n_time} frames leave none "
                            f"after the run's {m} given frames")
        chosen = last if steps is None else steps
        if chosen < 1 or truth and chosen > last:
            bound = f"1..{last}" if truth else "a positive number of"
            raise SpecError("steps", f"expected {bound} rollout steps ({n_time} frames, {m} given), found {steps}")
        return chosen

    def template(self, ds: xr.Dataset, steps: int) -> xr.Dataset:
        """The targets' given frames and ``steps`` more: past the data's last frame at times extrapolated at the
        last spacing (frame numbers without a time coordinate)."""
        targets, frames, n_time = list(self.spec.data.targets), self.spec.task.window + steps, ds.sizes[TIME]
        if frames <= n_time:
            return ds[targets].isel({TIME: slice(0, frames)})
        like = ds[targets].isel({TIME: np.minimum(np.arange(frames), n_time - 1)})
        if TIME not in ds.coords:
            return like
        times = ds[TIME].values
        spacing = times[-1] - times[-2] if n_time > 1 else 1
        extra = times[-1] + spacing * np.arange(1, frames - n_time + 1)
        return like.assign_coords({TIME: np.concatenate([times, extra])})

    @torch.no_grad()
    def predict_physical(self, model: nn.Module, batch, steps: int, device) -> torch.Tensor:
        """``batch``'s given frames ``(batch, window, C, *s)`` then ``steps`` rolled out: ``(batch, window + steps, C,
        *s)``."""
        norms, given = self.normalizers, batch.inputs
        params = _device(norms.encode_params(batch.params), device)
        pred = norms.decode(rollout(model, norms.encode(given).to(device), steps, params=params).cpu())
        return torch.cat([given, pred], dim=1)

    def truth(self, batch) -> torch.Tensor:
        """The given frames then the rollout's truth ``(batch, window + steps, C, *s)``, :meth:`predict_physical`'s
        layout."""
        return torch.cat([batch.inputs, batch.targets], dim=1)
