"""``pde_data.open_source``: the reader chosen by content (never the suffix), clear
errors, and the per-sample / per-frame chunks of the files circuitop writes; ``circuitop info`` on a
PDEBench file."""

import os
import subprocess
import sys

import h5py
import numpy as np
import pytest
import torch
import xarray as xr

import pde_data
from pde_data import open_source, write_pdebench

F32 = np.float32


def field(n=3, nt=4, nx=8, ny=6, names=("h",), seed=0):
    """A small (sample, time, x, y) Dataset with float32 variables ``names``."""
    rng = np.random.default_rng(seed)
    dims = ("sample", "time", "x", "y")
    data = {v: (dims, rng.standard_normal((n, nt, nx, ny)).astype(F32)) for v in names}
    coords = {"x": ((np.arange(nx) + 0.5) / nx).astype(F32), "y": ((np.arange(ny) + 0.5) / ny).astype(F32),
              "time": np.linspace(0, 1, nt).astype(F32)}
    return xr.Dataset(data, coords=coords)


def test_netcdf_named_h5_opens_as_netcdf(tmp_path):
    ds = field()
    pde_data.save(ds, tmp_path / "x.h5")
    with open_source(tmp_path / "x.h5") as source:
        assert source.format == "netcdf" and source.path == str(tmp_path / "x.h5")
        xr.testing.assert_identical(source.dataset.load(), ds)  # no attrs added by the opener
    with open_source(tmp_path / "x.h5").dataset as opened:
        xr.testing.assert_identical(opened.load(), ds)


def test_pdebench_named_nc_opens_as_pdebench(tmp_path):
    ds = field()
    write_pdebench(ds, tmp_path / "y.nc", layout="group")
    with open_source(tmp_path / "y.nc") as source:
        opened = source.dataset
        assert source.format == "pdebench:group" and source.path == str(tmp_path / "y.nc")
        assert opened.attrs["pdebench_layout"] == "group"
        assert not opened["h"].variable._in_memory  # lazy: nothing read at open time
        assert all(not var.encoding for var in opened.variables.values())  # no read handles in encoding
        np.testing.assert_array_equal(opened["h"].values, ds["h"].values)


def test_relative_path_gives_absolute_source_path(tmp_path, monkeypatch):
    pde_data.save(field(), tmp_path / "rel.nc")
    monkeypatch.chdir(tmp_path)
    with open_source("rel.nc") as source:
        assert source.path == os.path.join(str(tmp_path), "rel.nc")


def test_shard_glob(tmp_path):
    ds = field(n=5)
    for i, part in enumerate((slice(0, 2), slice(2, 5))):
        pde_data.save(ds.isel(sample=part), tmp_path / f"set-{i:05d}.nc")
    with open_source(tmp_path / "set-*.nc") as source:
        assert source.format == "netcdf" and source.path == str(tmp_path / "set-*.nc")
        assert source.sizes["sample"] == 5
        np.testing.assert_array_equal(source.dataset["h"].values, ds["h"].values)
        torch.testing.assert_close(source.read(["h"], [4, 1], slice(1, 3)),
                                   pde_data.to_tensor(ds.isel(sample=[4, 1], time=slice(1, 3)), ["h"]))


def test_netcdf3_by_magic(tmp_path):
    ds = field(n=2)
    ds.to_netcdf(tmp_path / "classic.h5", format="NETCDF3_64BIT", engine="netcdf4")
    with open_source(tmp_path / "classic.h5") as source:
        assert source.format == "netcdf"
        np.testing.assert_array_equal(source.dataset["h"].values, ds["h"].values)


def _one_line(err: pytest.ExceptionInfo, *fragments: str) -> None:
    text = str(err.value)
    assert "\n" not in text, text
    for fragment in fragments:
        assert fragment in text, text


def test_missing_file_and_empty_glob(tmp_path):
    with pytest.raises(FileNotFoundError) as err:
        open_source(tmp_path / "missing.h5").dataset
    _one_line(err, "missing.h5")
    with pytest.raises(FileNotFoundError) as err:
        open_source(tmp_path / "none-*.nc").dataset
    _one_line(err, "none-*.nc")


def test_not_hdf5_and_truncated(tmp_path):
    (tmp_path / "notes.h5").write_text("hello\nworld\n")
    with pytest.raises(ValueError) as err:
        open_source(tmp_path / "notes.h5").dataset
    _one_line(err, "notes.h5", "expected a NetCDF, HDF5 (PDEBench, The Well), torch .pt (neuraloperator) or MATLAB .mat")
    good = write_pdebench(field(), tmp_path / "good.h5", layout="group")
    (tmp_path / "cut.h5").write_bytes(good.read_bytes()[:64])
    with pytest.raises(ValueError) as err:
        open_source(tmp_path / "cut.h5").dataset
    _one_line(err, "cut.h5", "unreadable")


def test_hdf5_in_no_layout(tmp_path):
    with h5py.File(tmp_path / "other.h5", "w") as f:
        f["whatever"] = np.zeros(3)
    with pytest.raises(ValueError) as err:
        open_source(tmp_path / "other.h5").dataset
    assert "other.h5" in str(err.value)


def test_sniffing_handle_is_closed(tmp_path):
    pde_data.save(field(), tmp_path / "a.h5")
    open_source(tmp_path / "a.h5").dataset.close()
    with h5py.File(tmp_path / "a.h5", "a") as f:  # no read handle left open (HDF5 would refuse to write)
        f.attrs["touched"] = 1


# chunks: one sample (and one frame) per chunk


def test_pdebench_single_file_chunks(tmp_path):
    one_d = field(nt=5, names=("u",)).isel(y=0, drop=True)
    path = write_pdebench(one_d, tmp_path / "1D_Advection_Sols_beta0.4.hdf5", layout="1d")
    with h5py.File(path) as f:
        assert f["tensor"].shape == (3, 5, 8) and f["tensor"].chunks == (1, 1, 8)
        assert f["tensor"].compression is None
    cfd = field(n=2, nt=5, names=("density", "pressure", "Vx", "Vy"))
    path = write_pdebench(cfd, tmp_path / "2D_CFD_Rand_M0.1.hdf5", layout="cfd")
    with h5py.File(path) as f:
        for key in ("density", "pressure", "Vx", "Vy"):
            assert f[key].shape == (2, 5, 8, 6) and f[key].chunks == (1, 1, 8, 6), key
    with open_source(path).dataset as opened:
        xr.testing.assert_equal(opened.load(), cfd)


def test_pdebench_group_darcy_ns_incom_chunks(tmp_path):
    path = write_pdebench(field(names=("u", "v")), tmp_path / "g.h5", layout="group")
    with h5py.File(path) as f:
        assert f["0001/data"].shape == (4, 8, 6, 2) and f["0001/data"].chunks == (1, 8, 6, 2)
        assert f["0001/data"].compression is None
    darcy = field(names=("a", "u")).isel(time=0, drop=True)
    with h5py.File(write_pdebench(darcy, tmp_path / "d.h5", layout="darcy")) as f:
        assert f["nu"].chunks == (1, 8, 6) and f["tensor"].chunks == (1, 1, 8, 6)
    ns = field(names=("vx", "vy", "particles"))
    ns = ns.assign(force_x=ns["vx"].isel(time=0, drop=True), force_y=ns["vy"].isel(time=0, drop=True))
    with h5py.File(write_pdebench(ns, tmp_path / "ns.h5", layout="ns_incom")) as f:
        assert f["velocity"].chunks == (1, 1, 8, 6, 2) and f["particles"].chunks == (1, 1, 8, 6, 1)
        assert f["force"].chunks == (1, 8, 6, 2)


def test_netcdf_save_chunks(tmp_path):
    ds = field()
    ds["steady"] = ds["h"].isel(time=0, drop=True)
    ds["seq"] = (("sample", "time", "feature"), np.ones((3, 4, 2), F32))
    ds["per_time"] = ("time", np.arange(4, dtype=F32))  # no sample dim: library default
    pde_data.save(ds, tmp_path / "a.nc")
    with h5py.File(tmp_path / "a.nc") as f:
        assert f["h"].chunks == (1, 1, 8, 6) and f["h"].compression == "gzip"
        assert f["steady"].chunks == (1, 8, 6)
        assert f["seq"].chunks == (1, 4, 2)  # a sequence keeps its time axis in one chunk
        assert f["per_time"].chunks != (1,)
    xr.testing.assert_identical(pde_data.open_source(tmp_path / "a.nc").dataset.load(), ds)


# circuitop info


def circuitop(*args):
    return subprocess.run([sys.executable, "-m", "operators.cli", *args], capture_output=True, text=True,
                          timeout=120)


def test_info_describes_a_pdebench_file(tmp_path):
    path = write_pdebench(field(names=("u", "v")), tmp_path / "2D_rdb_NA_NA.h5", layout="group")
    result = circuitop("info", str(path))
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "format: pdebench:group" in out and "family: field" in out
    assert "variable u: ('sample', 'time', 'x', 'y') float32" in out
    assert "variable v: " in out
