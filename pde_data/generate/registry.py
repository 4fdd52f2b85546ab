"""One entry point for every benchmark generator: what a set is (:class:`GenerationSpec`) and how any contiguous
range of its samples is made (:func:`make_samples`).

Sample ``i`` of a set depends on ``(seed, i)`` and the parameters alone: the order, Poisson, Darcy and
shallow-water generators seed each sample from ``np.random.default_rng([seed, i])``; Navier–Stokes draws each
initial field from ``(seed, i)`` too, and simulates samples in blocks aligned at multiples of ``batch_size``
by absolute index, since a batched FFT may round differently for other batch compositions (a range that cuts
a block simulates the whole block and keeps its part). So a set made in one piece, in shards of any size, by
any number of workers in any order, is the same bit for bit; :func:`block_size` says how to cut ranges so no
work is repeated.

Example:
    >>> spec = GenerationSpec("darcy", n=100, seed=0, params={"n_grid": 32})
    >>> part = make_samples(spec, range(40, 48))          # samples 40..47 of the set
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Callable, Mapping

import torch
import xarray as xr

from pde_data.core.params import ParameterError, typed
from pde_data.generate.defaults import DEFAULTS, PARAMS, SEEDS
from pde_data.generate.dam_break import generate_dam_break
from pde_data.generate.darcy import generate_darcy
from pde_data.generate.navier_stokes import generate_navier_stokes
from pde_data.generate.order import generate_order_benchmark
from pde_data.generate.poisson import generate_poisson
from pde_data.generate.sequence_sets import generate_degradation

__all__ = ["GenerationSpec", "GENERATORS", "DEFAULTS", "SEEDS", "make_samples", "block_size", "chunk_size",
           "sample_bytes", "DTYPES"]

DTYPES = {"float32": torch.float32, "float64": torch.float64}

#: a progress callback: samples completed so far in the current call (fractions while a block simulates)
Progress = Callable[[float], None]


@dataclass(frozen=True)
class GenerationSpec:
    """A generated set: the generator's ``name``, its size ``n``, its ``seed`` and the generator's other
    parameters (the library's keyword names, e.g. ``{"n_grid": 64}``, converted and checked by the generator's
    :data:`~pde_data.generate.defaults.PARAMS`; defaults filled by :meth:`complete`). Two specs are the same set
    exactly when they are equal."""

    name: str
    n: int
    seed: int
    params: Mapping[str, object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.name not in GENERATORS:
            raise ParameterError("name", f"one of {sorted(GENERATORS)}", repr(self.name))
        if self.n < 1 or self.seed < 0:
            raise ParameterError(("n", "seed"), ">= 1 and >= 0", f"{self.n}, {self.seed}")
        object.__setattr__(self, "params", typed(PARAMS[self.name], self.params, "params"))

    def complete(self) -> "GenerationSpec":
        """This spec with every parameter the generator takes, defaults filled in (what a manifest records)."""
        return dataclasses.replace(self, params={**GENERATORS[self.name].defaults, **self.params})

    def to_json(self) -> dict:
        params = {k: v.to_state() if hasattr(v, "to_state") else v for k, v in self.params.items()}  # Sweep: a dict
        return {"name": self.name, "n": self.n, "seed": self.seed, "params": params}

    @classmethod
    def from_json(cls, data: Mapping) -> "GenerationSpec":
        name = data["name"] if "name" in data else data["kind"]  # the key of manifests written before 2026-11-28
        return cls(str(name), int(data["n"]), int(data["seed"]), dict(data.get("params", {})))

    def differences(self, other: "GenerationSpec") -> list[str]:
        """``["n: 64 here, 128 there", ...]`` for every field or parameter that differs (both completed)."""
        a, b = self.complete(), other.complete()
        mine = {"name": a.name, "n": a.n, "seed": a.seed, **a.params}
        theirs = {"name": b.name, "n": b.n, "seed": b.seed, **b.params}
        return [f"{k}: {mine.get(k)!r} here, {theirs.get(k)!r} there"
                for k in dict.fromkeys([*mine, *theirs]) if mine.get(k) != theirs.get(k)]


@dataclass(frozen=True)
class _Generator:
    """How one generator makes a sample range: ``make(spec_params, n, seed, samples, device, progress)``; its
    parameters' defaults; the block its samples are simulated in (a parameter's name, or 1); the samples per
    written chunk; the bytes of one sample."""

    make: Callable[..., xr.Dataset]
    defaults: Mapping[str, object]
    block: str | None
    chunk: int
    sample_bytes: Callable[[Mapping[str, object]], int]


def _drawn(generate: Callable[..., xr.Dataset]) -> Callable[..., xr.Dataset]:
    """The ``make`` of a generator that draws each sample alone on the CPU: ``generate(n, **params, seed=seed,
    samples=samples)`` (the parameters are its keyword names, :data:`PARAMS`)."""
    return lambda p, n, seed, samples, device, progress: generate(n, **p, seed=seed, samples=samples)


def _timed_progress(samples: range, block: int, t_final: float, progress: Progress | None):
    """The solvers' ``callback(block_start, t)`` as samples done: each block's kept samples times t / t_final."""
    if progress is None:
        return None
    done: dict[int, float] = {}

    def callback(start: int, t: float) -> None:
        kept = max(0, min(samples.stop, start + block) - max(samples.start, start))
        done[start] = kept * min(t / t_final, 1.0)
        progress(sum(done.values()))

    return callback


def _simulated(generate: Callable[..., xr.Dataset]) -> Callable[..., xr.Dataset]:
    """The ``make`` of a generator that simulates blocks of ``batch_size`` samples on ``device`` (Navier–Stokes,
    shallow water): ``generate(len(samples), **params, first_sample=samples.start, ...)``, ``dtype`` as torch's."""

    def make(p, n, seed, samples, device, progress) -> xr.Dataset:
        return generate(len(samples), **{**p, "dtype": DTYPES[p["dtype"]]}, seed=seed, first_sample=samples.start,
                        device=device, callback=_timed_progress(samples, p["batch_size"], p["t_final"], progress))

    return make


def _ns_bytes(p) -> int:
    records = p["n_records"] if p["n_records"] is not None else int(p["t_final"])
    return (records + bool(p["record_initial"])) * p["n_out"] ** 2 * DTYPES[p["dtype"]].itemsize


#: the generators by name (the ``circuitop generate`` problems, but the gapped-digits image set); their
#: parameters' defaults are :data:`DEFAULTS`, the only place they are defined
GENERATORS: dict[str, _Generator] = {
    "order": _Generator(_drawn(generate_order_benchmark), DEFAULTS["order"], None, 1024,
                        lambda p: 2 * p["n_points"] * 8),
    "poisson": _Generator(_drawn(generate_poisson), DEFAULTS["poisson"], None, 128,
                          lambda p: (2 * p["n_grid"] ** 2 + p["K"] ** 2) * 8),
    "darcy": _Generator(_drawn(generate_darcy), DEFAULTS["darcy"], None, 8, lambda p: 2 * p["n_grid"] ** 2 * 8),
    "degradation": _Generator(_drawn(generate_degradation), DEFAULTS["degradation"], None, 4096,
                              lambda p: (4 * p["max_length"] + 4) * 8),
    "ns": _Generator(_simulated(generate_navier_stokes), DEFAULTS["ns"], "batch_size", 0, _ns_bytes),
    "swe": _Generator(_simulated(generate_dam_break), DEFAULTS["swe"], "batch_size", 0,
                 lambda p: (3 if p["momenta"] else 1) * p["n_frames"] * p["n_grid"] ** 2
                 * DTYPES[p["dtype"]].itemsize + 8),
}


def block_size(spec: GenerationSpec) -> int:
    """The samples simulated together (Navier–Stokes and shallow water: ``batch_size``; else 1): ranges cut at
    its multiples repeat no work."""
    generator = GENERATORS[spec.name]
    return int(spec.complete().params[generator.block]) if generator.block else 1


def chunk_size(spec: GenerationSpec) -> int:
    """Samples made (and written) at a time: a block of the simulated generators, else the generator's own."""
    return GENERATORS[spec.name].chunk or block_size(spec)


def sample_bytes(spec: GenerationSpec) -> int:
    """Bytes of one sample's variables as generated (before compression)."""
    return GENERATORS[spec.name].sample_bytes(spec.complete().params)


def make_samples(spec: GenerationSpec, samples: range, *, device: torch.device | str | None = None,
                 progress: Progress | None = None) -> xr.Dataset:
    """Samples ``samples`` (a non-empty step-1 range within ``[0, spec.n)``) of the set ``spec``, on ``device``
    (the torch solvers; the others run on the CPU), with ``progress(samples_done)`` as they complete."""
    if samples.step != 1 or not samples or samples.start < 0 or samples.stop > spec.n:
        raise ParameterError("samples", f"expected a non-empty contiguous range within [0, {spec.n}), found {samples}")
    full = spec.complete()
    ds = GENERATORS[spec.name].make(full.params, spec.n, spec.seed, samples, device, progress)
    if progress is not None:
        progress(len(samples))
    return ds
