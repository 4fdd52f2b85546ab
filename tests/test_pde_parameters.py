"""PDE parameters per sample in the data model (issue 44): marked variables of dims ``(sample,)`` or
``(sample, time)``, listed by ``circuitop info`` with their range, and never taken as a run's input or target."""

import numpy as np
import pytest
import torch
import xarray as xr

import pde_data
from operators.cli import main
from operators.training import DataSpec, ModelSpec, OptimSpec, RunSpec, load_checkpoint, train_run
from pde_data.core.model import PARAMETER, ROLE


def _with_beta(ds: xr.Dataset) -> xr.Dataset:
    """``ds`` with a per-sample parameter ``beta`` as its first variable (where a default input is looked for)."""
    beta = xr.DataArray(np.linspace(0.5, 2.0, ds.sizes["sample"]), dims="sample", attrs={ROLE: PARAMETER})
    return xr.Dataset({"beta": beta, **ds.data_vars}, coords=ds.coords, attrs=ds.attrs)


def test_parameters_are_the_marked_numbers_per_sample():
    ds = _with_beta(pde_data.generate_darcy(4, n_grid=8, seed=0))
    assert pde_data.parameters_of(ds) == ("beta",)
    ds["nu"] = xr.DataArray(np.ones((4, 3)), dims=("sample", "time"), attrs={ROLE: PARAMETER})
    assert pde_data.parameters_of(ds) == ("beta", "nu")
    ds["a"].attrs[ROLE] = PARAMETER
    with pytest.raises(ValueError, match=r"parameter 'a': expected a number per sample, dims \(sample,\) or "
                                         r"\(sample, time\), found float64 of dims \('sample', 'x', 'y'\)"):
        pde_data.parameters_of(ds)


def test_info_lists_each_parameter_with_its_range(tmp_path, capsys):
    path = pde_data.save(_with_beta(pde_data.generate_darcy(4, n_grid=8, seed=0)), tmp_path / "sweep.nc")
    assert main(["info", str(path)]) == 0
    out = capsys.readouterr().out
    assert [line for line in out.splitlines() if line.startswith("parameter ")] == [
        "parameter beta: ('sample',), from 0.5 to 2"]  # the fields are not listed as parameters


def test_a_file_with_parameters_trains_as_the_same_file_without_them(tmp_path):
    """The parameter is neither the default input (it comes first) nor a target: the run reads a → u and ends
    with the same weights as on the file without it."""
    plain = pde_data.generate_darcy(16, n_grid=8, seed=0)
    paths = {"plain": pde_data.save(plain, tmp_path / "plain.nc"),
             "swept": pde_data.save(_with_beta(plain), tmp_path / "swept.nc")}
    for name, path in paths.items():
        spec = RunSpec(data=DataSpec(str(path), split=(12, 2, 2)), model=ModelSpec("fno", {"width": 4}),
                       optim=OptimSpec(epochs=1, batch_size=4))
        train_run(spec, tmp_path / name, device="cpu", progress=False, threads=1)
    a, b = (load_checkpoint(tmp_path / name / "last.pt") for name in paths)
    assert b["spec"]["data"]["inputs"] == ["a"] and b["spec"]["data"]["targets"] == ["u"]
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])
