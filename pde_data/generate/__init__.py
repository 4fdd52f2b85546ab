"""Generated sets: the generators' registry and defaults, each benchmark's generator and sharding on Dask.
Imports ``pde_data.core``, ``pde_data.solvers`` and ``pde_data.formats``."""
