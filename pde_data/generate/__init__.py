"""Generated sets: the generators' registry and defaults, each benchmark's generator, sharding on Dask and the
manifest's writing side. Imports ``pde_data.core``, ``pde_data.solvers`` and ``pde_data.formats``."""
