"""The Well's HDF5 format: files written by ``pde_data.write_well`` (checked against The Well's format
documentation, ``docs/specs/data.md``) read back through the one opener, scalar, vector and tensor fields
as per-component variables; ``stats.yaml`` normalizes a run; bad files get one line; a one-epoch
train and evaluate run on one."""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

import pde_data
from operators.training import load_run
from cli_run import run_cli as _cli, evaluation_dir

RNG = np.random.default_rng(0)
B, T, W, H = 10, 5, 8, 6
RHO = RNG.normal(size=(B, T, W, H)).astype(np.float32)
VEL = RNG.normal(size=(B, T, W, H, 2)).astype(np.float32)
STRESS = RNG.normal(size=(B, T, W, H, 2, 2)).astype(np.float32)
STATS = {"mean": {"density": 0.5, "velocity": [0.1, -0.2]}, "std": {"density": 2.0, "velocity": [1.5, 3.0]}}


def _write(path: Path, **extra) -> Path:
    return pde_data.write_well(path, fields={"density": RHO, "velocity": VEL, "stress": STRESS},
                               time=np.arange(T) * 0.25, coords={"x": np.linspace(0, 1, W), "y": np.linspace(0, 2, H)},
                               dataset_name="test_flow", parameters={"Reynolds": 100.0}, **extra)


def test_the_writer_follows_the_format(tmp_path):
    path = _write(tmp_path / "flow.hdf5", stats=STATS)
    with pytest.raises(FileExistsError, match="pass overwrite=True"):  # nothing is replaced without the flag
        _write(path)
    path.unlink()
    with pytest.raises(FileExistsError, match="stats.yaml"):  # nor the statistics beside it
        _write(path, stats=STATS)
    _write(path, stats=STATS, overwrite=True)
    with h5py.File(path, "r") as f:
        assert {"dimensions", "boundary_conditions", "scalars", "t0_fields", "t1_fields", "t2_fields"} <= set(f)
        assert f.attrs["n_spatial_dims"] == 2 and f.attrs["n_trajectories"] == B
        assert list(f.attrs["simulation_parameters"]) == ["Reynolds"] and f.attrs["Reynolds"] == 100.0
        assert list(f["dimensions"].attrs["spatial_dims"]) == ["x", "y"] and f["dimensions/time"].shape == (T,)
        assert list(f["t1_fields"].attrs["field_names"]) == ["velocity"]
        assert f["t1_fields/velocity"].shape == (B, T, W, H, 2) and f["t2_fields/stress"].shape == (B, T, W, H, 2, 2)
        d = f["t0_fields/density"]
        assert bool(d.attrs["sample_varying"]) and bool(d.attrs["time_varying"]) and list(d.attrs["dim_varying"]) == [True, True]


def _is_bool(value) -> bool:
    return isinstance(value, (bool, np.bool_))


def _names(attr) -> list:
    assert isinstance(attr, (list, np.ndarray)), f"expected a list of names, found {attr!r}"
    return list(attr)


def test_the_file_has_what_the_wells_reader_reads(tmp_path):
    """Our writer's file against The Well's reader without installing it: every attribute, group and shape
    that ``the_well.data.WellDataset`` reads (its file scan in ``__init__``, ``_reconstruct_fields``,
    ``_reconstruct_grids``), of the types its format checker (``scripts/check_thewell_formatting.py``) asks
    for, and the component order in which it flattens vector and tensor fields into channels."""
    path = _write(tmp_path / "flow.hdf5")
    with h5py.File(path, "r") as f:
        assert isinstance(f.attrs["dataset_name"], str) and f.attrs["grid_type"] in ("cartesian", "spherical")
        n_dims, n_traj = f.attrs["n_spatial_dims"], f.attrs["n_trajectories"]
        assert isinstance(n_dims, (int, np.integer)) and isinstance(n_traj, (int, np.integer))
        assert (n_dims, n_traj) == (2, B)
        for name in _names(f.attrs["simulation_parameters"]):
            assert isinstance(name, str) and name in f.attrs
        # dimensions: spatial_dims names one coordinate dataset each; the last axis of time counts the steps
        spatial = _names(f["dimensions"].attrs["spatial_dims"])
        assert spatial == ["x", "y"] and all(isinstance(d, str) for d in spatial)
        time = f["dimensions/time"]
        assert time.shape == (T,) and time.dtype == np.float32
        assert _is_bool(time.attrs["sample_varying"]) and not time.attrs["sample_varying"]  # else read per sample
        sizes = []
        for dim in spatial:
            coord = f["dimensions"][dim]
            assert coord.ndim == 1 and coord.dtype == np.float32
            assert all(_is_bool(coord.attrs[a]) and not coord.attrs[a] for a in ("sample_varying", "time_varying"))
            sizes.append(coord.shape[-1])
        assert sizes == [W, H]
        assert isinstance(f["boundary_conditions"], h5py.Group)  # the reader walks its subgroups
        assert _names(f["scalars"].attrs["field_names"]) == []
        # field groups: every listed field is a dataset shaped by its varying flags, D per tensor index
        written = {"t0_fields": ["density"], "t1_fields": ["velocity"], "t2_fields": ["stress"]}
        for order, group in enumerate(("t0_fields", "t1_fields", "t2_fields")):
            listed = _names(f[group].attrs["field_names"])
            assert listed == written[group] and sorted(f[group]) == sorted(listed)
            for name in listed:
                field = f[group][name]
                flags = {a: field.attrs[a] for a in ("sample_varying", "time_varying")}
                assert all(_is_bool(v) for v in flags.values()) and all(flags.values())
                dim_varying = field.attrs["dim_varying"]
                assert len(dim_varying) == n_dims and all(_is_bool(v) for v in dim_varying)
                spatial_sizes = [n for n, used in zip(sizes, dim_varying) if used]
                expected = (n_traj, T, *spatial_sizes, *[n_dims] * order)
                assert field.shape == expected and field.dtype == np.float32
        # channels come out as field_{ij} over itertools.product(spatial_dims, repeat=order): row-major
        np.testing.assert_array_equal(f["t0_fields/density"][3], RHO[3])
        np.testing.assert_array_equal(f["t1_fields/velocity"][..., 1], VEL[..., 1])
        np.testing.assert_array_equal(f["t2_fields/stress"][..., 0, 1], STRESS[..., 0, 1])
        np.testing.assert_array_equal(f["t2_fields/stress"][..., 1, 0], STRESS[..., 1, 0])


def test_round_trip_of_scalar_vector_and_tensor_fields(tmp_path):
    source = pde_data.open_source(_write(tmp_path / "flow.hdf5", stats=STATS))
    ds = source.dataset
    assert source.format == "the-well" and ds.attrs["well_dataset_name"] == "test_flow"
    fields = ["density", "velocity_x", "velocity_y", "stress_xx", "stress_xy", "stress_yx", "stress_yy"]
    assert list(ds.data_vars) == fields + ["Reynolds"] and pde_data.parameters_of(ds) == ("Reynolds",)
    assert ds["density"].dims == ("sample", "time", "x", "y")
    np.testing.assert_array_equal(ds["density"].values, RHO)
    np.testing.assert_array_equal(ds["velocity_y"].isel(sample=3).values, VEL[3, ..., 1])
    np.testing.assert_array_equal(ds["stress_yx"].isel(time=2).values, STRESS[:, 2, ..., 1, 0])
    np.testing.assert_allclose(ds["time"].values, np.arange(T) * 0.25)
    stats = source.stats()
    assert stats["velocity_y"] == {"mean": -0.2, "std": 3.0} and stats["density"] == {"mean": 0.5, "std": 2.0}
    norm = pde_data.normalizer_from_stats(source, ["density", "velocity_x"])
    assert norm.shift.flatten().tolist() == pytest.approx([0.5, 0.1]) and norm.scale.shape == (2, 1, 1)
    assert pde_data.normalizer_from_stats(source, ["stress_xx"]) is None  # no statistics: fitted on the data


def test_a_flattened_tensor_field_reads_by_component(tmp_path):
    path = tmp_path / "flat.hdf5"
    # written as a 4-component vector, then moved to t2_fields: the (D, D) components as one trailing axis
    # of D² = 4, as The Well's format document writes it
    pde_data.write_well(path, fields={"density": RHO, "stress": STRESS.reshape(B, T, W, H, 4)}, time=np.arange(T),
                        coords={"x": np.arange(W), "y": np.arange(H)})
    with h5py.File(path, "r+") as f:
        data = f["t1_fields/stress"][()]
        del f["t1_fields/stress"]
        f["t1_fields"].attrs["field_names"] = []
        f["t2_fields"].create_dataset("stress", data=data).attrs.update(
            {"dim_varying": [True, True], "sample_varying": True, "time_varying": True})
        f["t2_fields"].attrs["field_names"] = ["stress"]
    ds = pde_data.open_source(path).dataset
    np.testing.assert_array_equal(ds["stress_xy"].values, STRESS[..., 0, 1])


def test_a_well_file_without_field_groups_gets_one_line(tmp_path):
    path = _write(tmp_path / "flow.hdf5")
    with h5py.File(path, "r+") as f:
        del f["t0_fields"]
    proc = _cli("info", path)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "expected The Well's groups t0_fields, t1_fields, t2_fields" in lines[0], proc.stderr


@pytest.mark.slow
def test_train_and_evaluate_on_a_well_file_normalized_by_its_stats(tmp_path):
    data = _write(tmp_path / "flow.hdf5", stats=STATS)
    run = tmp_path / "run"
    train = _cli("train", "--data", data, "--model", "fno", "--out", run, "--window", "2", "--input", "density",
                 "velocity_x", "velocity_y", "--epochs", "1", "--threads", "1", "--no-progress", "--workers", "0",
                 "--split", "6,2,2", "--config", "width=8", "n_modes=3", "n_layers=2")
    assert train.returncode == 0, train.stderr[-2000:]
    norm = load_run(run).task.normalizers.input
    torch.testing.assert_close(norm.shift.flatten(), torch.tensor([0.5, 0.1, -0.2]))
    torch.testing.assert_close(norm.scale.flatten(), torch.tensor([2.0, 1.5, 3.0]) + 1e-8)
    evaluate = _cli("evaluate", "--run", run, "--data", data, "--steps", "2")
    assert evaluate.returncode == 0, evaluate.stderr[-2000:]
    metrics = json.loads((evaluation_dir(run, data) / "metrics.json").read_text())
    assert "VRMSE" in json.dumps(metrics)


def test_the_wells_own_reader_reads_our_writers_file(tmp_path):
    """The Well's ``WellDataset`` reads a file written by ``pde_data.write_well``, fields in the same order and
    values. ``make install`` installs the_well (``pip install --no-deps the-well``, einops from the test extra),
    so this runs in CI: a missing the_well fails here instead of skipping."""
    import the_well.data as well
    _write(tmp_path / "flow.hdf5")
    ds = well.WellDataset(path=str(tmp_path), n_steps_input=2, n_steps_output=1, use_normalization=False)
    item = ds[0]  # the first window of the first trajectory: channels density, velocity_x, velocity_y, stress_..
    assert item["input_fields"].shape == (2, W, H, 1 + 2 + 4)
    np.testing.assert_allclose(item["input_fields"][0, ..., 0].numpy(), RHO[0, 0])
    np.testing.assert_allclose(item["input_fields"][1, ..., 2].numpy(), VEL[0, 1, ..., 1])
