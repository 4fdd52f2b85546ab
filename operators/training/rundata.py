"""The typed description of a run's data: what is read, how it is split, and which file it came from.

A :class:`RunData` is frozen and stored (as plain values, :meth:`RunData.to_state`) in every checkpoint
and in ``run.json``. It holds the split indices themselves, so ``evaluate`` scores exactly the stored
test samples, and the source's :class:`pde_data.Fingerprint` (layout, sizes, dtypes, a hash of a few
sample slices), so a moved or copied file is recognised and a different one is refused.

Example:
    >>> rd = describe(ds, window=10, sizes=(800, 100, 100))
    >>> rd.kind, rd.inputs, rd.m, len(rd.splits.test)
    ('window', ('vorticity',), 10, 100)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import xarray as xr

import pde_data
from pde_data.fingerprint import Fingerprint
from pde_data.model import SAMPLE, TIME, spatial_dims

__all__ = ["RunData", "Splits", "describe", "STATE_FORMAT"]

KINDS = ("steady", "window", "classify")
#: Version of :meth:`RunData.to_state`; checkpoints of older versions are refused with a clear message.
STATE_FORMAT = 2


@dataclass(frozen=True)
class Splits:
    """Disjoint sorted sample indices of the ``train``, ``val`` and ``test`` splits."""

    train: tuple[int, ...]
    val: tuple[int, ...]
    test: tuple[int, ...]

    @property
    def scored(self) -> tuple[str, tuple[int, ...]]:
        """``(name, indices)`` of the split ``evaluate`` scores: test, or val when test is empty."""
        return ("test", self.test) if self.test else ("val", self.val)


@dataclass(frozen=True)
class RunData:
    """A run's data: ``kind`` ``steady`` (``inputs`` → ``targets``), ``window`` (``m`` frames of
    ``inputs`` → the next ``horizon`` frames of the same variables, ``targets == inputs``) or
    ``classify`` (image ``inputs`` → the label variable ``targets[0]`` of ``classes`` classes)."""

    kind: str
    inputs: tuple[str, ...]
    targets: tuple[str, ...]
    splits: Splits
    source: Fingerprint
    m: int = 0
    horizon: int = 1
    normalize: str | None = "gaussian"
    split_seed: int = 0
    classes: int = 0

    @property
    def windowed(self) -> bool:
        return self.kind == "window"

    @property
    def classifying(self) -> bool:
        return self.kind == "classify"

    @property
    def channels(self) -> tuple[int, int]:
        """``(in_channels, out_channels)`` of a one-step model for this data."""
        if self.windowed:
            return self.m * len(self.inputs), len(self.inputs)
        if self.classifying:
            return len(self.inputs), self.classes
        return len(self.inputs), len(self.targets)

    def to_state(self) -> dict:
        """Plain values only (JSON and ``torch.load(weights_only=True)`` read them back)."""
        return {"format": STATE_FORMAT, "kind": self.kind, "inputs": list(self.inputs), "targets": list(self.targets),
                "splits": {k: list(getattr(self.splits, k)) for k in ("train", "val", "test")},
                "source": self.source.to_state(), "m": self.m, "horizon": self.horizon,
                "normalize": self.normalize, "split_seed": self.split_seed, "classes": self.classes}

    @classmethod
    def from_state(cls, state: dict) -> "RunData":
        found = state.get("format") if isinstance(state, dict) else None
        if found != STATE_FORMAT:
            raise ValueError(f"run data: expected description format {STATE_FORMAT}, found {found!r} "
                             "(a run trained by an older circuitop: train it again)")
        if state.get("kind") not in KINDS:
            raise ValueError(f"run data: expected kind one of {KINDS}, found {state.get('kind')!r}")
        splits = Splits(*(tuple(int(i) for i in state["splits"][k]) for k in ("train", "val", "test")))
        return cls(str(state["kind"]), tuple(state["inputs"]), tuple(state["targets"]), splits,
                   Fingerprint.from_state(state["source"]), int(state["m"]), int(state["horizon"]),
                   state["normalize"], int(state["split_seed"]), int(state.get("classes", 0)))


def _default_sizes(n: int) -> list[int]:
    """80/10/10 %, at least one validation and test sample once there are 3 samples (all train below)."""
    n_val = max(1, n // 10) if n >= 3 else 0
    return [n - 2 * n_val, n_val, n_val]


def _window_variables(ds: xr.Dataset, inputs, targets) -> list[str]:
    names = list(ds.data_vars)
    variables = list(inputs) if inputs else [v for v in names if TIME in ds[v].dims]
    if not variables:
        raise ValueError(f"--window needs variables with a '{TIME}' dim; found {names} without one")
    if targets and list(targets) != variables:
        raise ValueError(f"--target: time-dependent runs predict their input variables {variables}, found {list(targets)}")
    missing = [v for v in variables if v not in names or TIME not in ds[v].dims]
    if missing:
        raise ValueError(f"--input: expected variables with a '{TIME}' dim among {names}; not found or without time: {missing}")
    return variables


def _label_variables(ds: xr.Dataset, inputs, targets) -> list[str] | None:
    """The target when it is one label variable (or, with no targets named, the data's label variable with
    an ``n_classes`` attribute), else None."""
    if targets:
        return list(targets) if len(targets) == 1 and targets[0] in ds.data_vars and pde_data.is_label(ds[targets[0]]) else None
    # unnamed: only a label that says so (an n_classes attribute), not, e.g., an integer per-sample setting
    labels = [v for v in ds.data_vars if pde_data.is_label(ds[v]) and "n_classes" in ds[v].attrs and v not in (inputs or ())]
    return labels[:1] or None


def _image_variables(ds: xr.Dataset, inputs, label: str) -> list[str]:
    names = list(ds.data_vars)
    images = list(inputs) if inputs else [v for v in names if spatial_dims(ds[v]) and TIME not in ds[v].dims]
    bad = [v for v in images if v not in names or not spatial_dims(ds[v]) or TIME in ds[v].dims]
    if bad or not images:
        raise ValueError(f"--input: expected image variables (fields without '{TIME}') to classify by {label!r}; "
                         f"found {bad or 'none'} among {names}")
    return images


def _steady_variables(ds: xr.Dataset, inputs, targets) -> tuple[list[str], list[str]]:
    names = list(ds.data_vars)
    inputs = list(inputs) if inputs else names[:1]
    if not targets:  # the other variables on the inputs' grid (not, e.g., Poisson's coefficients (sample, i, j))
        dims = ds[inputs[0]].dims if inputs[0] in names else None
        targets = [v for v in names if v not in inputs and ds[v].dims == dims]
    missing = [v for v in inputs + targets if v not in names]
    if missing or not targets:
        raise ValueError(f"expected input/target variables among {names}; missing {missing or 'a target'}")
    timed = [v for v in inputs + targets if TIME in ds[v].dims]
    if timed:
        raise ValueError(f"variables {timed} have a '{TIME}' dim: pass --window M for time-dependent data")
    return inputs, targets


def _splits(n: int, sizes, seed: int) -> Splits:
    parts = pde_data.split_indices(n, sizes=list(sizes) if sizes is not None else _default_sizes(n), seed=seed)
    return _checked(Splits(*(tuple(int(i) for i in parts[k]) for k in ("train", "val", "test"))), n)


def _checked(splits: Splits, n: int) -> Splits:
    """``splits`` with sorted indices, if they are disjoint sample indices in ``[0, n)`` and train is not empty."""
    parts = [sorted(int(i) for i in getattr(splits, k)) for k in ("train", "val", "test")]
    every = [i for p in parts for i in p]
    if not parts[0] or len(set(every)) != len(every) or (every and not 0 <= min(every) <= max(every) < n):
        raise ValueError(f"splits: expected disjoint sample indices in [0, {n}) with at least one training sample; "
                         f"found sizes {[len(p) for p in parts]}, range [{min(every, default=0)}, {max(every, default=0)}]")
    return Splits(*(tuple(p) for p in parts))


def describe(ds: xr.Dataset, *, inputs: Sequence[str] | None = None, targets: Sequence[str] | None = None,
             window: int | None = None, horizon: int = 1, sizes: Sequence[int] | None = None, seed: int = 0,
             normalize: str | None = "gaussian", splits: Splits | None = None) -> RunData:
    """Validate the choice of variables against ``ds``, draw the seeded split and fingerprint the source.

    Steady (``window`` None): ``inputs`` → ``targets`` (defaults: the first variable → the others with
    the same dims).
    Classification (a label variable, integer of dims ``(sample,)``, as the target or, with no targets
    named, one with an ``n_classes`` attribute in the data): image ``inputs`` (default: every field variable without time) → the label.
    Time-dependent (``window = m``): ``m`` frames of ``inputs`` (default: every variable with time)
    → the next ``horizon`` frames of the same variables. The split is drawn with ``seed`` from
    ``sizes`` (default 80/10/10 %), or given explicitly as ``splits`` (e.g. a benchmark's fixed sets).
    """
    if SAMPLE not in ds.dims:
        raise ValueError(f"{ds.attrs.get('source_file', 'data')}: expected a '{SAMPLE}' dim in the data model; "
                         f"found dims {tuple(ds.dims)}")
    if normalize not in (None, *pde_data.normalize.KINDS):
        raise ValueError(f"normalize: expected one of {pde_data.normalize.KINDS} or None, found {normalize!r}")
    splits = _splits(ds.sizes[SAMPLE], sizes, seed) if splits is None else _checked(splits, ds.sizes[SAMPLE])
    common = dict(splits=splits, source=pde_data.fingerprint(ds), normalize=normalize, split_seed=int(seed))
    if window is not None:
        variables = tuple(_window_variables(ds, inputs, targets))
        n_time = ds.sizes[TIME]
        if window < 1 or horizon < 1 or window + horizon > n_time:
            raise ValueError(f"--window/--unroll: expected m >= 1, k >= 1 and m + k <= {n_time} frames; "
                             f"found m={window}, k={horizon}")
        return RunData("window", variables, variables, m=int(window), horizon=int(horizon), **common)
    label = _label_variables(ds, inputs, targets)
    if label is not None:  # an integer (sample,) target: classification
        images = _image_variables(ds, inputs, label[0])
        return RunData("classify", tuple(images), tuple(label), classes=pde_data.n_classes(ds, label[0]), **common)
    ins, outs = _steady_variables(ds, inputs, targets)
    return RunData("steady", tuple(ins), tuple(outs), **common)
