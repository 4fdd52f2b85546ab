"""operators: neural-operator backbones (FNO, U-Net) hosting circuitop cells, training and the CLI.

Top layer: may import ``pde_data``, ``circuitop`` and ``evaluation``. The public names are loaded on
first use, so ``circuitop --help`` does not pay for importing neuraloperator and the cells.

Example:
    >>> model = operators.build("chonn_fno", 1, 1, n_modes=12, width=20, order=2)
    >>> from operators.rollout import rollout      # the submodule's function (not re-exported:
    >>> pred = rollout(model, given, 40)          # ``operators.rollout`` is the module)
"""

from __future__ import annotations

import importlib

__all__ = ["MODELS", "build", "make_config"]


def __getattr__(name: str):
    if name in __all__:  # each from operators.models
        return getattr(importlib.import_module("operators.models"), name)
    raise AttributeError(f"module 'operators' has no attribute {name!r}")
