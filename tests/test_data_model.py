"""The xarray <-> torch adapter and the NetCDF round trip."""

import numpy as np
import pytest
import torch
import xarray as xr

import pde_data
from pde_data import model


def _field_dataset(n=3, nt=4, nx=8, ny=6, seed=0):
    rng = np.random.default_rng(seed)
    t = np.sort(rng.uniform(0, 5, (n, nt)), axis=1) + np.arange(nt) * 1e-3
    return xr.Dataset(
        {
            "h": (("sample", "time", "x", "y"), rng.standard_normal((n, nt, nx, ny))),
            "hu": (("sample", "time", "x", "y"), rng.standard_normal((n, nt, nx, ny))),
        },
        coords={
            "x": ("x", (np.arange(nx) + 0.5) / nx, {"grid": "cell centres", "units": "m"}),
            "y": ("y", (np.arange(ny) + 0.5) / ny, {"grid": "cell centres", "units": "m"}),
            "time": (("sample", "time"), t, {"units": "s", "long_name": "time"}),
        },
        attrs={"problem": "test", "seed": 7, "Conventions": "CF-1.8"},
    )


def test_field_round_trip_through_tensor():
    ds = _field_dataset()
    tensor = model.to_tensor(ds)
    assert tensor.shape == (3, 4, 2, 8, 6)
    assert torch.equal(tensor[:, :, 1], torch.as_tensor(ds.hu.values, dtype=torch.float32))
    back = model.from_tensor(tensor.double(), ds)
    xr.testing.assert_allclose(back, ds.astype(np.float64))


def test_steady_field_layout_is_batch_channels_x_y():
    ds = _field_dataset().isel(time=0, drop=True)
    assert model.to_tensor(ds, ["hu"]).shape == (3, 1, 8, 6)
    da = ds.h.transpose("y", "sample", "x")  # any dim order in, canonical order out
    assert torch.equal(model.to_tensor(da)[:, 0], torch.as_tensor(ds.h.values, dtype=torch.float32))


def test_sequence_layout_and_time_steps():
    t = np.array([[0.0, 0.5, 1.5, 1.75], [0.0, 1.0, 2.0, 3.0]])
    da = xr.DataArray(np.arange(24.0).reshape(2, 4, 3), dims=("sample", "time", "feature"),
                      coords={"time": (("sample", "time"), t)})
    assert model.family_of(da) == "sequence"
    x = model.to_tensor(da)
    assert x.shape == (2, 4, 3)
    back = model.from_tensor(x.double(), da)
    xr.testing.assert_identical(back, da)
    dt = model.time_steps(da, dtype=torch.float64)
    assert torch.allclose(dt, torch.tensor([[0.5, 0.5, 1.0, 0.25], [1.0, 1.0, 1.0, 1.0]], dtype=torch.float64))
    assert torch.allclose(model.time_steps(da, origin=-1.0)[:, 0], torch.tensor([1.0, 1.0]))


def test_time_steps_refuse_non_increasing_time():
    da = xr.DataArray(np.zeros((1, 3)), dims=("sample", "time"), coords={"time": ("time", [0.0, 1.0, 1.0])})
    with pytest.raises(ValueError, match="increase strictly"):
        model.time_steps(da)


def test_missing_dims_are_named():
    with pytest.raises(ValueError, match=r"expected a 'sample' dim.*\('a', 'b'\)"):
        model.family_of(xr.DataArray(np.zeros((2, 2)), dims=("a", "b")))
    with pytest.raises(ValueError, match="missing \\['nope'\\]"):
        model.to_tensor(_field_dataset(), ["nope"])


def test_netcdf_round_trip_is_identical(tmp_path):
    ds = _field_dataset()
    path = pde_data.save(ds, tmp_path / "set.nc")
    with pde_data.open_source(path).dataset as back:
        xr.testing.assert_identical(back.load(), ds)


def test_interrupted_save_leaves_no_file(tmp_path, monkeypatch):
    ds = _field_dataset()
    target = tmp_path / "set.nc"

    def boom(self, *args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(xr.Dataset, "to_netcdf", boom)
    with pytest.raises(KeyboardInterrupt):
        pde_data.save(ds, target)
    assert list(tmp_path.iterdir()) == []


def test_save_replaces_existing_file_atomically(tmp_path):
    target = tmp_path / "set.nc"
    pde_data.save(_field_dataset(seed=1), target)
    pde_data.save(_field_dataset(seed=2), target)
    with pde_data.open_source(target).dataset as back:
        xr.testing.assert_identical(back.load(), _field_dataset(seed=2))
    assert [p.name for p in tmp_path.iterdir()] == ["set.nc"]


def test_open_refuses_missing_and_foreign_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such file"):
        pde_data.open_source(tmp_path / "absent.nc").dataset
    (tmp_path / "text.nc").write_text("hello")
    with pytest.raises(ValueError, match="text.nc: expected a NetCDF, HDF5 .*, found leading bytes b.hello."):
        pde_data.open_source(tmp_path / "text.nc").dataset


def test_shards_open_lazily_as_one_dataset(tmp_path):
    ds = _field_dataset(n=5)
    for i, part in enumerate((slice(0, 2), slice(2, 5))):
        pde_data.save(ds.isel(sample=part), tmp_path / f"set-{i:05d}.nc")
    combined = pde_data.open_source(str(tmp_path / "set-*.nc")).dataset
    assert combined.h.chunks is not None  # dask-backed, not loaded
    xr.testing.assert_allclose(combined.load(), ds)


def test_atomic_files_get_default_permissions(tmp_path):
    import os

    path = pde_data.save(_field_dataset(), tmp_path / "set.nc")
    mask = os.umask(0)
    os.umask(mask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~mask
