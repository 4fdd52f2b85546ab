"""``circuitop generate ns|swe``: streamed and sharded output equal the library's set, attributes, one-line errors."""

import numpy as np
import pytest
import xarray as xr

import pde_data
from operators.cli import main


NS = ["generate", "ns", "--n", "3", "--n-sim", "16", "--n-out", "8", "--t-final", "0.5", "--records", "2",
      "--dt", "0.05", "--batch-size", "2", "--seed", "5", "--device", "cpu"]


def test_ns_streamed_and_sharded_sets_equal_the_library_set(tmp_path, capsys):
    assert main([*NS, "--out", str(tmp_path / "full.nc"), "--record-initial"]) == 0
    assert main([*NS, "--out", str(tmp_path / "set"), "--record-initial", "--shards", "2", "--workers", "1"]) == 0
    full = pde_data.open_source(tmp_path / "full.nc").dataset.load()
    xr.testing.assert_identical(full, pde_data.open_source(tmp_path / "set").dataset.load())
    library = pde_data.generate_navier_stokes(3, n_sim=16, n_out=8, t_final=0.5, n_records=2, dt=0.05,
                                              batch_size=2, seed=5, record_initial=True)
    assert full.vorticity.values.tobytes() == library.vorticity.values.tobytes()
    assert full.vorticity.shape == (3, 3, 8, 8) and full.attrs["seed"] == 5
    assert "100%" in capsys.readouterr().err  # progress bar on stderr


def test_ns_float64_and_bad_options_give_one_line_errors(tmp_path, capsys):
    assert main([*NS, "--out", str(tmp_path / "d.nc"), "--dtype", "float64"]) == 0
    ds = pde_data.open_source(tmp_path / "d.nc").dataset
    assert ds.vorticity.dtype == np.float64 and ds.attrs["simulation_dtype"] == "float64"
    capsys.readouterr()
    assert main([*NS, "--out", str(tmp_path / "e.nc"), "--n-out", "6"]) == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("circuitop generate: error: --n-out: expected a divisor of --n-sim=16, found 6")
    assert "Traceback" not in err
    with pytest.raises(SystemExit):  # argparse's usage error, with the option's check
        main([*NS, "--out", str(tmp_path / "e.nc"), "--t-final", "-1"])
    assert "argument --t-final: expected a positive number, found -1" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # argparse's usage error
        main([*NS, "--out", str(tmp_path / "e.nc"), "--shards", "0"])
    assert "argument --shards: expected a positive integer, found 0" in capsys.readouterr().err
    assert not (tmp_path / "e.nc").exists()


SWE = ["generate", "swe", "--n", "3", "--n-grid", "12", "--t-final", "0.2", "--frames", "3", "--batch-size", "2",
       "--seed", "4", "--device", "cpu"]


def test_swe_streams_the_library_set(tmp_path, capsys):
    assert main([*SWE, "--out", str(tmp_path / "full.nc"), "--momenta"]) == 0
    full = pde_data.open_source(tmp_path / "full.nc").dataset.load()
    library = pde_data.generate_dam_break(3, n_grid=12, t_final=0.2, n_frames=3, batch_size=2, seed=4, momenta=True)
    for name in ("h", "hu", "hv", "dam_radius"):
        assert full[name].values.tobytes() == library[name].values.tobytes()
    assert set(full.data_vars) == {"h", "hu", "hv", "dam_radius"} and full.h.shape == (3, 3, 12, 12)
    assert "100%" in capsys.readouterr().err


def test_swe_writes_the_pdebench_layout(tmp_path, capsys):
    assert main([*SWE, "--out", str(tmp_path / "rdb.h5"), "--pdebench"]) == 0
    ds = pde_data.open_source(tmp_path / "rdb.h5").dataset
    assert ds.h.sizes["sample"] == 3 and ds.h.sizes["time"] == 3
    assert main([*SWE, "--out", str(tmp_path / "bad.nc"), "--frames", "1"]) == 1
    assert "error: --frames: expected an integer >= 2" in capsys.readouterr().err.strip().splitlines()[-1]


def test_ns_writes_the_pdebench_layout_the_readme_trains_on(tmp_path, capsys):
    """``generate ns --pdebench`` writes PDEBench's per-sample-group file; ``info`` and the one opener read
    it back with the same vorticity as the NetCDF output."""
    assert main([*NS, "--out", str(tmp_path / "ns.h5"), "--pdebench", "--record-initial"]) == 0
    assert main([*NS, "--out", str(tmp_path / "ns.nc"), "--record-initial"]) == 0
    source, nc = pde_data.open_source(tmp_path / "ns.h5"), pde_data.open_source(tmp_path / "ns.nc").dataset
    h5 = source.dataset
    assert source.format == "pdebench:group"
    np.testing.assert_array_equal(h5.vorticity.values, nc.vorticity.values)
    capsys.readouterr()
    assert main(["info", str(tmp_path / "ns.h5")]) == 0
    assert "variable vorticity: ('sample', 'time', 'x', 'y')" in capsys.readouterr().out
