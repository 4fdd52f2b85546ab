"""PredictionWriter: batches written one by one equal the whole; the file appears only on success."""

import numpy as np
import pytest
import xarray as xr

import pde_data
from pde_data import PredictionWriter


def _truth(n=7, t=5, nx=6, ny=4, seed=0, steady=False) -> xr.Dataset:
    rng = np.random.default_rng(seed)
    dims = ("sample", "x", "y") if steady else ("sample", "time", "x", "y")
    shape = (n, nx, ny) if steady else (n, t, nx, ny)
    coords = {"sample": np.arange(100, 100 + n), "x": ("x", (np.arange(nx) + 0.5) / nx, {"grid": "cell centres"}),
              "y": ("y", (np.arange(ny) + 0.5) / ny, {"grid": "cell centres"})}
    if not steady:
        coords["time"] = ("time", np.linspace(0.0, 1.0, t), {"units": "1"})
    data = {"u": (dims, rng.standard_normal(shape).astype(np.float32), {"long_name": "velocity", "units": "m/s"}),
            "h": (dims, rng.uniform(1, 2, shape).astype(np.float32), {"long_name": "height"})}
    return xr.Dataset(data, coords=coords, attrs={"viscosity": 1e-3})


def _write_in_batches(path, truth, bounds, variables=("u", "h"), **kwargs):
    like = truth[list(variables)].isel(sample=[0])
    with PredictionWriter(path, like, list(variables), n_samples=truth.sizes["sample"], **kwargs) as out:
        for a, b in zip(bounds[:-1], bounds[1:]):
            batch = truth[list(variables)].isel(sample=slice(a, b))
            out.write(a, batch.drop_vars("sample"), sample_ids=truth.sample.values[a:b])


@pytest.mark.parametrize("steady", [False, True])
def test_batches_equal_the_whole(tmp_path, steady):
    truth = _truth(steady=steady)
    path = tmp_path / "pred" / "pred.nc"
    _write_in_batches(path, truth, [0, 3, 4, 7])
    with pde_data.open_source(path).dataset as back:
        xr.testing.assert_identical(back[["u", "h"]].drop_attrs(deep=False), truth[["u", "h"]].drop_attrs(deep=False))
        assert back["u"].encoding["chunksizes"] == ((1, 6, 4) if steady else (1, 1, 6, 4))
        assert back["u"].encoding["zlib"]
    assert not list((tmp_path / "pred").glob(".*.tmp"))


def test_attrs_and_default_sample_ids(tmp_path):
    truth = _truth(n=3)
    like = truth[["u"]].isel(sample=[0])
    with PredictionWriter(tmp_path / "p.nc", like, ["u"], 3, attrs={"model": "fno"}) as out:
        out.write(0, truth[["u"]].isel(sample=[0, 1]).drop_vars("sample"))
        out.write(2, truth[["u"]].isel(sample=[2]))
    with pde_data.open_source(tmp_path / "p.nc").dataset as back:
        assert back.attrs == {"model": "fno"}
        np.testing.assert_array_equal(back.sample.values, [0, 1, 102])  # rows, then the batch's own ids
        np.testing.assert_array_equal(back.u.values, truth.u.values)


def test_error_leaves_no_file(tmp_path):
    truth = _truth()
    path = tmp_path / "pred.nc"
    with pytest.raises(RuntimeError, match="model diverged"):
        with PredictionWriter(path, truth[["u"]], ["u"], n_samples=7) as out:
            out.write(0, truth[["u"]].isel(sample=slice(0, 3)))
            raise RuntimeError("model diverged")
    assert list(tmp_path.iterdir()) == []


def test_error_keeps_existing_file(tmp_path):
    truth = _truth()
    path = tmp_path / "pred.nc"
    _write_in_batches(path, truth, [0, 7])
    before = path.read_bytes()
    with pytest.raises(RuntimeError, match="interrupted"):
        with PredictionWriter(path, truth[["u"]], ["u"], n_samples=7) as out:
            out.write(0, truth[["u"]].isel(sample=slice(0, 2)) * 0)
            raise RuntimeError("interrupted")
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["pred.nc"]


def test_incomplete_file_and_bad_batches(tmp_path):
    truth = _truth()
    path = tmp_path / "pred.nc"
    with pytest.raises(ValueError, match="expected all 7 samples written; 4 missing \\(first 3\\)"):
        with PredictionWriter(path, truth[["u"]], ["u"], n_samples=7) as out:
            out.write(0, truth[["u"]].isel(sample=slice(0, 3)))
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(ValueError, match=r"write: expected samples \[start, start \+ 3\) within \[0, 7\)"):
        with PredictionWriter(path, truth[["u"]], ["u"], n_samples=7) as out:
            out.write(5, truth[["u"]].isel(sample=slice(0, 3)))
    with pytest.raises(ValueError, match="'u' expected dims"):
        with PredictionWriter(path, truth[["u"]], ["u"], n_samples=7) as out:
            out.write(0, truth[["u"]].isel(x=slice(0, 3)))
    with pytest.raises(ValueError, match="expected data variables of `like`"):
        PredictionWriter(path, truth, ["v"], n_samples=7)
    with pytest.raises(RuntimeError, match="inside its `with` block"):
        PredictionWriter(path, truth, ["u"], n_samples=7).write(0, truth)
    assert list(tmp_path.iterdir()) == []


def test_a_pdebench_template_writes_without_warnings(tmp_path):
    """h5py reports dtypes with an explicit byte order ('<f4'); the file is created in native order, with no
    netCDF4 endian warning (it was printed by every evaluate --run on a PDEBench file)."""
    import warnings

    ds = xr.Dataset({"h": (("sample", "time", "x", "y"), np.random.default_rng(0).random((3, 2, 4, 4), dtype="f4"))})
    path = pde_data.write_pdebench(ds, tmp_path / "rdb.h5", layout="rdb")
    like = pde_data.open_source(path).dataset[["h"]].isel(sample=[0])
    assert like.h.dtype.byteorder == "<"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pde_data.PredictionWriter(tmp_path / "pred.nc", like, ["h"], 1) as out:
            out.write(0, like.load(), sample_ids=[0])
    np.testing.assert_array_equal(pde_data.open_source(tmp_path / "pred.nc").dataset.h.values, like.h.values)
