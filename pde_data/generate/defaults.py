"""Every generator's parameters, defined once: a frozen dataclass per generator (:data:`PARAMS`) whose fields are
its parameters (the library's keyword names, ``dtype`` by its torch name), their types and their defaults.

The registry :data:`pde_data.generate.registry.GENERATORS` converts and checks given values with them
(:func:`pde_data.core.params.typed`: ``"64"`` from the command line is 64); the ``circuitop generate`` options are
made from the fields (type, default, range, choices: ``operators.cli._generation.add_parameter_options``); the
generator functions' signatures (``pde_data.generate_darcy`` …) take their defaults from :data:`DEFAULTS`, and
``tests/test_generator_defaults.py`` checks that all three agree. The module imports only the core, so the
generator modules, which the registry imports, can import it too.
"""

from __future__ import annotations

import dataclasses
import typing

from pde_data.core.params import defaults, param
from pde_data.core.sweep import Sweep

__all__ = ["PARAMS", "DEFAULTS", "SEEDS"]


def _params(name: str, **fields: tuple) -> type:
    """A frozen dataclass ``name`` of the parameters ``fields`` (``name=(type, default or param(...))``)."""
    return dataclasses.make_dataclass(name, [(k, t, d if isinstance(d, dataclasses.Field) else dataclasses.field(
        default=d)) for k, (t, d) in fields.items()], frozen=True)


def _dtype() -> tuple:
    return str, param("float32", choices=("float32", "float64"))


def _positive(number: type, default) -> tuple:
    """A positive ``number``: an integer (``int``, or ``int | None``: none allowed too) or a number (``float``)."""
    real = float in (typing.get_args(number) or (number,))  # float, or float | Sweep
    return number, param(default, "a positive number" if real else "a positive integer", lambda v: v > 0)


#: each generator's parameters; the gapped digits are a fixed set outside the registry, whose generators make
#: any range of samples
PARAMS: dict[str, type] = {
    "order": _params("OrderParams", order=_positive(int, 1), n_points=_positive(int, 256), tau=_positive(float, 0.08)),
    "poisson": _params("PoissonParams", K=_positive(int, 16), n_grid=_positive(int, 64)),
    "darcy": _params("DarcyParams", n_grid=_positive(int, 128), beta=_positive(float | Sweep, 1.0)),
    "degradation": _params("DegradationParams", min_length=_positive(int, 16), max_length=_positive(int, 32)),
    "ns": _params("NSParams", visc=(float | Sweep, param(1e-3, "a number >= 0", lambda v: v >= 0)), n_sim=_positive(int, 128),
                  n_out=_positive(int, 64), t_final=_positive(float, 20.0), n_records=_positive(int | None, None),
                  record_initial=(bool, False), dt=_positive(float, 1e-3), batch_size=_positive(int, 8),
                  dtype=_dtype()),
    "swe": _params("SWEParams", n_grid=_positive(int, 128), t_final=_positive(float, 1.0),
                   n_frames=_positive(int, 101), momenta=(bool, False), batch_size=_positive(int, 8), dtype=_dtype(),
                   radius=_positive(float | Sweep, Sweep(0.3, 0.7)),
                   height=(float | Sweep, param(2.0, "a depth > 1 (the water outside stands at 1)", lambda v: v > 1))),
    "digits": _params("DigitsParams", gap=(float, 0.0)),  # its range, [0, 1), the generator checks
}
#: ``{generator: {parameter: default}}``, read from :data:`PARAMS`
DEFAULTS: dict[str, dict[str, object]] = {generator: defaults(cls) for generator, cls in PARAMS.items()}

#: each generator's default seed (the order benchmark's is its training split's, 42)
SEEDS: dict[str, int] = {"order": 42, "poisson": 0, "darcy": 0, "degradation": 0, "ns": 0, "swe": 0, "digits": 0}
