"""The PDEBench radial dam-break set (``2D_rdb_NA_NA.h5``) as an ``xarray.Dataset`` (CHONN, Eqs. 62–65).

Domain [−2.5, 2.5]², 128² cells, g = 1, flat bottom, outflow boundaries; h = 2 inside a radius
r ~ U(0.3, 0.7) drawn per sample (Eq. 65), 1 outside, at rest; T = 1 with 101 frames at
linspace(0, 1, 101), frame 0 the initial state (as PDEBench). Both are parameters of the set (issue 44): the
radius a range (:class:`~pde_data.core.sweep.Sweep`, drawn from the sample's own stream ``[seed, i]``, its only
draw, as it always was) or one value, the height inside one value or a range (drawn from ``[seed, i, 1]``);
each sample's are stored as the parameters ``dam_radius`` and (when swept) ``dam_height``. Solved by
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
from pde_data.core.model import PARAMETER, ROLE, SAMPLE, TIME, X, Y
from pde_data.core.params import ParameterError
from pde_data.core.sweep import Sweep, drawn
from pde_data.solvers.shallow_water import cell_centres, simulate_shallow_water

__all__ = ["radial_dam_break", "generate_dam_break"]

LENGTH = 5.0
_D = DEFAULTS["swe"]  # the registry's defaults (pde_data.generate.registry.GENERATORS), defined once


def _radii(radius: float | Sweep, samples: range, seed: int) -> np.ndarray:
    """Each sample's dam radius: ``radius``, or its draw from the sample's own stream ``[seed, i]``."""
    if not isinstance(radius, Sweep):
        return np.full(len(samples), float(radius))
    return np.array([radius.draw(np.random.default_rng([seed, i])) for i in samples])


def radial_dam_break(radii, n: int, *, heights=2.0, length: float = LENGTH, dtype=torch.float64,
                     device=None) -> torch.Tensor:
    """Initial depth (batch, n, n): ``heights`` (2, or one per sample) where √(x² + y²) < r, else 1, at the cell
    centres (CHONN Eq. 65)."""
    x = cell_centres(n, length)
    r2 = (x[:, None] ** 2 + x[None, :] ** 2)[None]
    radii = torch.as_tensor(np.asarray(radii, dtype=np.float64))[:, None, None]
    inside = torch.as_tensor(np.asarray(heights, dtype=np.float64)).reshape(-1, 1, 1)
    return torch.where(r2 < radii**2, inside, 1.0).to(dtype=dtype, device=device)


def generate_dam_break(
    n_samples: int, *, n_grid: int = _D["n_grid"], seed: int = SEEDS["swe"], first_sample: int = 0,
    t_final: float = _D["t_final"], n_frames: int = _D["n_frames"], momenta: bool = _D["momenta"],
    batch_size: int = _D["batch_size"], dtype: torch.dtype = getattr(torch, _D["dtype"]),
    radius: float | Sweep = _D["radius"], height: float | Sweep = _D["height"],
    device: torch.device | str | None = None, callback: Callable[[int, float], None] | None = None,
) -> xr.Dataset:
    """Generate radial dam breaks: ``h`` (sample, time, x, y) (+ ``hu``, ``hv``) and the parameters ``dam_radius``
    (sample,) (and ``dam_height`` when swept).

    Args:
        n_samples: number of samples, indices ``first_sample …`` (sample i depends only on seed and i).
        n_grid: cells per side on [−2.5, 2.5]².
        t_final, n_frames: final time and number of frames including t = 0.
        momenta: also store ``hu`` and ``hv``.
        batch_size: samples simulated together (each takes its own time steps, so batching does not
            change results).
        dtype, device: of the simulation (default float32 on CPU; PDEBench stores float32).
        radius, height: the dam's radius and the depth inside it, each one value or a range (module docstring).
        callback: ``callback(first_index_of_batch, t)`` after every frame (progress bars).

    Example:
        >>> ds = generate_dam_break(2, n_grid=32, n_frames=11)   # h: (2, 11, 32, 32)
    """
    if n_samples < 1 or first_sample < 0 or batch_size < 1:
        raise ParameterError(("n_samples", "first_sample", "batch_size"), ">= 1, >= 0, >= 1",
                             f"{n_samples}, {first_sample}, {batch_size}")
    samples = range(first_sample, first_sample + n_samples)
    radii, heights = _radii(radius, samples, seed), drawn(height, seed, np.asarray(samples))
    parts = []
    for start in range(0, n_samples, batch_size):
        h0 = radial_dam_break(radii[start:start + batch_size], n_grid, heights=heights[start:start + batch_size],
                              dtype=dtype, device=device)
        progress = None if callback is None else (lambda t, s=samples[start]: callback(s, t))
        frames = simulate_shallow_water(h0, None, None, length=LENGTH, t_final=t_final, n_frames=n_frames,
                                        store_momenta=momenta, callback=progress)
        parts.append([f.cpu().numpy() for f in frames if f is not None])
    values = [np.concatenate(v) for v in zip(*parts)]
    ds = _dataset(values, samples, radii, n_grid, t_final, n_frames, seed)
    ds.attrs.update(dam_radius_distribution=f"U({radius.low}, {radius.high}) per sample" if isinstance(
        radius, Sweep) and not radius.log else str(radius), h_inside=str(height) if isinstance(height, Sweep) else height)
    if isinstance(height, Sweep):
        ds["dam_height"] = (SAMPLE, heights, {"long_name": "depth inside the dam", "units": "1", ROLE: PARAMETER})
    return ds


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
    data["dam_radius"] = (SAMPLE, radii, {"long_name": "radius of the initial water column", "units": "1",
                                          ROLE: PARAMETER})
    attrs = {
        "title": "2D shallow water, radial dam break (PDEBench 2D_rdb_NA_NA)",
        "source": "pde_data.generate_dam_break: finite volume, MUSCL (MC limiter) + HLL + SSP-RK2, "
                  "outflow boundaries (CHONN Eqs. 62-65)",
        "g": 1.0, "seed": seed, "domain": "[-2.5, 2.5]^2", "h_outside": 1.0, "frame_0": "initial state",
    }
    return xr.Dataset(data, coords=coords, attrs=attrs)
