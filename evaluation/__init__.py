"""evaluation: physics metrics, rollout evaluation and plots.

Depends on ``pde_data`` and ``circuitop`` only; never on ``operators``.
"""

from evaluation.metrics import max_mse, nrmse_range, rel_l1, rel_l2, rel_l2_derivative, rel_l2_spectral

__all__: list[str] = []
__all__ += ["rel_l2", "rel_l2_spectral", "rel_l2_derivative", "rel_l1", "nrmse_range", "max_mse"]
