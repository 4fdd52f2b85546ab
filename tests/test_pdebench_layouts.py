"""PDEBench ``ns_incom`` and CNO ``cno_poisson`` layouts: round trips, lazy reads, detection, errors, training."""

import json

import h5py
import numpy as np
import pytest
import xarray as xr

from pde_data import open_source, write_pdebench
from pde_data.formats.pdebench_read import LAYOUTS
from h5_reads import counting_reads

F32 = np.float32


def ns_incom(n=3, nt=4, nx=8, ny=8, seed=0):
    rng = np.random.default_rng(seed)
    timed, steady = ("sample", "time", "x", "y"), ("sample", "x", "y")
    grid = {"grid": "cell centres (i + 0.5) / n on [0, 1), assumed: the file has no grid"}
    data = {v: (timed, rng.standard_normal((n, nt, nx, ny)).astype(F32)) for v in ("vx", "vy", "particles")}
    data.update({v: (steady, rng.standard_normal((n, nx, ny)).astype(F32)) for v in ("force_x", "force_y")})
    coords = {"x": ("x", (np.arange(nx) + 0.5) / nx, grid), "y": ("y", (np.arange(ny) + 0.5) / ny, grid),
              "time": np.linspace(0, 0.3, nt).astype(F32)}
    return xr.Dataset(data, coords=coords)


def cno_poisson(n=12, nx=8, seed=0):
    rng = np.random.default_rng(seed)
    grid = {"grid": "points p / (n - 1) on [0, 1], boundaries included, assumed: the file has no grid"}
    x = np.arange(nx) / (nx - 1)
    data = {v: (("sample", "x", "y"), rng.standard_normal((n, nx, nx)).astype(F32)) for v in ("f", "u")}
    return xr.Dataset(data, coords={"x": ("x", x, grid), "y": ("y", x.copy(), grid)},
                      attrs={"min_inp": -1.5, "max_inp": 2.0, "min_out": -0.25, "max_out": 0.5})


def test_layouts_listed():
    assert {"ns_incom", "cno_poisson"} <= set(LAYOUTS)


def test_ns_incom_round_trip_and_file_layout(tmp_path):
    ds = ns_incom()
    path = write_pdebench(ds, tmp_path / "ns_incom_inhom_2d_512-0.h5", layout="ns_incom")
    with h5py.File(path) as f:
        assert sorted(f.keys()) == ["force", "particles", "t", "velocity"]
        assert f["velocity"].shape == (3, 4, 8, 8, 2) and f["particles"].shape == (3, 4, 8, 8, 1)
        assert f["force"].shape == (3, 8, 8, 2) and f["t"].shape == (3, 4)
        assert {f[k].dtype for k in f} == {np.dtype(F32)}
        np.testing.assert_array_equal(f["velocity"][1, 2, :, :, 1], ds["vy"].values[1, 2])
        np.testing.assert_array_equal(f["force"][2, :, :, 0], ds["force_x"].values[2])
    with open_source(path).dataset as opened:  # auto-detected from the keys
        assert opened.attrs["pdebench_layout"] == "ns_incom"
        xr.testing.assert_identical(opened.load().drop_attrs(deep=False), ds)
        assert "time_note" not in opened.attrs


def test_ns_incom_reads_one_block_of_one_sample(tmp_path, monkeypatch):
    """A channel of a (..., channels) dataset comes from one contiguous read of the block with every
    channel (a channel alone is a strided selection, about 10x slower in HDF5; on disk the channels
    share pages anyway), and the next channel of the same block is served from that read."""
    ds = ns_incom()
    path = write_pdebench(ds, tmp_path / "ns.h5", layout="ns_incom")
    counts = counting_reads(monkeypatch)
    opened = open_source(path).dataset
    assert sum(counts) == 3 * 4  # opening reads the (N, T) 't' only
    for name, other, channels in (("vy", "vx", 2), ("particles", None, 1), ("force_y", "force_x", 2)):
        counts.clear()
        values = opened[name].isel(sample=1).values
        assert sum(counts) == values.size * channels == ds[name].isel(sample=1).size * channels
        np.testing.assert_array_equal(values, ds[name].values[1])
        if other is not None:
            counts.clear()
            np.testing.assert_array_equal(opened[other].isel(sample=1).values, ds[other].values[1])
            assert sum(counts) == 0  # the same block: no second read
    counts.clear()
    sel = opened["vx"].isel(sample=[2, 0], time=1, x=slice(2, 5)).values
    assert sum(counts) == 2 * 3 * 8 * 2
    np.testing.assert_array_equal(sel, ds["vx"].values[[2, 0], 1, 2:5])
    opened.close()


def test_ns_incom_time_per_sample(tmp_path):
    ds = ns_incom()
    t = np.stack([ds["time"].values + k for k in range(3)])
    ds = ds.assign_coords(time=(("sample", "time"), t))
    path = write_pdebench(ds, tmp_path / "ns.h5", layout="ns_incom")
    with open_source(path).dataset as opened:
        assert opened["time"].dims == ("sample", "time") and "differs between samples" in opened.attrs["time_note"]
        np.testing.assert_array_equal(opened["time"].values, t)


def test_ns_incom_errors(tmp_path):
    ds = ns_incom()
    path = write_pdebench(ds, tmp_path / "ns.h5", layout="ns_incom")
    with h5py.File(path, "a") as f:
        del f["force"]
    with pytest.raises(ValueError,
                       match=r"ns.h5: expected key 'force' \(a dataset\); found keys \['particles', 't', 'velocity'\]"):
        open_source(path).dataset
    path = write_pdebench(ds, tmp_path / "ns.h5", layout="ns_incom")
    with h5py.File(path, "a") as f:
        del f["particles"]
        f.create_dataset("particles", data=np.zeros((3, 4, 8, 7, 1), F32))
    with pytest.raises(ValueError, match=r"key 'particles': expected shape \(3, 4, 8, 8, 1\) \(from 'velocity'\), "
                                         r"found \(3, 4, 8, 7, 1\)"):
        open_source(path).dataset
    path = write_pdebench(ds, tmp_path / "ns.h5", layout="ns_incom")
    with h5py.File(path, "a") as f:
        del f["velocity"]
        f.create_dataset("velocity", data=np.zeros((3, 4, 8, 8, 3), F32))
    with pytest.raises(ValueError, match=r"key 'velocity': expected shape \(N, T, X, Y, 2\), found \(3, 4, 8, 8, 3\)"):
        open_source(path).dataset
    with pytest.raises(ValueError,
                       match=r"write_pdebench\(layout='ns_incom'\): expected variables.*missing \['force_y'\]"):
        write_pdebench(ds.drop_vars("force_y"), tmp_path / "bad.h5", layout="ns_incom")


def test_cno_poisson_round_trip_order_and_laziness(tmp_path, monkeypatch):
    ds = cno_poisson()
    path = write_pdebench(ds, tmp_path / "PoissonData_64x64_IN.h5", layout="cno_poisson")
    with h5py.File(path) as f:
        assert set(f.keys()) == {f"Sample_{i}" for i in range(12)} | {"min_inp", "max_inp", "min_out", "max_out"}
        assert f["Sample_10/input"].shape == (8, 8) and f["min_out"][()] == F32(-0.25)
        np.testing.assert_array_equal(f["Sample_10/output"][()], ds["u"].values[10])
    counts = counting_reads(monkeypatch)
    opened = open_source(path).dataset  # auto-detected from the Sample_* groups (not the generic "group" layout)
    assert sum(counts) == 4  # opening reads the four scalars only
    assert opened.attrs["pdebench_layout"] == "cno_poisson"
    assert {k: opened.attrs[k] for k in ds.attrs} == ds.attrs
    counts.clear()
    values = opened["u"].isel(sample=10).values  # Sample_10 comes after Sample_9, not after Sample_1
    assert sum(counts) == values.size == 64
    np.testing.assert_array_equal(values, ds["u"].values[10])
    xr.testing.assert_identical(opened.load().drop_attrs(deep=False), ds.drop_attrs(deep=False))
    opened.close()


def test_cno_poisson_scalars_from_data_and_sample_ids(tmp_path):
    ds = cno_poisson(n=3).assign_coords(sample_id=("sample", [4, 7, 20]))
    ds.attrs = {}
    path = write_pdebench(ds, tmp_path / "PoissonData_64x64_OUT.h5", layout="cno_poisson")
    with open_source(path).dataset as opened:
        assert opened.attrs["min_inp"] == float(ds["f"].min()) and opened.attrs["max_out"] == float(ds["u"].max())
        xr.testing.assert_identical(opened.load().drop_attrs(deep=False), ds)


def test_cno_poisson_errors(tmp_path):
    path = write_pdebench(cno_poisson(n=3), tmp_path / "p.h5", layout="cno_poisson")
    with h5py.File(path, "a") as f:
        del f["max_out"]
    with pytest.raises(ValueError, match=r"p.h5: expected key 'max_out' \(a dataset\)"):
        open_source(path).dataset
    path = write_pdebench(cno_poisson(n=3), tmp_path / "p.h5", layout="cno_poisson")
    with h5py.File(path, "a") as f:
        del f["Sample_2/output"]
        f.create_dataset("Sample_2/output", data=np.zeros((8, 9), F32))
    with pytest.raises(ValueError,
                       match=r"key 'Sample_2/output': expected shape \(8, 8\) \(as 'Sample_0/input'\), found \(8, 9\)"):
        open_source(path).dataset
    path = write_pdebench(cno_poisson(n=3), tmp_path / "p.h5", layout="cno_poisson")
    with h5py.File(path, "a") as f:
        del f["Sample_1/input"]
    with pytest.raises(ValueError, match=r"p.h5:Sample_1: expected key 'input'"):
        open_source(path).dataset
    with pytest.raises(ValueError, match=r"expected per-sample groups 'Sample_0'"):
        open_source(write_pdebench(ns_incom(), tmp_path / "ns.h5", layout="ns_incom"), layout="cno_poisson").dataset


def test_train_on_ns_incom_file(tmp_path, capsys):
    from operators.cli import main
    from operators.training import DataSpec, ModelSpec, RunSpec, TaskSpec, resolve

    path = write_pdebench(ns_incom(n=6, nt=4), tmp_path / "ns_incom_inhom_2d_512-0.h5", layout="ns_incom")
    spec = RunSpec(data=DataSpec(str(path)), task=TaskSpec(window=2), model=ModelSpec("fno"))
    with open_source(path).dataset as ds:  # by default windows use the time-dependent variables only
        assert resolve(spec, ds).data.inputs == ("vx", "vy", "particles")
    args = ["train", "--data", str(path), "--model", "fno", "--out", str(tmp_path / "run"), "--window", "2",
            "--input", "vx", "vy", "--epochs", "1", "--batch-size", "4", "--split", "4,1,1",
            "--config", "n_modes=4", "width=8", "n_layers=2", "--threads", "1", "--no-progress"]
    assert main(args) == 0, capsys.readouterr().err
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    assert run["data"]["inputs"] == ["vx", "vy"] and run["model"]["in_channels"] == 4
