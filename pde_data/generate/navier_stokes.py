"""The FNO Navier–Stokes forecasting set as an ``xarray.Dataset`` (CHONN, Eqs. 66–70; FNO ν = 1e−3 data).

GRF initial vorticity (:mod:`pde_data.solvers.grf`) on an ``n_sim``² grid, solved by
:func:`pde_data.solvers.navier_stokes.simulate_navier_stokes`, then downsampled to ``n_out``² by taking every
``n_sim // n_out``-th point (``w[:, ::4, ::4]`` for 256 → 64, as the FNO data; no filtering).
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import torch
import xarray as xr

from pde_data.generate.defaults import DEFAULTS, SEEDS
from pde_data.solvers.grf import gaussian_random_field_2d
from pde_data.core.model import PARAMETER, ROLE, SAMPLE, TIME, X, Y
from pde_data.solvers.navier_stokes import simulate_navier_stokes, steps_per_record
from pde_data.core.params import ParameterError
from pde_data.core.sweep import Sweep, drawn

__all__ = ["generate_navier_stokes"]

_FORCING = "0.1*(sin(2*pi*(x+y)) + cos(2*pi*(x+y)))"
_D = DEFAULTS["ns"]  # the registry's defaults (pde_data.generate.registry.GENERATORS), defined once


def generate_navier_stokes(
    n_samples: int, *, visc: float | Sweep = _D["visc"], n_sim: int = _D["n_sim"], n_out: int = _D["n_out"],
    t_final: float = _D["t_final"], n_records: int | None = _D["n_records"],
    record_initial: bool = _D["record_initial"], dt: float = _D["dt"], seed: int = SEEDS["ns"], first_sample: int = 0,
    batch_size: int = _D["batch_size"], dtype: torch.dtype = getattr(torch, _D["dtype"]),
    device: torch.device | str | None = None, callback: Callable[[int, float], None] | None = None,
) -> xr.Dataset:
    """Generate vorticity trajectories ``vorticity`` (sample, time, x, y) like the FNO benchmark.

    Args:
        n_samples: number of samples; they are samples ``first_sample … first_sample + n_samples − 1``.
        visc, dt: viscosity ν (or a :class:`~pde_data.core.sweep.Sweep` each sample's ν is drawn from, stored as
            the parameter ``visc (sample,)``) and largest time step of the solver.
        n_sim, n_out: simulation and output grid sizes (``n_out`` must divide ``n_sim``). The defaults of
            every parameter are the generator registry's (``pde_data.generate.registry.GENERATORS["ns"]``), as
            ``circuitop generate ns`` has them; the FNO benchmark's own settings are ``n_sim=256, t_final=50, dt=1e-4``
            (this function's defaults before they were defined once).
        t_final: final time; records at ``t_final·k/n_records`` (default ``n_records``: one per time unit).
        record_initial: also store the initial vorticity at t = 0.
        seed: seed of the set (sample i's initial field depends only on ``seed`` and i).
        batch_size: samples simulated together, in chunks aligned at multiples of ``batch_size`` by
            absolute index (whole chunks are simulated, so any shard reproduces the full set's values
            bit for bit: batched FFTs may round differently for different batch compositions).
        dtype, device: of the simulation (default float32 on CPU).
        callback: ``callback(sample_index_of_chunk_start, t)`` after every record (progress bars).

    Returns:
        Dataset with ``vorticity`` (sample, time, x, y), coords ``sample``, ``time``, ``x``, ``y`` (grid
        points i/n_out) and attributes saying how it was made.

    Example:
        >>> ds = generate_navier_stokes(4, n_sim=64, n_out=32, t_final=2.0, n_records=4, dt=1e-3)
    """
    n_records = _default_records(t_final, n_records)
    if n_sim % n_out:
        raise ParameterError("n_out", f"a divisor of {{n_sim={n_sim}}}", str(n_out), ["n_sim"])
    if n_samples < 1 or first_sample < 0 or batch_size < 1:
        raise ParameterError(("n_samples", "first_sample", "batch_size"), ">= 1, >= 0, >= 1",
                             f"{n_samples}, {first_sample}, {batch_size}")
    stride = n_sim // n_out
    wanted = range(first_sample, first_sample + n_samples)
    parts = []
    for start in range(first_sample - first_sample % batch_size, wanted.stop, batch_size):
        w0 = gaussian_random_field_2d(batch_size, n_sim, seed=seed, first_sample=start, dtype=dtype, device=device)
        progress = None if callback is None else (lambda t, s=start: callback(s, t))
        block_visc = torch.from_numpy(drawn(visc, seed, np.arange(start, start + batch_size))) \
            if isinstance(visc, Sweep) else visc
        w = simulate_navier_stokes(w0, visc=block_visc, t_final=t_final, n_records=n_records, dt=dt,
                                   record_initial=record_initial, callback=progress, first_sample=start)
        keep = slice(max(wanted.start - start, 0), min(wanted.stop - start, batch_size))
        parts.append(w[keep, :, ::stride, ::stride].cpu().numpy())
    dt_step = t_final / n_records / steps_per_record(t_final / n_records, dt)
    attrs = dict(visc=str(visc) if isinstance(visc, Sweep) else visc, n_sim=n_sim, t_final=t_final, dt=dt_step, seed=seed, batch_size=batch_size,
                 dtype=str(dtype).removeprefix("torch."))
    ds = _dataset(np.concatenate(parts), wanted, n_records, record_initial, attrs)
    if isinstance(visc, Sweep):
        ds["visc"] = ((SAMPLE,), drawn(visc, seed, np.asarray(wanted)), {"long_name": "viscosity of the sample",
                                                                          ROLE: PARAMETER, "range": str(visc)})
    return ds


def _default_records(t_final: float, n_records: int | None) -> int:
    if n_records is not None:
        return n_records
    if not t_final >= 1.0 or t_final != int(t_final):
        raise ParameterError("n_records", "required unless {t_final} is a whole number >= 1, found "
                             f"{{t_final={t_final}}}", mentions=["t_final"])
    return int(t_final)


def _dataset(values: np.ndarray, samples: range, n_records: int, record_initial: bool, how: dict) -> xr.Dataset:
    n_out = values.shape[-1]
    k = np.arange(0 if record_initial else 1, n_records + 1)
    grid = np.arange(n_out) / n_out
    coords = {
        SAMPLE: (SAMPLE, np.asarray(samples), {"long_name": "sample index"}),
        TIME: (TIME, how["t_final"] * k / n_records, {"long_name": "time", "units": "1"}),
        X: (X, grid, {"long_name": "x", "units": "1", "grid": "points x_i = i/n on the periodic [0, 1)"}),
        Y: (Y, grid, {"long_name": "y", "units": "1", "grid": "points y_j = j/n on the periodic [0, 1)"}),
    }
    vorticity = ((SAMPLE, TIME, X, Y), values, {"long_name": "vorticity", "units": "1"})
    attrs = {
        "title": "2D incompressible Navier-Stokes, vorticity form (FNO benchmark)",
        "source": "pde_data.generate_navier_stokes: pseudo-spectral, Crank-Nicolson + Adams-Bashforth 2, "
                  "2/3-rule dealiasing (CHONN Eqs. 66-70)",
        "viscosity": how["visc"], "forcing": _FORCING, "seed": how["seed"], "dt": how["dt"],
        "t_final": how["t_final"], "n_sim": how["n_sim"], "n_out": n_out, "batch_size": how["batch_size"],
        "simulation_dtype": how["dtype"], "initial_condition": "GRF alpha=2.5 tau=7 (FNO GaussianRF)",
        "downsampling": f"every {how['n_sim'] // n_out}th point, w[:, ::s, ::s], as the FNO data",
    }
    return xr.Dataset({"vorticity": vorticity}, coords=coords, attrs=attrs)
