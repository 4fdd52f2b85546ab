"""Every generator's defaults agree in its three descriptions: the registry (``pde_data.generate.registry``), the
library function's signature and the ``circuitop generate`` options (issue 42)."""

from __future__ import annotations

import inspect

import pytest
import torch

import pde_data
from operators.cli import build_parser
from pde_data.generate.registry import DEFAULTS, GENERATORS, SEEDS
from pde_data.generate.order import order_inputs, transfer

#: the functions that take each generator's parameters (the first makes its sets; the others share parameters)
FUNCTIONS = {
    "order": [pde_data.generate_order_benchmark, pde_data.generate_order_splits, order_inputs, transfer],
    "poisson": [pde_data.generate_poisson],
    "darcy": [pde_data.generate_darcy],
    "degradation": [pde_data.generate_degradation],
    "ns": [pde_data.generate_navier_stokes],
    "swe": [pde_data.generate_dam_break],
    "digits": [pde_data.generate_gapped_digits],
}

#: the options named otherwise than the library's parameters
OPTION_DEST = {"n_records": "records", "n_frames": "frames"}


def _registry(generator: str) -> dict[str, object]:
    return {**DEFAULTS[generator], "seed": SEEDS[generator]}


def _cli(generator: str) -> dict[str, object]:
    """The defaults ``circuitop generate KIND --help`` shows: the parsed options given only ``--out``."""
    args = vars(build_parser().parse_args(["generate", generator, "--out", "unused.nc"]))
    return {name: args[OPTION_DEST.get(name, name)] for name in _registry(generator) if OPTION_DEST.get(name, name) in args}


def _signature(function) -> dict[str, object]:
    """The parameters ``function`` defaults, dtypes by their torch name."""
    found = {}
    for name, parameter in inspect.signature(function).parameters.items():
        if parameter.default is not inspect.Parameter.empty:
            default = parameter.default
            found[name] = str(default).removeprefix("torch.") if isinstance(default, torch.dtype) else default
    return found


def _typed(values: dict[str, object]) -> dict[str, tuple[str, object]]:
    """Values with their types, so that ``20`` and ``20.0`` disagree."""
    return {name: (type(value).__name__, value) for name, value in values.items()}


def test_every_generator_is_checked():
    assert set(FUNCTIONS) == set(DEFAULTS) == set(SEEDS) == {*GENERATORS, "digits"}
    assert all(GENERATORS[generator].defaults is DEFAULTS[generator] for generator in GENERATORS)


@pytest.mark.parametrize("generator", sorted(FUNCTIONS))
def test_cli_defaults_are_the_registry_s(generator):
    registry = _registry(generator)
    cli = _cli(generator)
    assert set(cli) == set(registry), f"{generator}: options for {sorted(cli)}, registry parameters {sorted(registry)}"
    assert _typed(cli) == _typed(registry)


@pytest.mark.parametrize("generator", sorted(FUNCTIONS))
def test_function_defaults_are_the_registry_s(generator):
    registry = _registry(generator)
    main, *others = FUNCTIONS[generator]
    takes = set(inspect.signature(main).parameters)
    assert set(registry) <= takes, f"{main.__name__} lacks {sorted(set(registry) - takes)}"
    for function in FUNCTIONS[generator]:
        defaults = _signature(function)
        shared = set(defaults) & set(registry)
        assert _typed({n: defaults[n] for n in shared}) == _typed({n: registry[n] for n in shared}), function.__name__
