"""operators: neural-operator backbones (FNO, U-Net) hosting circuitop cells, training and the CLI.

Top layer: may import ``pde_data``, ``circuitop`` and ``evaluation``.
"""

__all__: list[str] = []
