"""The PDE solvers on arrays and tensors (numpy, torch, scipy; no xarray): Gaussian random fields, Poisson,
Darcy, Navier–Stokes and shallow water. Imports only ``pde_data.core``."""
