"""PDE parameters per sample in the data model (issue 44): marked variables of dims ``(sample,)`` or
``(sample, time)``, listed by ``circuitop info`` with their range, and never taken as a run's input or target."""

import re

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


def test_a_range_is_read_from_text_and_state_and_drawn_within_it():
    from pde_data.core.params import ParameterError, typed
    from pde_data.core.sweep import Sweep, drawn
    from pde_data.generate.defaults import PARAMS

    assert Sweep.parse("0.5..2") == Sweep(0.5, 2.0) and Sweep.parse("1e-4 .. 1e-3:log") == Sweep(1e-4, 1e-3, True)
    assert Sweep.parse("2") is None and str(Sweep(1e-4, 1e-3, True)) == "0.0001..0.001:log"
    assert typed(PARAMS["darcy"], {"beta": {"low": 0.5, "high": 2, "log": False}}) == {"beta": Sweep(0.5, 2.0)}
    values = drawn(Sweep(1e-4, 1e-2, log=True), 0, np.arange(4000))
    assert values.min() >= 1e-4 and values.max() <= 1e-2
    assert np.mean(values < 1e-3) == pytest.approx(0.5, abs=0.03)  # log-uniform: half below the geometric middle
    assert np.array_equal(drawn(Sweep(0.5, 2.0), 7, np.array([3, 9])), drawn(Sweep(0.5, 2.0), 7, np.arange(12))[[3, 9]])
    for text, said in (("2..0.5", "with LOW < HIGH, found 2..0.5"), ("-1..2", "a positive number, found -1..2"),
                       ("0..1:log", "with LOW > 0 for a log range, found 0..1:log")):
        with pytest.raises(ParameterError, match=re.escape(said)):
            typed(PARAMS["darcy"], {"beta": text}, "params")


def test_generate_darcy_sweeps_beta_per_sample(tmp_path, capsys):
    """``--beta 0.5..2``: each sample's β within the range, stored as a parameter; the coefficients are the
    fixed-β set's and u scales with β (the problem is linear in its forcing)."""
    out = tmp_path / "sweep.nc"
    assert main(["generate", "darcy", "--n", "12", "--n-grid", "8", "--beta", "0.5..2", "--threads", "1",
                 "--out", str(out)]) == 0
    with pde_data.open_source(out) as source:
        swept = source.dataset.load()
    fixed = pde_data.generate_darcy(12, n_grid=8, seed=0)
    beta = swept["beta"].values
    assert pde_data.parameters_of(swept) == ("beta",) and 0.5 <= beta.min() < beta.max() <= 2.0
    assert np.array_equal(swept["a"].values, fixed["a"].values)
    np.testing.assert_allclose(swept["u"].values, fixed["u"].values * beta[:, None, None], rtol=1e-10)
    capsys.readouterr()
    with pytest.raises(SystemExit) as stopped:  # argparse's usage error: status 2
        main(["generate", "darcy", "--n", "12", "--beta", "2..0.5", "--out", str(tmp_path / "x.nc")])
    assert stopped.value.code == 2
    assert capsys.readouterr().err.strip().endswith(
        "argument --beta: expected a range LOW..HIGH[:log] with LOW < HIGH, found 2..0.5 (--help for usage)")


def test_a_generated_run_on_a_sweep_stores_its_range_and_resumes(tmp_path):
    out = tmp_path / "run"
    args = ["train", "--generate", "darcy", "--gen", "n_grid=8", "beta=0.5..2", "--samples-per-epoch", "8",
            "--model", "fno", "--config", "width=4", "--threads", "1", "--out", str(out)]
    assert main([*args, "--epochs", "1"]) == 0
    assert load_checkpoint(out / "last.pt")["spec"]["data"]["generator"]["beta"] == {"low": 0.5, "high": 2.0,
                                                                                      "log": False}
    assert main(["train", "--resume", "--out", str(out), "--epochs", "2", "--threads", "1"]) == 0
    assert load_checkpoint(out / "last.pt")["epoch"] == 2


def test_a_viscosity_sweep_simulates_each_sample_at_its_own_viscosity():
    """``visc`` a range: each sample's trajectory is the one a fixed-ν run at its drawn ν gives (float64, to
    rounding), the draws are stored as the parameter ``visc``, and a range of samples cut out of the set (another
    block alignment) has the same bits."""
    from pde_data.core.sweep import Sweep

    kwargs = dict(n_sim=16, n_out=16, t_final=0.2, n_records=2, dt=1e-2, batch_size=2, dtype=torch.float64)
    swept = pde_data.generate_navier_stokes(4, visc=Sweep(1e-3, 1e-1, log=True), seed=3, **kwargs)
    visc = swept["visc"].values
    assert pde_data.parameters_of(swept) == ("visc",) and np.all((1e-3 <= visc) & (visc <= 1e-1))
    for i, nu in enumerate(visc):
        alone = pde_data.generate_navier_stokes(1, visc=float(nu), seed=3, first_sample=i, **kwargs)
        np.testing.assert_allclose(swept["vorticity"].values[i], alone["vorticity"].values[0], rtol=1e-10,
                                   atol=1e-12)
    part = pde_data.generate_navier_stokes(2, visc=Sweep(1e-3, 1e-1, log=True), seed=3, first_sample=1, **kwargs)
    assert np.array_equal(part["vorticity"].values, swept["vorticity"].values[1:3])
    assert np.array_equal(part["visc"].values, visc[1:3])


def test_the_dam_breaks_radius_and_height_are_parameters_and_sweep():
    """The default radius range draws what it always drew (``U(0.3, 0.7)`` from ``[seed, i]``); the radius and
    (when swept) the height inside are stored as parameters, and frame 0 stands at each sample's height."""
    from pde_data.core.sweep import Sweep

    kwargs = dict(n_grid=16, t_final=0.01, n_frames=2, seed=5, dtype=torch.float64)
    ds = pde_data.generate_dam_break(3, **kwargs)
    expected = [np.random.default_rng([5, i]).uniform(0.3, 0.7) for i in range(3)]
    assert np.array_equal(ds["dam_radius"].values, expected) and pde_data.parameters_of(ds) == ("dam_radius",)
    swept = pde_data.generate_dam_break(3, height=Sweep(1.5, 3.0), radius=0.5, **kwargs)
    heights = swept["dam_height"].values
    assert pde_data.parameters_of(swept) == ("dam_radius", "dam_height")
    assert np.all(swept["dam_radius"].values == 0.5) and np.all((1.5 <= heights) & (heights <= 3.0))
    assert np.allclose(swept["h"].values[:, 0].max(axis=(1, 2)), heights)
