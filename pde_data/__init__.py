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
#: the public names each module defines
_NAMES = {
    "pde_data.core.io": "atomic_path check_output save",
    "pde_data.core.model": "from_tensor time_steps to_tensor LENGTH ROLE TARGET PARAMETER parameters_of parameter_table "
                           "padded_time valid_mask",
    "pde_data.solvers.grf": "gaussian_random_field_2d",
    "pde_data.solvers.navier_stokes": "simulate_navier_stokes",
    "pde_data.generate.navier_stokes": "generate_navier_stokes",
    "pde_data.solvers.shallow_water": "simulate_shallow_water",
    "pde_data.generate.dam_break": "generate_dam_break",
    "pde_data.formats.pdebench_write": "write_pdebench",
    "pde_data.formats.source": "Source open_source",
    "pde_data.datasets.fields": "PairDataset SampleDataset WindowDataset item_bytes split_indices default_sizes",
    "pde_data.datasets.labels": "LabelDataset is_label n_classes read_labels",
    "pde_data.datasets.batch": "Batch",
    "pde_data.generate.sequence_sets": "generate_degradation generate_gapped_digits",
    "pde_data.datasets.sequences": "SequenceDataset fit_sequence_normalizer is_step target_form",
    "pde_data.core.errors": "DataReadError",
    "pde_data.datasets.normalize": "Normalizer fit_normalizer normalizer_from_stats",
    "pde_data.core.fingerprint": "Fingerprint fingerprint",
    "pde_data.formats.prediction_writer": "PredictionWriter",
    "pde_data.formats.well": "write_well",
    "pde_data.generate.order": "generate_order_benchmark generate_order_splits",
    "pde_data.generate.poisson": "generate_poisson",
    "pde_data.solvers.poisson": "solve_poisson",
    "pde_data.generate.darcy": "generate_darcy",
    "pde_data.solvers.darcy": "solve_darcy",
    "pde_data.core.allocator": "retain_freed_memory",
    "pde_data.generate.registry": "GenerationSpec make_samples",
    "pde_data.formats.manifest": "Manifest read_manifest",
    "pde_data.generate.sharded": "generate_sharded write_samples",
    "pde_data.generate.sharded_zarr": "generate_zarr_sharded",
    "pde_data.formats.verification": "verify_set",
}
#: public name → the module that defines it
_WHERE = {name: module for module, names in _NAMES.items() for name in names.split()}

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
