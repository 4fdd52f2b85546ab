"""circuitop.apply: cells and blocks on xarray sequences and fields, coordinates kept, dt from time."""

import numpy as np
import pytest
import torch
import xarray as xr

from circuitop import (
    CascadedKirchhoffBlock,
    CascadedKirchhoffBlock1d,
    CascadedKirchhoffBlock2d,
    KirchhoffCell,
    apply,
)
from pde_data.core.model import from_tensor, time_steps, to_tensor


def _sequence(times, n_feature=3, seed=0):
    rng = np.random.default_rng(seed)
    n_sample, n_time = (times.shape[0], times.shape[1]) if times.ndim == 2 else (2, times.size)
    data = rng.standard_normal((n_sample, n_time, n_feature))
    time = (("sample", "time"), times) if times.ndim == 2 else ("time", times)
    return xr.DataArray(
        data, dims=("sample", "time", "feature"), coords={"time": time, "feature": ["a", "b", "c"][:n_feature]},
        attrs={"units": "1"}, name="signal",
    )


def _field(with_time=False, seed=0):
    rng = np.random.default_rng(seed)
    dims = ("sample", "time", "x", "y") if with_time else ("sample", "x", "y")
    shape = (2, 3, 6, 5) if with_time else (2, 6, 5)
    coords = {"x": np.linspace(0, 1, 6), "y": np.linspace(0, 1, 5)}
    if with_time:
        coords["time"] = [0.0, 0.5, 1.0]
    return xr.Dataset(
        {"u": (dims, rng.standard_normal(shape)), "v": (dims, rng.standard_normal(shape))}, coords=coords
    )


def test_sequence_uses_dt_from_irregular_time_coordinate():
    torch.manual_seed(0)
    cell = KirchhoffCell(3, d_state=4).double()
    times = np.cumsum(np.random.default_rng(1).uniform(0.1, 2.0, (2, 12)), axis=1)
    seq = _sequence(times)
    out = apply(cell, seq)
    assert isinstance(out, xr.DataArray) and out.dims == seq.dims
    xr.testing.assert_identical(out.coords.to_dataset(), seq.coords.to_dataset())
    x = to_tensor(seq, dtype=torch.float64)
    expected = cell(x, time_steps(seq, dtype=torch.float64))
    np.testing.assert_allclose(out.values, expected.detach().numpy(), rtol=1e-12)
    assert not np.allclose(out.values, cell(x).detach().numpy())  # the time coordinate mattered
    np.testing.assert_allclose(apply(cell, seq, use_time=False).values, cell(x).detach().numpy(), rtol=1e-12)


def test_regular_unit_steps_equal_no_time_information():
    torch.manual_seed(0)
    block = CascadedKirchhoffBlock(3, order=2, d_state=4).double()
    seq = _sequence(np.arange(10.0))
    x = to_tensor(seq, dtype=torch.float64)
    np.testing.assert_allclose(apply(block, seq).values, block(x).detach().numpy(), rtol=1e-12)


def test_field_dataset_keeps_variables_and_coordinates():
    torch.manual_seed(0)
    block = CascadedKirchhoffBlock2d(2, order=2, d_state=4)
    field = _field()
    out = apply(block, field)
    assert isinstance(out, xr.Dataset) and list(out.data_vars) == ["u", "v"]
    xr.testing.assert_identical(out.coords.to_dataset(), field.coords.to_dataset())
    expected = from_tensor(block(to_tensor(field)).detach(), field)
    xr.testing.assert_allclose(out, expected)


def test_field_with_time_maps_each_frame():
    torch.manual_seed(0)
    block = CascadedKirchhoffBlock2d(2, order=1, d_state=4)
    field = _field(with_time=True)
    out = apply(block, field)
    assert out["u"].dims == ("sample", "time", "x", "y")
    frame = field.isel(time=1).drop_vars("time")
    xr.testing.assert_allclose(out.isel(time=1).drop_vars("time"), apply(block, frame), rtol=1e-5, atol=1e-6)


def test_one_dimensional_field_on_s():
    torch.manual_seed(0)
    data = xr.DataArray(np.random.default_rng(0).standard_normal((3, 16)), dims=("sample", "s"), name="x")
    out = apply(CascadedKirchhoffBlock1d(1, order=2, d_state=4), data)
    assert out.dims == ("sample", "s") and out.shape == (3, 16)


def test_channel_changing_module_is_refused():
    seq = _sequence(np.arange(5.0))
    with pytest.raises(ValueError, match="channels to channels|expected shape"):
        apply(torch.nn.Linear(3, 2).double(), seq)


def test_bad_time_coordinate_is_refused():
    cell = KirchhoffCell(3, d_state=2).double()
    with pytest.raises(ValueError, match="time"):
        apply(cell, _sequence(np.array([0.0, 1.0, 1.0, 2.0])))
