"""evaluation: physics metrics, rollout evaluation and plots.

Depends on ``pde_data`` and ``circuitop`` only; never on ``operators``.
Plots live in ``evaluation.plots``, imported on demand (it is the one module that loads matplotlib).
"""

from evaluation._inputs import finite_checks
from evaluation.metrics import max_mse, nrmse_range, rel_h1, rel_l1, rel_l2, rel_l2_derivative, rel_l2_spectral
from evaluation.localized import boundary_rmse, frequency_band_errors
from evaluation.pdebench import PDEBENCH_KEYS, PDEBenchAccumulator, pdebench_metrics
from evaluation.phm import phm_score
from evaluation.rollout import rollout_errors
from evaluation.summary import summarize
from evaluation.accumulate import MetricAccumulator
from evaluation.gapped import GAP_LEVELS, apply_gap, gap_mask, gapped_evaluation
from evaluation.classification import cross_entropy, top_k_accuracy
from evaluation.well import binned_spectral_mse, linf, nmse_well, nrmse_well, pearson, vmse, vrmse

__all__ = ["rel_l2", "rel_l2_spectral", "rel_l2_derivative", "rel_h1", "rel_l1", "nrmse_range", "max_mse",
           "pdebench_metrics", "PDEBenchAccumulator", "PDEBENCH_KEYS", "frequency_band_errors", "boundary_rmse",
           "phm_score", "rollout_errors", "summarize", "MetricAccumulator",
           "gap_mask", "apply_gap", "gapped_evaluation", "GAP_LEVELS",
           "vrmse", "vmse", "nmse_well", "nrmse_well", "linf", "pearson", "binned_spectral_mse",
           "top_k_accuracy", "cross_entropy", "finite_checks"]
