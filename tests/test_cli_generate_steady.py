"""``circuitop generate order|poisson|darcy`` run as real subprocesses with tiny sizes."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import pde_data

ROOT = Path(__file__).resolve().parents[1]


def _generate(*args):
    return subprocess.run([sys.executable, "-m", "operators.cli", "generate", *map(str, args)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)


def _values(path, name):
    with pde_data.open_source(path).dataset as ds:
        return ds[name].values


def _main(*args):
    """The same command in-process (each subprocess pays the package import again; two of them suffice)."""
    from operators.cli import main

    return main(["generate", *map(str, args)])


def test_order_streams_the_full_set(tmp_path):
    extra = ["--order", "3", "--n-points", "128", "--n", "5", "--seed", "3"]
    full = _generate("order", "--out", tmp_path / "full.nc", *extra)
    assert full.returncode == 0, full.stderr
    assert "wrote" in full.stdout and "100%" in full.stderr  # progress bar on stderr
    expected = pde_data.generate_order_benchmark(5, 3, n_points=128, seed=3)
    assert _values(tmp_path / "full.nc", "target").tobytes() == expected["target"].values.tobytes()
    with pde_data.open_source(tmp_path / "full.nc").dataset as ds:
        assert ds.attrs["seed"] == 3 and ds.attrs["order"] == 3 and ds.sizes == {"sample": 5, "s": 128}


def test_darcy_streamed_in_chunks_and_poisson_refusal(tmp_path):
    out = _generate("darcy", "--out", tmp_path / "d.nc", "--n", 11, "--n-grid", 12, "--beta", 2.0)  # chunks of 8
    assert out.returncode == 0, out.stderr
    full = pde_data.generate_darcy(11, n_grid=12, beta=2.0, seed=0)
    with pde_data.open_source(tmp_path / "d.nc").dataset as ds:
        assert ds["u"].values.tobytes() == full["u"].values.tobytes()
        assert ds.attrs["beta"] == 2.0 and list(ds["sample"].values) == list(range(11))
    bad = _generate("poisson", "--out", tmp_path / "x.nc", "--n", 2, "--K", 4, "--n-grid", 5)
    assert bad.returncode == 1
    assert "error: --n-grid: expected at least K + 2 = 6 points" in bad.stderr and "Traceback" not in bad.stderr
    assert not (tmp_path / "x.nc").exists()


def test_poisson_command(tmp_path):
    assert _main("poisson", "--out", tmp_path / "p.nc", "--n", 3, "--K", 4, "--n-grid", 16, "--seed", 1) == 0
    with pde_data.open_source(tmp_path / "p.nc").dataset as ds:
        assert ds.attrs["K"] == 4 and ds["coef"].shape == (3, 4, 4)
        assert np.max(np.abs(pde_data.solve_poisson(ds["f"].values) - ds["u"].values)) < 1e-10
        np.testing.assert_array_equal(ds["u"].values, pde_data.generate_poisson(3, K=4, n_grid=16, seed=1)["u"].values)


def test_order_standard_splits(tmp_path, capsys):
    args = ["order", "--out", tmp_path / "sets", "--splits", "--sizes", 3, 2, 2, "--n-points", 128]
    assert _main(*args) == 0
    files = sorted(p.name for p in (tmp_path / "sets").iterdir())
    assert files == sorted(f"order_T{n}_{s}.nc" for n in range(1, 5) for s in ("train", "val", "test"))
    with pde_data.open_source(tmp_path / "sets" / "order_T4_val.nc").dataset as ds:
        assert ds.attrs["seed"] == 43 and ds.attrs["order"] == 4 and ds.sizes == {"sample": 2, "s": 128}
    assert "28 samples" in capsys.readouterr().err  # 4 orders x (3 + 2 + 2), announced before computing
    before = (tmp_path / "sets" / "order_T1_train.nc").read_bytes()
    assert _main(*args, "--tau", 0.1) == 1  # the sets a user made stay unless --overwrite
    assert "--out: " in capsys.readouterr().err and (tmp_path / "sets" / "order_T1_train.nc").read_bytes() == before
    assert _main(*args, "--tau", 0.1, "--overwrite") == 0
    assert (tmp_path / "sets" / "order_T1_train.nc").read_bytes() != before


@pytest.mark.parametrize("args, message", [
    (["order", "--n", 2, "--n-points", 8], "--n-points: expected at least"),
    (["darcy", "--n", 2, "--n-grid", 1], "--n-grid: expected at least 2 cells, found 1"),
    (["order", "--splits", "--shards", 2], "--shards: expected one set to shard, found --splits"),
    (["darcy", "--n", 2, "--workers", 2], "--workers: expected with --shards"),
    (["darcy", "--n", 8, "--shards", 9], "--shards: expected 1 to 8 (8 samples in blocks of 1), found 9"),
])
def test_invalid_parameters_refused(tmp_path, capsys, args, message):
    assert _main(*args[:1], "--out", tmp_path / "x.nc", *args[1:]) == 1
    assert message in capsys.readouterr().err
    assert not (tmp_path / "x.nc").exists()
