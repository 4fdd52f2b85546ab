"""evaluation: physics metrics, rollout evaluation and plots.

Depends on ``pde_data`` and ``circuitop`` only; never on ``operators``.
"""

__all__: list[str] = []
