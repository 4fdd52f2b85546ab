"""The PDEBench radial dam-break set (``2D_rdb_NA_NA.h5``) as an ``xarray.Dataset`` (CHONN, Eqs. 62–65).

Domain [−2.5, 2.5]², 128² cells, g = 1, flat bottom, outflow boundaries; h = 2 inside a radius
r ~ U(0.3, 0.7) drawn per sample (Eq. 65), 1 outside, at rest; T = 1 with 101 frames at
linspace(0, 1, 101), frame 0 the initial state (as PDEBench). Solved by
:func:`pde_data.solvers.shallow_water.simulate_shallow_water` (ours: MUSCL–MC + HLL + SSP-RK2; PDEBench used
PyClaw's Roe solver with dimensional splitting). Write it in PDEBench's layout with
``pde_data.write_pdebench(ds, path, layout="rdb", variables=["h"])``: ``dam_radius`` goes into each
group's ``config``.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import torch
import xarray as xr

from pde_data.generate.defaults import DEFAULTS, SEEDS
from pde_data.core.model import SAMPLE, TIME, X, Y
from pde_data.solvers.shallow_water import cell_centres, simulate_shallow_water
from pde_data.core.params import ParameterError

__all__ = ["dam_radii", "radial_dam_break", "generate_dam_break"]

LENGTH = 5.0
_D = DEFAULTS["swe"]  # the registry's defaults (pde_data.generate.registry.GENERATORS), defined once


def dam_radii(samples: range, *, seed: int = 0, low: float = 0.3, high: float = 0.7) -> np.ndarray:
    """Dam radius r ~ U(low, high) of each sample index, from its own stream ``(seed, index)``."""
    return np.array([np.random.default_rng([seed, i]).uniform(low, high) for i in samples])


def radial_dam_break(radii, n: int, *, length: float = LENGTH, dtype=torch.float64, device=None) -> torch.Tensor:
    """Initial depth (batch, n, n): 2 where √(x² + y²) < r, else 1, at the cell centres (CHONN Eq. 65)."""
    x = cell_centres(n, length)
    r2 = (x[:, None] ** 2 + x[None, :] ** 2)[None]
    radii = torch.as_tensor(np.asarray(radii, dtype=np.float64))[:, None, None]
    return torch.where(r2 < radii**2, 2.0, 1.0).to(dtype=dtype, device=device)


def generate_dam_break(
    n_samples: int,
    *,
    n_grid: int = _D["n_grid"],
    seed: int = SEEDS["swe"],
    first_sample: int = 0,
    t_final: float = _D["t_final"],
    n_frames: int = _D["n_frames"],
    momenta: bool = _D["momenta"],
    batch_size: int = _D["batch_size"],
    dtype: torch.dtype = getattr(torch, _D["dtype"]),
    device: torch.device | str | None = None,
    callback: Callable[[int, float], None] | None = None,
) -> xr.Dataset:
    """Generate radial dam breaks: ``h`` (sample, time, x, y) (+ ``hu``, ``hv``) and ``dam_radius`` (sample,).

    Args:
        n_samples: number of samples, indices ``first_sample …`` (sample i depends only on seed and i).
        n_grid: cells per side on [−2.5, 2.5]².
        t_final, n_frames: final time and number of frames including t = 0.
        momenta: also store ``hu`` and ``hv``.
        batch_size: samples simulated together (each takes its own time steps, so batching does not
            change results).
        dtype, device: of the simulation (default float32 on CPU; PDEBench stores float32).
        callback: ``callback(first_index_of_batch, t)`` after every frame (progress bars).

    Example:
        >>> ds = generate_dam_break(2, n_grid=32, n_frames=11)   # h: (2, 11, 32, 32)
    """
    if n_samples < 1 or first_sample < 0 or batch_size < 1:
        raise ParameterError(("n_samples", "first_sample", "batch_size"), ">= 1, >= 0, >= 1",
                             f"{n_samples}, {first_sample}, {batch_size}")
    samples = range(first_sample, first_sample + n_samples)
    radii = dam_radii(samples, seed=seed)
    parts = []
    for start in range(0, n_samples, batch_size):
        h0 = radial_dam_break(radii[start:start + batch_size], n_grid, dtype=dtype, device=device)
        progress = None if callback is None else (lambda t, s=samples[start]: callback(s, t))
        frames = simulate_shallow_water(h0, None, None, length=LENGTH, t_final=t_final, n_frames=n_frames,
                                        store_momenta=momenta, callback=progress)
        parts.append([f.cpu().numpy() for f in frames if f is not None])
    values = [np.concatenate(v) for v in zip(*parts)]
    return _dataset(values, samples, radii, n_grid, t_final, n_frames, seed)


def _dataset(values, samples, radii, n, t_final, n_frames, seed) -> xr.Dataset:
    x = cell_centres(n, LENGTH).numpy()
    grid = "cell centres -2.5 + (i + 0.5) * 5 / n"
    coords = {
        SAMPLE: (SAMPLE, np.asarray(samples), {"long_name": "sample index"}),
        TIME: (TIME, np.linspace(0.0, t_final, n_frames), {"long_name": "time", "units": "1"}),
        X: (X, x, {"long_name": "x", "units": "1", "grid": grid}),
        Y: (Y, x, {"long_name": "y", "units": "1", "grid": grid}),
    }
    names = {"h": "water depth", "hu": "x momentum h*u", "hv": "y momentum h*v"}
    data = {name: ((SAMPLE, TIME, X, Y), v, {"long_name": names[name], "units": "1"})
            for name, v in zip(names, values)}
    data["dam_radius"] = (SAMPLE, radii, {"long_name": "radius of the initial water column", "units": "1"})
    attrs = {
        "title": "2D shallow water, radial dam break (PDEBench 2D_rdb_NA_NA)",
        "source": "pde_data.generate_dam_break: finite volume, MUSCL (MC limiter) + HLL + SSP-RK2, "
                  "outflow boundaries (CHONN Eqs. 62-65)",
        "g": 1.0, "seed": seed, "domain": "[-2.5, 2.5]^2", "h_inside": 2.0, "h_outside": 1.0,
        "dam_radius_distribution": "U(0.3, 0.7) per sample", "frame_0": "initial state",
    }
    return xr.Dataset(data, coords=coords, attrs=attrs)
