"""Fingerprints name a data source by its content, not its path, and survive JSON and checkpoints."""

import json
import shutil

import numpy as np
import pytest
import torch
import xarray as xr

import pde_data
from pde_data import Fingerprint, fingerprint

DIMS = ("sample", "time", "x", "y")


def _data(n=5, t=4, nx=6, ny=3, seed=0) -> xr.Dataset:
    rng = np.random.default_rng(seed)
    return xr.Dataset(
        {"u": (DIMS, rng.standard_normal((n, t, nx, ny)).astype(np.float32)),
         "a": (("sample", "x", "y"), rng.uniform(size=(n, nx, ny)))},
        coords={"sample": np.arange(n), "time": np.linspace(0.0, 1.0, t),
                "x": (np.arange(nx) + 0.5) / nx, "y": (np.arange(ny) + 0.5) / ny})


def _fingerprint_of(path) -> Fingerprint:
    with pde_data.open_source(path).dataset as ds:
        return fingerprint(ds)


def test_copy_has_equal_fingerprint(tmp_path):
    path = pde_data.save(_data(), tmp_path / "one" / "data.nc")
    (tmp_path / "two").mkdir()
    copy = shutil.copy(path, tmp_path / "two" / "renamed.nc")
    first, second = _fingerprint_of(path), _fingerprint_of(copy)
    assert first == second and first.differences(second) == []
    assert first.format == "netcdf"
    assert first.sizes == (("sample", 5), ("time", 4), ("x", 6), ("y", 3))
    assert first.dtypes == (("a", "float64"), ("u", "float32"))
    assert len(first.digest) == 64


def test_changed_value_in_sample_zero_is_named(tmp_path):
    ds = _data()
    changed = ds.copy(deep=True)
    changed["u"][0, 0, 2, 1] += 1e-3
    fp, other = _fingerprint_of(pde_data.save(ds, tmp_path / "a.nc")), _fingerprint_of(
        pde_data.save(changed, tmp_path / "b.nc"))
    assert fp != other
    assert fp.differences(other) == ["content of sample slices differs"]


def test_sample_count_and_dtype_are_named(tmp_path):
    fp = fingerprint(_data())
    fewer = fingerprint(_data(n=3))
    assert fp.differences(fewer) == ["sizes: sample 5 vs 3"]
    wider = _data()
    wider["u"] = wider["u"].astype(np.float64)
    assert fp.differences(fingerprint(wider)) == ["dtypes: u float32 vs float64"]
    assert fp.differences(fingerprint(_data().drop_vars("a"))) == ["dtypes: a float64 vs absent"]
    relabelled = _data().assign_attrs(source_format="pdebench:darcy")
    assert fp.differences(fingerprint(relabelled)) == ["format: netcdf vs pdebench:darcy"]


def test_values_outside_the_slices_do_not_count():
    """A value outside samples 0, n//2, n-1 and outside the first frame does not change the digest."""
    ds = _data(n=5)
    elsewhere = ds.copy(deep=True)
    elsewhere["u"][1] += 1.0
    elsewhere["u"][0, 1:] += 1.0
    assert fingerprint(ds) == fingerprint(elsewhere)
    moved = ds.assign_coords(x=ds.x + 1.0)
    assert fingerprint(ds).differences(fingerprint(moved)) == ["content of sample slices differs"]


def test_state_round_trip_json_and_checkpoint(tmp_path):
    fp = fingerprint(_data())
    state = fp.to_state()
    assert Fingerprint.from_state(json.loads(json.dumps(state))) == fp
    torch.save({"data_fingerprint": state}, tmp_path / "ckpt.pt")
    back = torch.load(tmp_path / "ckpt.pt", weights_only=True)["data_fingerprint"]
    assert Fingerprint.from_state(back) == fp
    with pytest.raises(ValueError, match=r"expected keys .*; missing \['digest'\]"):
        Fingerprint.from_state({k: v for k, v in state.items() if k != "digest"})
    with pytest.raises(ValueError, match="expected 'sizes' and 'dtypes' as lists of"):
        Fingerprint.from_state({**state, "sizes": [["sample"]]})
