"""The main job on embedded defaults (``make demo``).

Until the full demo lands (issue 10: Navier-Stokes data -> FNO vs CHONN -> rollout report), this runs
the end-to-end path that exists: build a small field data set in the data model, write it to
NetCDF-4 atomically, read it back, check it is identical, and convert it to the torch layout.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
import xarray as xr

import pde_data
from operators.cli.info import environment


def _dataset(n: int, nx: int, seed: int) -> xr.Dataset:
    rng = np.random.default_rng(seed)
    x = (np.arange(nx) + 0.5) / nx
    field = np.sin(2 * np.pi * x)[None, :, None] * np.cos(2 * np.pi * x)[None, None, :]
    data = field * rng.uniform(0.5, 1.5, (n, 1, 1))
    return xr.Dataset(
        {"u": (("sample", "x", "y"), data, {"long_name": "scaled sin(2 pi x) cos(2 pi y)"})},
        coords={"x": ("x", x, {"grid": "cell centres"}), "y": ("y", x, {"grid": "cell centres"})},
        attrs={"seed": seed},
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=None, help="output folder (default: a temporary one)")
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="circuitop-demo-"))
    env = environment()
    print(f"circuitop {env['circuitop']} on {env['device']}, torch {env['torch']}, {env['torch threads']} threads")
    ds = _dataset(n=8, nx=32, seed=0)
    path = pde_data.save(ds, out / "demo.nc")
    back = pde_data.open(path).load()
    xr.testing.assert_identical(back, ds)
    tensor = pde_data.to_tensor(back)
    print(f"wrote {path} ({path.stat().st_size} bytes); read back identical; torch layout {tuple(tensor.shape)}")


if __name__ == "__main__":
    main()
