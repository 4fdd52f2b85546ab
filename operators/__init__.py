"""operators: neural-operator backbones (FNO, U-Net) hosting circuitop cells, training and the CLI.

Top layer: may import ``pde_data``, ``circuitop`` and ``evaluation``.
"""

from operators.models import MODELS, build, make_config, model_spec, rebuild

__all__ = ["MODELS", "build", "make_config", "model_spec", "rebuild"]
