"""Other resolutions: fields resampled by cell averages or by their spectrum (known answers), and ``evaluate --run
R --resolutions`` scoring a run trained at 16² on a finer file's samples at each grid, one table and plot."""

from __future__ import annotations

import json

import numpy as np
import pytest
import xarray as xr

import pde_data
from cli_run import run_cli
from pde_data.core.resample import method_of, resample
from test_evaluations import TINY


def test_cell_averages_and_the_spectrum_give_known_answers():
    x = np.arange(4) / 4
    ds = xr.Dataset({"u": (("sample", "x", "y"), np.arange(16.0).reshape(1, 4, 4))}, coords={"x": x, "y": x})
    coarse = resample(ds, {"x": 2, "y": 2})
    assert coarse["u"].values[0].tolist() == [[2.5, 4.5], [10.5, 12.5]] and coarse["x"].values.tolist() == [0.125, 0.625]
    grid = np.arange(12) / 12
    wave = xr.Dataset({"u": (("sample", "x"), np.sin(2 * np.pi * grid)[None] + 0.5)}, coords={"x": grid})
    fine = np.arange(8) / 8
    assert method_of(12, 8) == "spectral"
    np.testing.assert_allclose(resample(wave, {"x": 8})["u"].values[0], np.sin(2 * np.pi * fine) + 0.5, atol=1e-12)
    np.testing.assert_allclose(resample(wave, {"x": 8})["x"].values, fine)
    assert resample(ds, {"x": 4}) is ds
    with pytest.raises(ValueError, match="sizes: expected a positive size of a dim"):
        resample(ds, {"z": 2})


def _darcy(tmp_path, n: int, grid: int, seed: int):
    done = run_cli("generate", "darcy", "--n", str(n), "--n-grid", str(grid), "--seed", str(seed),
                   "--out", tmp_path / f"d{grid}.nc", "--threads", "1")
    assert done.returncode == 0, done.stderr
    return tmp_path / f"d{grid}.nc"


def test_a_run_trained_at_16_scored_at_16_32_and_64(tmp_path):
    train, fine = _darcy(tmp_path, 24, 16, 0), _darcy(tmp_path, 12, 64, 5)
    done = run_cli("train", "--data", train, "--model", "fno", "--epochs", "2", "--config", *[f"{k}={v}" for k, v in
                   TINY.items()], "--out", tmp_path / "run", "--no-progress", "--threads", "1")
    assert done.returncode == 0, done.stderr
    done = run_cli("evaluate", "--run", tmp_path / "run", "--data", fine, "--samples", "all", "--resolutions",
                   "16,32,64", "--out", tmp_path / "res", "--bootstrap", "100", "--threads", "1")
    assert done.returncode == 0, done.stderr
    result = json.loads((tmp_path / "res" / "metrics.json").read_text())
    assert [(r["resolution"], r["method"]) for r in result["rows"]] == [(16, "area average"), (32, "area average"),
                                                                         (64, "as stored")]
    assert result["training"] == {"x": 16, "y": 16} and result["file"] == {"x": 64, "y": 64}
    assert xr.open_dataset(tmp_path / "res" / "data-32.nc").sizes == {"sample": 12, "x": 32, "y": 32}
    assert all(r["intervals"]["rel_l2"][0] <= r["metrics"]["rel_l2"] <= r["intervals"]["rel_l2"][1]
               for r in result["rows"])
    assert (tmp_path / "res" / "resolutions.png").stat().st_size > 0 and "(trained)" in done.stdout
    finer = run_cli("evaluate", "--run", tmp_path / "run", "--data", train, "--samples", "all", "--resolutions", "32")
    assert finer.returncode == 1 and "resolutions: expected at most the file's grid" in finer.stderr


@pytest.mark.parametrize("name, extra", [("fno", {}), ("chonn_fno", {"order": 2, "d_state": 2, "expand": 1})])
def test_padding_pads_the_field_the_fourier_layers_see_by_a_fraction_of_each_axis(name, extra):
    import torch

    from operators.models import build

    plain = build(name, 1, 1, n_modes=4, width=4, **extra)
    padded = build(name, 1, 1, n_modes=4, width=4, padding=0.25, **extra)
    padded.load_state_dict(plain.state_dict())  # padding has no weights
    seen = []
    layer = next(m for m in padded.modules() if type(m).__name__ == "SpectralConv")
    layer.register_forward_pre_hook(lambda module, args: seen.append(tuple(args[0].shape[2:])))
    for n in (16, 32):
        x = torch.randn(2, 1, n, n, generator=torch.Generator().manual_seed(n))
        out = padded(x)
        assert out.shape == x.shape and not torch.allclose(out, plain(x))
    assert seen == [(24, 24), (48, 48)]  # 4 and 8 zero cells on each side: the same fraction at every grid
    with pytest.raises(ValueError, match=r"padding: expected a fraction of each axis in \[0, 1\), found 1.0"):
        build(name, 1, 1, n_modes=4, width=4, padding=1.0, **extra)
