"""pde_data: the xarray data model, PDE generators and solvers, and file I/O (NetCDF, PDEBench).

Lowest layer: imports nothing from ``circuitop``, ``evaluation`` or ``operators``.
"""

from pde_data import model
from pde_data.io import atomic_path, check_output, save
from pde_data.model import from_tensor, time_steps, to_tensor
from pde_data.grf import gaussian_random_field_2d
from pde_data.navier_stokes import simulate_navier_stokes
from pde_data.navier_stokes_data import generate_navier_stokes
from pde_data.shallow_water import simulate_shallow_water
from pde_data.dam_break import generate_dam_break
from pde_data.pdebench_read import open_pdebench
from pde_data.pdebench_write import write_pdebench
from pde_data.source import Source, open_data, open_source
from pde_data.datasets import PairDataset, SampleDataset, WindowDataset, item_bytes, split_indices
from pde_data.labels import LabelDataset, is_label, n_classes, read_labels
from pde_data.model import LENGTH, ROLE, TARGET, padded_time, valid_mask
from pde_data.sequence_sets import generate_degradation, generate_gapped_digits
from pde_data.sequences import SequenceDataset, fit_sequence_normalizer, is_step, target_kind
from pde_data.reading import DataReadError
from pde_data.normalize import Normalizer, fit_normalizer, normalizer_from_stats
from pde_data.fingerprint import Fingerprint, fingerprint
from pde_data.prediction_writer import PredictionWriter
from pde_data.well_format import open_well, write_well
from pde_data.order_benchmark import generate_order_benchmark, generate_order_splits
from pde_data.poisson import generate_poisson, generate_poisson_splits, solve_poisson
from pde_data.darcy import generate_darcy, solve_darcy
from pde_data._allocator import retain_freed_memory
from pde_data.generators import GenerationSpec, make_samples
from pde_data.manifest import Manifest, read_manifest, verify_manifest
from pde_data.sharded import generate_sharded, write_samples
from pde_data.verification import verify_set

__all__ = [
    "model",
    "save", "atomic_path", "check_output",
    "GenerationSpec", "make_samples", "generate_sharded", "write_samples", "Manifest", "read_manifest",
    "verify_manifest", "verify_set",
    "to_tensor", "from_tensor", "time_steps",
    "open_pdebench", "write_pdebench", "open_data", "open_source", "Source",
    "gaussian_random_field_2d", "simulate_navier_stokes", "generate_navier_stokes",
    "simulate_shallow_water", "generate_dam_break",
    "PairDataset", "WindowDataset", "SampleDataset", "split_indices", "item_bytes", "DataReadError", "Normalizer", "fit_normalizer", "normalizer_from_stats",
    "Fingerprint", "fingerprint", "PredictionWriter",
    "generate_order_benchmark", "generate_order_splits",
    "generate_poisson", "generate_poisson_splits", "solve_poisson",
    "generate_darcy", "solve_darcy", "retain_freed_memory", "open_well", "write_well",
    "LabelDataset", "is_label", "n_classes", "read_labels",
    "LENGTH", "ROLE", "TARGET", "valid_mask", "padded_time", "generate_degradation", "generate_gapped_digits",
    "SequenceDataset", "fit_sequence_normalizer", "is_step", "target_kind",
]
