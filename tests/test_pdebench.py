"""PDEBench layouts: write → open round trips, lazy per-sample reads, and clear errors on bad files."""

import h5py
import numpy as np
import pytest
import xarray as xr

from pde_data import open_source, write_pdebench
from pde_data.formats.pdebench_config import format_config, parse_config
from h5_reads import counting_reads

F32 = np.float32


def _grid(n):
    return ((np.arange(n) + 0.5) / n).astype(F32)


def _fields(rng, names, dims, shape, coords, attrs=None):
    data = {n: (dims, rng.standard_normal(shape).astype(F32)) for n in names}
    return xr.Dataset(data, coords=coords, attrs=attrs or {})


@pytest.fixture
def rng():
    return np.random.default_rng(0)


def _cases(rng):
    x, y, t = _grid(8), _grid(6), np.linspace(0, 1, 5).astype(F32)
    xy = {"x": ("x", x, {"grid": "cell centres"}), "y": ("y", y, {"grid": "cell centres"})}
    field3 = ("sample", "time", "x", "y")
    return {
        ("darcy", "2D_DarcyFlow_beta1.0_Train.hdf5"):
            _fields(rng, ["a", "u"], ("sample", "x", "y"), (3, 8, 6), xy, {"beta": 1.0}),
        ("rdb", "2D_rdb_NA_NA.h5"):
            _fields(rng, ["h"], field3, (3, 5, 8, 6), {**xy, "time": t, "dam_radius": ("sample", rng.uniform(0.3, 0.7, 3))}),
        ("diff-react", "2D_diff-react_NA_NA.h5"):
            _fields(rng, ["u", "v"], field3, (2, 5, 8, 6), {**xy, "time": t}),
        ("ns", "ns_groups.h5"):
            _fields(rng, ["vorticity"], field3, (2, 5, 8, 6), {**xy, "time": t}),
        ("1d", "1D_Advection_Sols_beta0.4.hdf5"):
            _fields(rng, ["u"], ("sample", "time", "x"), (3, 5, 8), {"x": xy["x"], "time": t}, {"t_final": 1.25}),
        ("cfd", "2D_CFD_Rand_M0.1.hdf5"):
            _fields(rng, ["density", "pressure", "Vx", "Vy"], field3, (2, 5, 8, 6), {**xy, "time": t},
                    {"t_final": 1.25, "eta": 0.01, "zeta": 0.01, "M": 0.1}),
    }


@pytest.mark.parametrize("case", ["darcy", "rdb", "diff-react", "ns", "1d", "cfd"])
def test_round_trip(tmp_path, rng, case):
    (layout, name), ds = next((k, v) for k, v in _cases(rng).items() if k[0] == case)
    path = write_pdebench(ds, tmp_path / name, layout=layout)
    with open_source(path).dataset as opened:
        xr.testing.assert_identical(opened.load().drop_attrs(deep=False), ds.drop_attrs(deep=False))
        for key, value in ds.attrs.items():
            assert opened.attrs[key] == value


def test_real_layout_keys_and_axes(tmp_path, rng):
    cases = _cases(rng)
    darcy = cases[("darcy", "2D_DarcyFlow_beta1.0_Train.hdf5")]
    write_pdebench(darcy, tmp_path / "d.hdf5", layout="darcy")
    with h5py.File(tmp_path / "d.hdf5") as f:
        assert f["nu"].shape == (3, 8, 6) and f["tensor"].shape == (3, 1, 8, 6) and f.attrs["beta"] == 1.0
        np.testing.assert_array_equal(f["tensor"][1, 0], darcy["u"].values[1])
    dr = cases[("diff-react", "2D_diff-react_NA_NA.h5")]
    write_pdebench(dr, tmp_path / "2D_diff-react_NA_NA.h5", layout="diff-react")
    with h5py.File(tmp_path / "2D_diff-react_NA_NA.h5") as f:
        assert f["0001/data"].shape == (5, 6, 8, 2)  # first spatial axis is y
        np.testing.assert_array_equal(f["0001/data"][2, :, :, 1], dr["v"].values[1, 2].T)
        assert list(f["0000/grid"]) == ["t", "x", "y"]
    one = cases[("1d", "1D_Advection_Sols_beta0.4.hdf5")]
    write_pdebench(one, tmp_path / "a.hdf5", layout="1d")
    with h5py.File(tmp_path / "a.hdf5") as f:
        assert f["tensor"].shape == (3, 5, 8) and f["t-coordinate"].shape == (6,)


def test_config_yaml():
    text = format_config({"dam_radius": 0.123456789012345, "seed": 7})
    assert parse_config(text) == {"sim.dam_radius": 0.123456789012345, "sim.seed": 7}
    nested = "name: rdb\nsim:\n  T_end: 1.0\n  inner:\n    g: 9.81\nplot: false\n"
    assert parse_config(nested) == {"name": "rdb", "sim.T_end": 1.0, "sim.inner.g": 9.81, "plot": "false"}


@pytest.mark.parametrize("case", ["darcy", "rdb", "cfd"])
def test_reads_one_slice(tmp_path, rng, monkeypatch, case):
    (layout, name), ds = next((k, v) for k, v in _cases(rng).items() if k[0] == case)
    path = write_pdebench(ds, tmp_path / name, layout=layout)
    opened = open_source(path).dataset
    var = next(iter(ds.data_vars))
    counts = counting_reads(monkeypatch)
    values = opened[var].isel(sample=1).values
    assert sum(counts) == values.size == ds[var].isel(sample=1).size
    np.testing.assert_array_equal(values, ds[var].values[1])
    opened.close()


def _resident_mb():
    """Current (not peak) resident memory of this process in MB."""
    import os

    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


@pytest.mark.slow
def test_iterating_large_file_bounded_memory(tmp_path):
    """A 64 MB group file is iterated sample by sample; resident memory grows far less than the file."""
    n, t, nx = 16, 64, 128  # 16 · 64 · 128² · 4 B = 64 MiB
    chunk = np.ones((1, t, nx, nx), F32)
    ds = xr.Dataset({"h": (("sample", "time", "x", "y"), np.broadcast_to(chunk, (n, t, nx, nx)))},
                    coords={"time": np.linspace(0, 1, t).astype(F32)})
    path = write_pdebench(ds, tmp_path / "2D_rdb_NA_NA.h5", layout="rdb")
    del ds, chunk
    before = _resident_mb()
    opened = open_source(path).dataset
    total, growth = 0.0, 0.0
    for i in range(n):
        total += float(opened["h"].isel(sample=i).values.sum())
        growth = max(growth, _resident_mb() - before)
    assert total == n * t * nx * nx
    assert growth < 24, f"peak resident memory grew {growth:.0f} MB reading a 64 MB file"
    opened.close()


def _write(path, **arrays):
    with h5py.File(path, "w") as f:
        for key, value in arrays.items():
            f.create_dataset(key, data=value)


def test_bad_files(tmp_path, rng):
    with pytest.raises(FileNotFoundError, match="no such file"):
        open_source(tmp_path / "missing.h5").dataset
    (tmp_path / "text.h5").write_text("not hdf5 at all")
    with pytest.raises(ValueError, match="text.h5.*expected a NetCDF, HDF5"):
        open_source(tmp_path / "text.h5").dataset
    good = tmp_path / "good.hdf5"
    _write(good, nu=np.ones((2, 4, 4), F32), tensor=np.ones((2, 1, 4, 4), F32))
    truncated = tmp_path / "truncated.hdf5"
    truncated.write_bytes(good.read_bytes()[:600])
    with pytest.raises(ValueError, match="truncated.hdf5.*unreadable"):
        open_source(truncated).dataset
    _write(tmp_path / "shape.hdf5", nu=np.ones((2, 4, 4), F32), tensor=np.ones((2, 1, 4, 5), F32),
           **{"x-coordinate": np.ones(4, F32), "y-coordinate": np.ones(4, F32)})
    with pytest.raises(ValueError, match=r"shape.hdf5: key 'tensor': expected shape \(2, 1, 4, 4\).*found \(2, 1, 4, 5\)"):
        open_source(tmp_path / "shape.hdf5").dataset
    _write(tmp_path / "nokey.hdf5", nu=np.ones((2, 4, 4), F32), tensor=np.ones((2, 1, 4, 4), F32))
    with pytest.raises(ValueError, match="nokey.hdf5: expected key 'x-coordinate'"):
        open_source(tmp_path / "nokey.hdf5").dataset
    _write(tmp_path / "cfd.hdf5", density=np.ones((2, 3, 4), F32), Vx=np.ones((2, 3, 4), F32))
    with pytest.raises(ValueError, match="cfd.hdf5: expected key 'pressure'"):
        open_source(tmp_path / "cfd.hdf5").dataset


def test_nan_reported_per_slice(tmp_path):
    u = np.ones((3, 4, 4), F32)
    u[2, 1, 1] = np.nan
    grid = {"x-coordinate": _grid(4), "y-coordinate": _grid(4)}
    _write(tmp_path / "nan.hdf5", nu=np.ones((3, 4, 4), F32), tensor=u[:, None], **grid)
    ds = open_source(tmp_path / "nan.hdf5").dataset
    assert ds["u"].isel(sample=1).values.sum() == 16  # clean samples read fine
    with pytest.raises(ValueError, match="nan.hdf5: key 'tensor', sample 2: expected finite values, found NaN"):
        ds["u"].values
    ds.close()


def test_group_channel_mismatch(tmp_path, rng):
    ds = _cases(rng)[("diff-react", "2D_diff-react_NA_NA.h5")]
    path = write_pdebench(ds, tmp_path / "g.h5", layout="group")
    with pytest.raises(ValueError, match=r"g.h5: key '0000/data': expected 1 channels \('h',\), found 2"):
        open_source(path, variables=("h",)).dataset
    with pytest.raises(ValueError, match="layout: expected one of"):
        write_pdebench(ds, tmp_path / "z.h5", layout="zarr")


@pytest.mark.parametrize("sel", [
    {"sample": 1}, {"sample": [0, 1]}, {"sample": [1, 0], "time": [4, 1], "x": 3},
    {"time": 2, "y": [5, 0, 2]}, {"sample": slice(0, 2), "x": slice(1, 7, 3)}, {"sample": -1, "time": -1},
])
def test_lazy_indexing_matches_loaded(tmp_path, rng, sel):
    ds = _cases(rng)[("diff-react", "2D_diff-react_NA_NA.h5")]
    with open_source(write_pdebench(ds, tmp_path / "2D_diff-react_NA_NA.h5", layout="diff-react")).dataset as lazy:
        xr.testing.assert_equal(lazy.isel(sel).load().drop_attrs(deep=False), ds.isel(sel))


def test_sparse_sample_list_reads_only_those(tmp_path, rng, monkeypatch):
    ds = _cases(rng)[("darcy", "2D_DarcyFlow_beta1.0_Train.hdf5")]
    path = write_pdebench(ds, tmp_path / "d.hdf5", layout="darcy")
    with open_source(path).dataset as lazy:
        counts = counting_reads(monkeypatch)
        values = lazy["a"].isel(sample=[0, 2]).values
        assert len(counts) == 2 and sum(counts) == 2 * 8 * 6  # sample 1 is skipped, not read
        np.testing.assert_array_equal(values, ds["a"].values[[0, 2]])


def test_rewritten_file_is_read_afresh(tmp_path, rng):
    ds = _cases(rng)[("darcy", "2D_DarcyFlow_beta1.0_Train.hdf5")]
    path = write_pdebench(ds, tmp_path / "d.hdf5", layout="darcy")
    first = open_source(path).dataset
    np.testing.assert_array_equal(first["a"].values, ds["a"].values)
    write_pdebench(ds.assign(a=ds["a"] + 1), path, layout="darcy")  # atomic replace, first still open
    with open_source(path).dataset as second:
        np.testing.assert_array_equal(second["a"].values, ds["a"].values + 1)
    np.testing.assert_array_equal(first["a"].values, ds["a"].values)  # the old handle reads the old file
    first.close()
    with pytest.raises(ValueError, match="layout: expected one of"):
        open_source(path, layout="zarr").dataset


def test_bad_group_files(tmp_path, rng):
    ds = _cases(rng)[("rdb", "2D_rdb_NA_NA.h5")]
    path = write_pdebench(ds, tmp_path / "2D_rdb_NA_NA.h5", layout="rdb")
    with h5py.File(path, "a") as f:
        del f["0001/data"]
        f.create_dataset("0001/data", data=np.zeros((5, 8, 7, 1), F32))
    with pytest.raises(ValueError, match=r"key '0001/data': expected shape \(5, 8, 6, 1\).*found \(5, 8, 7, 1\)"):
        open_source(path).dataset
    path = write_pdebench(ds, tmp_path / "2D_rdb_NA_NA.h5", layout="rdb")
    with h5py.File(path, "a") as f:
        del f["0000/grid/t"]
    with pytest.raises(ValueError, match=r"2D_rdb_NA_NA.h5:0000: expected key 'grid/t'"):
        open_source(path).dataset


def test_wrong_axes_named(tmp_path):
    _write(tmp_path / "1D_Burgers_Sols_Nu0.1.hdf5", tensor=np.ones((2, 3, 4, 5), F32))
    with pytest.raises(ValueError, match=r"key 'tensor': expected 3 axes, found shape \(2, 3, 4, 5\)"):
        open_source(tmp_path / "1D_Burgers_Sols_Nu0.1.hdf5", layout="1d").dataset
    _write(tmp_path / "1D_t.hdf5", tensor=np.ones((2, 3, 4), F32), **{"x-coordinate": _grid(4),
                                                                        "t-coordinate": np.arange(3, dtype=F32)})
    with pytest.raises(ValueError, match=r"key 't-coordinate': expected shape \(4,\), found \(3,\)"):
        open_source(tmp_path / "1D_t.hdf5").dataset
