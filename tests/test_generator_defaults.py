"""Every generator's defaults agree in its three descriptions: the registry (``pde_data.generate.registry``), the
library function's signature and the ``circuitop generate`` options (issue 42)."""

from __future__ import annotations

import inspect

import pytest
import torch

import pde_data
from operators.cli import build_parser
from pde_data.generate.registry import DEFAULTS, KINDS, SEEDS
from pde_data.generate.order import order_inputs, transfer

#: the functions that take each generator's parameters (the first makes its sets; the others share parameters)
FUNCTIONS = {
    "order": [pde_data.generate_order_benchmark, pde_data.generate_order_splits, order_inputs, transfer],
    "poisson": [pde_data.generate_poisson, pde_data.generate_poisson_splits],
    "darcy": [pde_data.generate_darcy],
    "degradation": [pde_data.generate_degradation],
    "ns": [pde_data.generate_navier_stokes],
    "swe": [pde_data.generate_dam_break],
    "digits": [pde_data.generate_gapped_digits],
}

#: the options named otherwise than the library's parameters
OPTION_DEST = {"n_records": "records", "n_frames": "frames"}


def _registry(kind: str) -> dict[str, object]:
    return {**DEFAULTS[kind], "seed": SEEDS[kind]}


def _cli(kind: str) -> dict[str, object]:
    """The defaults ``circuitop generate KIND --help`` shows: the parsed options given only ``--out``."""
    args = vars(build_parser().parse_args(["generate", kind, "--out", "unused.nc"]))
    return {name: args[OPTION_DEST.get(name, name)] for name in _registry(kind) if OPTION_DEST.get(name, name) in args}


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
    assert set(FUNCTIONS) == set(DEFAULTS) == set(SEEDS) == {*KINDS, "digits"}
    assert all(KINDS[kind].defaults is DEFAULTS[kind] for kind in KINDS)


@pytest.mark.parametrize("kind", sorted(FUNCTIONS))
def test_cli_defaults_are_the_registry_s(kind):
    registry = _registry(kind)
    cli = _cli(kind)
    assert set(cli) == set(registry), f"{kind}: options for {sorted(cli)}, registry parameters {sorted(registry)}"
    assert _typed(cli) == _typed(registry)


@pytest.mark.parametrize("kind", sorted(FUNCTIONS))
def test_function_defaults_are_the_registry_s(kind):
    registry = _registry(kind)
    main, *others = FUNCTIONS[kind]
    takes = set(inspect.signature(main).parameters)
    assert set(registry) <= takes, f"{main.__name__} lacks {sorted(set(registry) - takes)}"
    for function in FUNCTIONS[kind]:
        defaults = _signature(function)
        shared = set(defaults) & set(registry)
        assert _typed({n: defaults[n] for n in shared}) == _typed({n: registry[n] for n in shared}), function.__name__
