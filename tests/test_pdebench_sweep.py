"""A glob of PDEBench files that differ in a parameter (``1D_Advection_Sols_beta*.hdf5``) opens as one lazy Dataset
with the parameter per sample, values as each file's own; bad sweeps get one line; The Well's simulation parameters
and scalars are parameters too."""

import pickle

import h5py
import numpy as np
import pytest
import torch

import pde_data
from pde_data import open_source, parameters_of
from pde_data.core.model import PARAMETER, ROLE
from pde_data.formats.h5lazy import file_stamp, open_file
from pde_data.formats.sweep import name_values, open_sweep
from cli_run import run_cli
from h5_reads import counting_reads

F32 = np.float32
NT, NX = 4, 16
BETAS = {"0.1": 2, "0.4": 3, "1.0": 2}  # the files' beta (as named) and their samples


def _write_1d(path, n, *, seed=0, nx=NX, x=None, **attrs):
    """A PDEBench 1D file: ``tensor`` (sample, time, x), ``x-coordinate`` (x,), ``t-coordinate`` (time + 1,)."""
    rng = np.random.default_rng(seed)
    tensor = rng.standard_normal((n, NT, nx)).astype(F32)
    with h5py.File(path, "w") as f:
        f.create_dataset("tensor", data=tensor)
        f.create_dataset("x-coordinate", data=((np.arange(nx) + 0.5) / nx).astype(F32) if x is None else x)
        f.create_dataset("t-coordinate", data=np.linspace(0, 1, NT + 1).astype(F32))
        f.attrs.update(attrs)
    return tensor


@pytest.fixture
def sweep(tmp_path):
    """Three advection files ``adv_beta{0.1,0.4,1.0}.hdf5``: ``(glob, [each file's tensor])``."""
    tensors = [_write_1d(tmp_path / f"adv_beta{beta}.hdf5", n, seed=k) for k, (beta, n) in enumerate(BETAS.items())]
    return str(tmp_path / "adv_beta*.hdf5"), tensors


def test_name_tokens_are_keys_and_values():
    assert name_values("1D_Advection_Sols_beta0.4.hdf5") == {"beta": 0.4}
    assert name_values("ReacDiff_Nu0.5_Rho1.0.hdf5") == {"Nu": 0.5, "Rho": 1.0}
    assert name_values("2D_CFD_Rand_M0.1_Eta0.01_Zeta1e-08_periodic_128_Train.hdf5") == {
        "M": 0.1, "Eta": 0.01, "Zeta": 1e-08}


def test_a_glob_opens_as_one_sweep_with_beta_per_sample(sweep):
    pattern, tensors = sweep
    with open_source(pattern) as source:
        ds = source.dataset
        assert source.format == "pdebench-sweep:1d" and source.path == pattern
        assert parameters_of(ds) == ("beta",) and ds["beta"].dtype == np.float64
        assert ds["beta"].attrs[ROLE] == PARAMETER
        np.testing.assert_array_equal(ds["beta"].values, [0.1, 0.1, 0.4, 0.4, 0.4, 1.0, 1.0])
        np.testing.assert_array_equal(ds["u"].values, np.concatenate(tensors))
        assert ds.sizes == {"sample": 7, "time": NT, "x": NX}
        samples = [6, 0, 3, 3, 1]  # across files, out of order, a repeat
        whole = np.concatenate(tensors)
        torch.testing.assert_close(source.read(["u"], samples, slice(1, 3)),
                                   torch.from_numpy(whole[samples, 1:3, None]))
        for (beta, _), start in zip(BETAS.items(), (0, 2, 5)):  # each sample as the file alone reads it
            with open_source(pattern.replace("*", beta)) as alone:
                assert parameters_of(alone.dataset) == ()
                torch.testing.assert_close(source.read(["u"], [start + 1], slice(0, 2)),
                                           alone.read(["u"], [1], slice(0, 2)))


def test_the_sweep_pickles_into_a_worker_and_reads_the_same(sweep):
    pattern, tensors = sweep
    source = open_source(pattern)
    copy = pickle.loads(pickle.dumps(source))  # reopened by its path, as in a DataLoader worker
    assert copy.format == source.format
    torch.testing.assert_close(copy.read(["u"], [4, 5]), source.read(["u"], [4, 5]))
    copy.close()
    source.close()


def test_opening_reads_no_samples_and_a_read_only_its_own(sweep, monkeypatch):
    pattern, tensors = sweep
    counts = counting_reads(monkeypatch)
    ds = open_source(pattern).dataset
    assert set(counts) <= {NX, NT + 1}  # the coordinates only
    counts.clear()
    values = ds["u"].isel(sample=[1, 5]).values  # one sample of the first and one of the last file
    assert counts == [NT * NX, NT * NX]
    np.testing.assert_array_equal(values, np.stack([tensors[0][1], tensors[2][0]]))
    ds.close()


def test_probing_a_glob_leaves_a_file_open_alone_open(sweep, tmp_path):
    pattern, tensors = sweep
    path = str(tmp_path / "adv_beta0.4.hdf5")
    with open_source(path) as alone:
        handle = open_file(path, file_stamp(path))
        open_source(pattern).close()
        assert handle.id.valid  # the glob's probe released its own holds only
        np.testing.assert_array_equal(alone.dataset["u"].values, tensors[1])


def test_a_file_attribute_wins_over_its_name(tmp_path):
    _write_1d(tmp_path / "adv_beta0.1.hdf5", 2)
    _write_1d(tmp_path / "adv_beta0.4.hdf5", 1, beta=0.5)
    _write_1d(tmp_path / "run_a.hdf5", 1, nu=0.25)  # no tokens: the attribute alone
    _write_1d(tmp_path / "run_b.hdf5", 2, nu=0.75)
    with open_source(tmp_path / "adv_beta*.hdf5") as source:
        np.testing.assert_array_equal(source.dataset["beta"].values, [0.1, 0.1, 0.5])
        assert "beta" not in source.dataset.attrs
    with open_source(tmp_path / "run_*.hdf5") as source:
        assert parameters_of(source.dataset) == ("nu",)
        np.testing.assert_array_equal(source.dataset["nu"].values, [0.25, 0.75, 0.75])


def test_a_list_of_files_opens_as_a_sweep(sweep, tmp_path):
    _, tensors = sweep
    ds = open_sweep([tmp_path / "adv_beta1.0.hdf5", tmp_path / "adv_beta0.1.hdf5"])  # the order given
    np.testing.assert_array_equal(ds["beta"].values, [1.0, 1.0, 0.1, 0.1])
    np.testing.assert_array_equal(ds["u"].values, np.concatenate([tensors[2], tensors[0]]))
    ds.close()


def test_one_matching_file_is_that_file(tmp_path):
    tensor = _write_1d(tmp_path / "adv_beta0.1.hdf5", 2)
    with open_source(tmp_path / "adv_*.hdf5") as source:
        assert source.format == "pdebench:1d" and parameters_of(source.dataset) == ()
        np.testing.assert_array_equal(source.read(["u"], [1]).numpy()[0], tensor[1][:, None])


def _one_line(err: pytest.ExceptionInfo, *fragments: str) -> None:
    text = str(err.value)
    assert "\n" not in text, text
    for fragment in fragments:
        assert fragment in text, text


def test_files_that_differ_beyond_their_samples_are_named(tmp_path):
    _write_1d(tmp_path / "adv_beta0.1.hdf5", 2)
    _write_1d(tmp_path / "adv_beta0.4.hdf5", 2, nx=8)
    with pytest.raises(ValueError) as err:
        open_source(tmp_path / "adv_beta*.hdf5")
    _one_line(err, "adv_beta0.1.hdf5 and ", "adv_beta0.4.hdf5", "expected the same variables and shapes",
              "'u'", "'x': 16", "'x': 8")
    _write_1d(tmp_path / "adv_beta0.4.hdf5", 2, x=np.linspace(0, 1, NX).astype(F32))
    with pytest.raises(ValueError) as err:
        open_source(tmp_path / "adv_beta*.hdf5")
    _one_line(err, "adv_beta0.4.hdf5", "coordinate 'x' values differ")


def test_a_glob_mixing_formats_is_refused(tmp_path):
    _write_1d(tmp_path / "adv_beta0.1.hdf5", 2)
    with open_source(tmp_path / "adv_beta0.1.hdf5") as source:
        pde_data.save(source.dataset.load(), tmp_path / "adv_beta0.4.hdf5")  # a NetCDF file
    with pytest.raises(ValueError) as err:
        open_source(tmp_path / "adv_beta*.hdf5")
    _one_line(err, "expected files of one format", "adv_beta0.1.hdf5 (PDEBench)", "adv_beta0.4.hdf5 (netcdf)")


@pytest.mark.parametrize("names", [("adv_beta0.1_a.hdf5", "adv_beta0.1_b.hdf5"), ("first.hdf5", "second.hdf5")])
def test_a_sweep_without_a_parameter_is_refused(tmp_path, names):
    for name in names:
        _write_1d(tmp_path / name, 2)
    with pytest.raises(ValueError) as err:
        open_source(tmp_path / "*.hdf5")
    _one_line(err, "a sweep needs a value per file", "names like 'beta0.4'")


def test_netcdf_shards_still_open_as_netcdf(sweep, tmp_path):
    pattern, tensors = sweep
    with open_source(pattern) as source:
        ds = source.dataset.load()
    for i in range(2):
        pde_data.save(ds.isel(sample=slice(3 * i, 3 * i + 3)), tmp_path / f"set-{i}.nc")
    with open_source(tmp_path / "set-*.nc") as source:
        assert source.format == "netcdf" and parameters_of(source.dataset) == ("beta",)
        np.testing.assert_array_equal(source.dataset["u"].values, np.concatenate(tensors)[:6])


def test_info_lists_the_sweeps_parameter(sweep):
    pattern, _ = sweep
    proc = run_cli("info", pattern)
    assert proc.returncode == 0, proc.stderr
    assert "format: pdebench-sweep:1d" in proc.stdout
    assert "parameter beta: ('sample',), from 0.1 to 1" in proc.stdout


def test_the_wells_parameters_and_scalars_are_parameters(tmp_path):
    n, nt, w, h = 3, 2, 4, 5
    density = np.random.default_rng(0).normal(size=(n, nt, w, h)).astype(F32)
    path = pde_data.write_well(tmp_path / "flow.hdf5", fields={"density": density}, time=np.arange(nt),
                               coords={"x": np.arange(w), "y": np.arange(h)}, parameters={"Reynolds": 100.0},
                               scalars={"Reynolds": 5.0, "Schmidt": 2.0, "viscosity": [0.1, 0.2, 0.3],
                                        "density": 1.0, "label": [1.0, 2.0]})
    with open_source(path) as source:
        ds = source.dataset
        assert parameters_of(ds) == ("Reynolds", "Schmidt", "viscosity")  # density is a field; label not per sample
        assert ds["Reynolds"].dims == ("sample",) and ds["Reynolds"].dtype == np.float64
        np.testing.assert_array_equal(ds["Reynolds"].values, [100.0] * n)  # the simulation parameter first
        np.testing.assert_array_equal(ds["Schmidt"].values, [2.0] * n)
        np.testing.assert_array_equal(ds["viscosity"].values, [0.1, 0.2, 0.3])
        np.testing.assert_array_equal(ds["density"].values, density)
        assert ds.attrs["Reynolds"] == 100.0  # the attributes as before
        assert ds.attrs["well_scalars"] == ["Reynolds", "Schmidt", "viscosity", "density", "label"]
