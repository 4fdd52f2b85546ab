"""The one description of a training run: :class:`RunSpec`, a frozen, versioned tree of dataclasses.

==============  ===============================================================================
part            what it holds
==============  ===============================================================================
``data``        the source file (path, and once resolved its fingerprint), the variables, the split
                (sizes and seed, and once resolved the sample indices themselves), the normalization;
                or a generator of training samples made as they are needed (``generate``)
``task``        which problem: ``steady``, ``window``, ``classify`` or ``sequence`` (``None``: chosen
                from the data), the given frames ``window``, the ``horizon``, the loss and its options
``model``       the registry name, its config, and once resolved its in/out channels
``optim``       epochs, batch size, optimizer, schedule, clipping, precision, the training seed
``loading``     how data reaches the model (never changes the results)
==============  ===============================================================================

The command line and ``--config-file`` YAML parse into a RunSpec and into nothing else; a run's
``config.yaml`` is :meth:`RunSpec.request` as YAML (what was asked: no file-specific indices or
fingerprint), its ``run.json`` and every checkpoint hold the whole resolved spec (:meth:`RunSpec.to_dict`).
Resuming is: load the stored spec, apply the overrides, :func:`conflicts` names any field that changed.
Field paths (``"optim.lr"``) are the parameter names of the Python API; only the CLI maps them to options.

Example:
    >>> spec = RunSpec(data=DataSpec("darcy.nc", inputs=("a",), targets=("u",)), model=ModelSpec("fno"))
    >>> spec = spec.override({"optim.epochs": 20, "model.config": {"width": 32}})
    >>> RunSpec.from_dict(yaml.safe_load(spec.to_yaml())) == spec
    True
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import yaml

from operators.training.spec_values import SpecError, Splits, check, plain
from pde_data.core.fingerprint import Fingerprint
from pde_data.core.params import Typed, choices, param, typed
from pde_data.generate.defaults import PARAMS

__all__ = ["RunSpec", "DataSpec", "TaskSpec", "ModelSpec", "OptimSpec", "LoadingSpec", "Splits", "SpecError",
           "SPEC_VERSION", "RESUMABLE", "conflicts", "resumed", "choices_of"]

#: Version of the serialised form; a stored spec of another version is refused with one line.
SPEC_VERSION = 1
#: Fields a resumed run may change: they decide how long and how data is read, not what is learned. The
#: early-stopping ``optim.patience`` is one (how long): the stop is decided from the epochs since the best
#: score, which the checkpoint keeps, so a run that stopped stays stopped when resumed with more epochs and
#: goes on with a larger patience. The warm-up and plateau settings shape the learning rate of every later
#: epoch, so they are learned, like ``optim.lr``, and a resumed run keeps them.
RESUMABLE = ("optim.epochs", "optim.patience", "data.path", "loading.")


_POSITIVE = "a positive integer", lambda v: v >= 1
_AT_LEAST_0 = "an integer >= 0", lambda v: v >= 0
_EPOCHS = "a positive number of epochs", lambda v: v >= 1


@dataclass(frozen=True)
class DataSpec(Typed, prefix="data"):
    """The source and what is read from it. Empty ``inputs``/``targets``: chosen from the data.

    A run trains on generated data when ``generate`` names a generator (:data:`pde_data.generate.registry.GENERATORS`):
    epoch ``e`` trains on samples ``[e·N, (e+1)·N)`` (``N = samples_per_epoch``) of the stream of seed
    ``generate_seeds[0]``, made as it goes (:mod:`operators.training.online`), with the generator's
    ``generator`` parameters (completed with their defaults once resolved); validation and test read the
    ``split`` of a fixed set, ``path`` if given, else ``split[1] + split[2]`` samples of seed ``generate_seeds[1]``.
    ``condition``: the per-sample PDE parameters (variables of dims ``(sample,)``) the model is conditioned on;
    ``split_by``: a parameter whose held-out values make the test split (``operators.training.tasks.resolve``);
    ``storage``: a URL ``path``'s storage options without the secret ones (:func:`pde_data.core.remote.public`:
    those come from the command line again, or the environment)."""

    path: str | None = None
    storage: dict = field(default_factory=dict)
    generate: str | None = None
    generator: dict = field(default_factory=dict)
    samples_per_epoch: int | None = None
    generate_seeds: tuple[int, ...] = (0, 1)
    inputs: tuple[str, ...] = ()
    targets: tuple[str, ...] = ()
    condition: tuple[str, ...] = ()
    split: tuple[int, ...] | None = param(None, "three sizes (train, val, test) >= 0",
                                          lambda v: len(v) == 3 and min(v) >= 0)
    split_seed: int = 0
    split_by: str | None = None
    normalize: str | None = param("gaussian", choices=("gaussian", "minmax", None))
    splits: Splits | None = None
    fingerprint: Fingerprint | None = None

    def __post_init__(self):
        super().__post_init__()
        if self.generator and self.generate in PARAMS:  # the generator's parameters, typed by it
            object.__setattr__(self, "generator", typed(PARAMS[self.generate], self.generator, "data.generator"))

    def __hash__(self) -> int:  # a frozen part with a dict inside (``generator``): hash what identifies the data
        return hash((self.path, self.generate, self.inputs, self.targets, self.condition, self.splits, self.fingerprint))


@dataclass(frozen=True)
class TaskSpec(Typed, prefix="task"):
    """The problem: ``kind`` (None: from the data), ``window`` given frames → ``horizon`` frames (window
    runs), the loss (``auto``: the task's own) and whether the grid is ``periodic`` (the ``h1`` loss
    differentiates spectrally there, by finite differences otherwise; a Fourier model's latent field is zero-padded
    on a grid that is not: ``model.derived["padding"]``; the data carry no such flag),
    ``label_smoothing``/``shift`` (classification), and once resolved the number of ``classes``."""

    kind: str | None = param(None, choices=("steady", "window", "classify", "sequence", None))
    window: int | None = param(None, "a positive number of frames", lambda v: v >= 1)
    horizon: int = param(1, "a positive number of frames", lambda v: v >= 1)
    pushforward: bool = False
    loss: str = param("auto", choices=("auto", "rel_l2", "rel_l1", "h1", "mse", "cross_entropy"))
    periodic: bool = False
    label_smoothing: float = param(0.0, "a number in [0, 1)", lambda v: 0 <= v < 1)
    shift: int = param(0, *_AT_LEAST_0)
    classes: int = 0


@dataclass(frozen=True)
class ModelSpec(Typed, prefix="model"):
    """A registry model (:data:`operators.models.MODELS`): its name and config values; once resolved, the
    config values the data decide (``derived``: e.g. ``n_dim``, the ``frames`` of a window, a per-step
    ``readout``, Fourier ``n_modes`` the training grid resolves; never in ``config.yaml``, so a run asked again
    with other data decides them again), its channels and the number of PDE ``params`` it is conditioned on
    (``data.condition``). ``force``: keep a config the training grid cannot use (Fourier modes above its N/2 per
    axis), refused otherwise."""

    name: str | None = None
    config: dict = field(default_factory=dict)
    derived: dict = field(default_factory=dict)
    in_channels: int = 0
    out_channels: int = 0
    params: int = 0
    force: bool = False

    def __post_init__(self):
        super().__post_init__()
        if self.config and self.name is not None:  # a registry model's config values, typed by its config class
            from operators.models.registry import MODELS, config_values

            if self.name in MODELS:  # keys it lacks are left to the build (a resumed run names a change first)
                known = {k: v for k, v in self.config.items() if k in MODELS[self.name].fields}
                object.__setattr__(self, "config", {**self.config, **config_values(self.name, known)})

    def __hash__(self) -> int:  # a frozen tree with a dict inside: hash what identifies the model
        return hash((self.name, self.in_channels, self.out_channels))

    @property
    def settings(self) -> dict:
        """Every config value the model is built with: ``config`` and ``derived``."""
        return {**self.config, **self.derived}

    def build(self):
        """The module (:func:`operators.models.build`) of a resolved spec, freshly initialised."""
        from operators.models import build

        return build(self.name, self.in_channels, self.out_channels, params=self.params, **self.settings)


@dataclass(frozen=True)
class OptimSpec(Typed, prefix="optim"):
    """Optimisation (the CHONN paper's per-benchmark values are in CHONN, Methods): the learning-rate
    schedule (:class:`~operators.training.optim.EpochSchedule`) warms up linearly over ``warmup`` epochs, then
    ``step`` multiplies it by ``gamma`` every ``step_size`` epochs, ``cosine`` anneals it to 0, ``plateau``
    multiplies it by ``gamma`` after ``plateau_patience`` epochs without a better validation score; training
    stops early after ``patience`` epochs without one (None: never). ``compile``: the model's forward under
    ``torch.compile`` (the same results within float tolerance; checkpoints hold the plain module's weights).
    ``ema``: the decay of an exponential moving average of the weights, kept beside them (validation, best.pt's
    choice, ``evaluate`` and ``predict`` use the average; None: none), as pdearena keeps; ``noise``: the standard
    deviation of gaussian noise added to the normalized inputs of every training step (Brandstetter et al. 2022;
    PDE-Refiner), 0 for none."""

    epochs: int = param(10, *_EPOCHS)
    batch_size: int = param(20, *_POSITIVE)
    lr: float = param(1e-3, "a positive number", lambda v: v > 0)
    weight_decay: float = param(1e-4, "a number >= 0", lambda v: v >= 0)
    optimizer: str = param("adamw", choices=("adam", "adamw"))
    scheduler: str = param("step", choices=("step", "cosine", "plateau", "none"))
    step_size: int = param(100, *_POSITIVE)
    gamma: float = param(0.5, "a number in (0, 1]", lambda v: 0 < v <= 1)
    warmup: int = param(0, "a number of epochs >= 0", lambda v: v >= 0)
    plateau_patience: int = param(10, "a number of epochs >= 0", lambda v: v >= 0)
    patience: int | None = param(None, *_EPOCHS)
    grad_clip: float | None = param(None, "a positive number", lambda v: v > 0)
    amp: bool = False
    compile: bool = False
    seed: int = 0
    ema: float | None = param(None, "a decay in (0, 1)", lambda v: 0 < v < 1)
    noise: float = param(0.0, "a standard deviation >= 0", lambda v: v >= 0)


@dataclass(frozen=True)
class LoadingSpec(Typed, prefix="loading"):
    """How data reaches the model: ``cache`` ``stream``/``memory``/``auto`` (cache when the train and
    validation samples fit ``memory_budget`` bytes, per process), loader ``workers`` (None: min(4, cores))
    and the batches each prefetches."""

    cache: str = param("auto", choices=("auto", "memory", "stream"))
    workers: int | None = param(None, *_AT_LEAST_0)
    prefetch: int = param(2, *_POSITIVE)
    memory_budget: int = param(2 << 30, "a number of bytes >= 0", lambda v: v >= 0)


@dataclass(frozen=True)
class RunSpec:
    """Everything that describes a run (module docstring)."""

    data: DataSpec = DataSpec()
    task: TaskSpec = TaskSpec()
    model: ModelSpec = ModelSpec()
    optim: OptimSpec = OptimSpec()
    loading: LoadingSpec = LoadingSpec()
    version: int = SPEC_VERSION

    def __post_init__(self):
        check(self)

    # -- paths -------------------------------------------------------------------------------------
    def get(self, path: str):
        """The value at ``path`` (``"optim.lr"``)."""
        value = self
        for name in path.split("."):
            value = getattr(value, name)
        return value

    def override(self, values: dict) -> "RunSpec":
        """A copy with ``{path: value}`` applied (converted and checked like any spec: :func:`typed`)."""
        parts: dict[str, dict] = {}
        for path, value in values.items():
            part, _, name = path.partition(".")
            if part not in _PARTS:
                raise SpecError(path, f"a field of one of the parts {list(_PARTS)}", repr(part))
            parts.setdefault(part, {})[name] = value
        return dataclasses.replace(self, **{p: dataclasses.replace(getattr(self, p), **typed(_PARTS[p], v, p))
                                            for p, v in parts.items()})

    def request(self) -> "RunSpec":
        """The spec without what its data fixed (split indices, fingerprint, classes, derived model settings,
        channels): ``config.yaml``."""
        return self.override({"data.splits": None, "data.fingerprint": None, "task.classes": 0,
                              "model.derived": {}, "model.in_channels": 0, "model.out_channels": 0, "model.params": 0})

    @property
    def resolved(self) -> bool:
        return self.data.splits is not None

    # -- serialisation -----------------------------------------------------------------------------
    def to_dict(self) -> dict:
        """Plain values (YAML, JSON and ``torch.load(weights_only=True)`` read them back); unset resolved parts left out."""
        out: dict = {"version": self.version}
        for part in _PARTS:
            values = {}
            for f in dataclasses.fields(_PARTS[part]):
                value = getattr(getattr(self, part), f.name)
                if f.name in _RESOLVED.get(part, ()) and not value:
                    continue
                values[f.name] = plain(value)
            out[part] = values
        return out

    @classmethod
    def from_dict(cls, state: dict) -> "RunSpec":
        """Inverse of :meth:`to_dict`; unknown keys and another version are one-line errors."""
        if not isinstance(state, dict):
            raise SpecError("spec", f"expected a mapping of parts {list(_PARTS)}, found {type(state).__name__}")
        found = state.get("version")
        if found is None:
            raise SpecError("version", f"expected 'version: {SPEC_VERSION}' and the parts {list(_PARTS)}, found "
                            f"neither (keys {sorted(state)[:6]})")
        if found != SPEC_VERSION:
            raise SpecError("version", f"expected run spec version {SPEC_VERSION}, found {found!r} (a run written "
                            "by another circuitop: train it again)")
        unknown = sorted(set(state) - {"version", *_PARTS})
        if unknown:
            raise SpecError(unknown[0], f"expected parts among {list(_PARTS)}, found {unknown[0]!r}")
        values = {}
        for part, entries in state.items():
            if part == "version":
                continue
            if not isinstance(entries, dict):
                raise SpecError(part, f"expected a mapping of fields, found {entries!r}")
            values.update({f"{part}.{name}": value for name, value in entries.items()})
        return cls().override(values)

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False)


_PARTS = {"data": DataSpec, "task": TaskSpec, "model": ModelSpec, "optim": OptimSpec, "loading": LoadingSpec}
#: fields the data fix when a run starts, left out of the serialised form while unset
_RESOLVED = {"data": ("splits", "fingerprint"), "task": ("classes",),
             "model": ("derived", "in_channels", "out_channels", "params")}


def paths() -> list[str]:
    """Every field path of a spec (``"optim.lr"``, ...)."""
    return [f"{part}.{f.name}" for part, cls in _PARTS.items() for f in dataclasses.fields(cls)]


def choices_of(path: str) -> tuple | None:
    """The allowed values of the field ``path`` (``"optim.optimizer"``), None for a field of any value of its type."""
    part, _, name = path.partition(".")
    return choices(_PARTS[part], name)


def resumed(stored: RunSpec, given: RunSpec) -> RunSpec:
    """``stored`` with the :data:`RESUMABLE` fields of ``given``: the spec a resumed run trains on."""
    return stored.override({p: given.get(p) for p in paths() if p.startswith(RESUMABLE)})


def conflicts(stored: RunSpec, given: RunSpec) -> list[tuple[str, object, object]]:
    """``(path, stored value, given value)`` of every requested field that differs, except :data:`RESUMABLE`;
    a mapping (``model.config``) is compared key by key (``"model.config.width"``)."""
    a, b = stored.request(), given.request()
    found = []
    for p in paths():
        old, new = a.get(p), b.get(p)
        if p.startswith(RESUMABLE) or old == new:
            continue
        if isinstance(old, dict) and isinstance(new, dict):
            found += [(f"{p}.{k}", old.get(k), new.get(k)) for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]
        else:
            found.append((p, old, new))
    return found
