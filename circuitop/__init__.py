"""circuitop: continuous-time neural cells (KNC/CKB, NAC, LTC, CfC, PDNA) as torch modules.

Depends only on ``pde_data`` (for the xarray adapter); never on ``evaluation`` or ``operators``.
"""

__all__: list[str] = []
