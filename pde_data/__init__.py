"""pde_data: the xarray data model, PDE solvers and generators, file formats and datasets, in layers.

``core`` (data model, atomic I/O, fingerprints, moments, errors, native builds) ← ``solvers`` (arrays only) and
``formats`` (the one opener, :func:`open_source`) ← ``generate`` (the sets) and ``datasets`` (torch datasets);
``tests/test_architecture.py`` enforces the direction. Lowest package: imports nothing from ``circuitop``,
``evaluation`` or ``operators``.

The names below load their layer on first use (PEP 562), so ``import pde_data.core`` (what the cells import)
loads no solver, format or dataset module.
"""

from __future__ import annotations

import importlib

#: public submodules
_MODULES = {"model": "pde_data.core.model"}
#: public name → the module that defines it
_WHERE = {
    **dict.fromkeys(["atomic_path", "check_output", "save"], "pde_data.core.io"),
    **dict.fromkeys([
        "from_tensor", "time_steps", "to_tensor", "LENGTH", "ROLE", "TARGET", "padded_time", "valid_mask"
    ], "pde_data.core.model"),
    **dict.fromkeys(["gaussian_random_field_2d"], "pde_data.solvers.grf"),
    **dict.fromkeys(["simulate_navier_stokes"], "pde_data.solvers.navier_stokes"),
    **dict.fromkeys(["generate_navier_stokes"], "pde_data.generate.navier_stokes"),
    **dict.fromkeys(["simulate_shallow_water"], "pde_data.solvers.shallow_water"),
    **dict.fromkeys(["generate_dam_break"], "pde_data.generate.dam_break"),
    **dict.fromkeys(["write_pdebench"], "pde_data.formats.pdebench_write"),
    **dict.fromkeys(["Source", "open_source"], "pde_data.formats.source"),
    **dict.fromkeys([
        "PairDataset", "SampleDataset", "WindowDataset", "item_bytes", "split_indices", "default_sizes"
    ], "pde_data.datasets.fields"),
    **dict.fromkeys(["LabelDataset", "is_label", "n_classes", "read_labels"], "pde_data.datasets.labels"),
    **dict.fromkeys(["Batch"], "pde_data.datasets.batch"),
    **dict.fromkeys(["generate_degradation", "generate_gapped_digits"], "pde_data.generate.sequence_sets"),
    **dict.fromkeys([
        "SequenceDataset", "fit_sequence_normalizer", "is_step", "target_form"
    ], "pde_data.datasets.sequences"),
    **dict.fromkeys(["DataReadError"], "pde_data.core.errors"),
    **dict.fromkeys(["Normalizer", "fit_normalizer", "normalizer_from_stats"], "pde_data.datasets.normalize"),
    **dict.fromkeys(["Fingerprint", "fingerprint"], "pde_data.core.fingerprint"),
    **dict.fromkeys(["PredictionWriter"], "pde_data.formats.prediction_writer"),
    **dict.fromkeys(["write_well"], "pde_data.formats.well"),
    **dict.fromkeys(["generate_order_benchmark", "generate_order_splits"], "pde_data.generate.order"),
    **dict.fromkeys(["generate_poisson", "generate_poisson_splits"], "pde_data.generate.poisson"),
    **dict.fromkeys(["solve_poisson"], "pde_data.solvers.poisson"),
    **dict.fromkeys(["generate_darcy"], "pde_data.generate.darcy"),
    **dict.fromkeys(["solve_darcy"], "pde_data.solvers.darcy"),
    **dict.fromkeys(["retain_freed_memory"], "pde_data.core.allocator"),
    **dict.fromkeys(["GenerationSpec", "make_samples"], "pde_data.generate.registry"),
    **dict.fromkeys(["Manifest", "read_manifest"], "pde_data.formats.manifest"),
    **dict.fromkeys(["generate_sharded", "write_samples"], "pde_data.generate.sharded"),
    **dict.fromkeys(["verify_set"], "pde_data.formats.verification"),
}

__all__ = [*_MODULES, *_WHERE]


def __getattr__(name: str):
    if name in _MODULES:
        value = importlib.import_module(_MODULES[name])
    elif name in _WHERE:
        value = getattr(importlib.import_module(_WHERE[name]), name)
    else:
        raise AttributeError(f"module 'pde_data' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
