"""neuraloperator's ``.pt`` data sets and the FNO ``.mat`` files (v7.3 and v5) read into the data model,
made small inside the tests: orientation (MATLAB's reversed axes; an asymmetric grid tells), the one
opener's detection, one-line errors for bad files, and a one-epoch ``circuitop train`` plus
``circuitop evaluate`` on each format."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest
import scipy.io
import torch

import pde_data
from cli_run import evaluation_dir, run_cli as _cli

RNG = np.random.default_rng(0)
N, NX, NY, NT = 12, 8, 6, 4
A = RNG.normal(size=(N, NX, NY)).astype(np.float32)
U = RNG.normal(size=(N, NX, NY, NT)).astype(np.float32)


def write_mat73(path: Path, variables: dict[str, np.ndarray]) -> Path:
    """A MATLAB v7.3 file as MATLAB writes it: HDF5 behind a 512-byte header, every array's axes reversed."""
    with h5py.File(path, "w", userblock_size=512) as f:
        for name, values in variables.items():
            f[name] = np.ascontiguousarray(values.transpose(tuple(reversed(range(values.ndim)))))
    with open(path, "r+b") as fh:
        fh.write(b"MATLAB 7.3 MAT-file, Platform: GLNXA64, Created by circuitop's tests".ljust(116))
    return path


def test_mat73_reads_lazily_in_the_right_orientation(tmp_path):
    path = write_mat73(tmp_path / "ns.mat", {"a": A, "u": U, "t": np.arange(1.0, NT + 1)[None]})
    source = pde_data.open_source(path)
    ds = source.dataset
    assert source.format == "fno-mat:73"
    assert ds["u"].dims == ("sample", "time", "x", "y") and dict(ds.sizes) == {"sample": N, "time": NT, "x": NX, "y": NY}
    np.testing.assert_array_equal(ds["u"].isel(sample=3).values, np.moveaxis(U[3], -1, 0))
    np.testing.assert_array_equal(ds["u"].isel(sample=slice(2, 5), time=1, x=slice(1, 4)).values, U[2:5, 1:4, :, 1])
    np.testing.assert_array_equal(ds["a"].values, A)
    np.testing.assert_array_equal(ds["time"].values, np.arange(1.0, NT + 1))


def test_mat5_and_a_steady_pair(tmp_path):
    scipy.io.savemat(tmp_path / "darcy.mat", {"a": A, "u": 2 * A})
    source = pde_data.open_source(tmp_path / "darcy.mat")
    ds = source.dataset
    assert source.format == "fno-mat:5" and ds["u"].dims == ("sample", "x", "y")
    np.testing.assert_array_equal(ds["u"].values, 2 * A)


@pytest.mark.parametrize("zipped", [True, False])
def test_pt_dict_reads_as_input_and_target(tmp_path, zipped):
    torch.save({"x": torch.from_numpy(A)[:, None], "y": torch.from_numpy(A * 3)}, tmp_path / "darcy_train_8.pt",
               _use_new_zipfile_serialization=zipped)  # torch's zip format, memory-mapped, or its legacy one
    source = pde_data.open_source(tmp_path / "darcy_train_8.pt")
    ds = source.dataset
    assert source.format == "neuraloperator-pt" and list(ds.data_vars) == ["input", "target"]
    np.testing.assert_array_equal(ds["input"].values, A)
    np.testing.assert_array_equal(ds["target"].values, 3 * A)
    np.testing.assert_array_equal(ds["x"].values, np.linspace(0, 1, NX))


class _NotATensor:
    pass


@pytest.mark.parametrize("case, expected", [
    ("mat_without_u", "expected the FNO variables 'a' and 'u', found ['a']"),
    ("pt_with_a_string", "expected a dict of tensors with keys 'x' and 'y'"),
    ("pt_with_an_object", "expected a torch-saved dict of tensors (read with weights_only=True)"),
    ("pt_without_y", "expected keys 'x' and 'y'"),
])
def test_bad_files_get_one_line_and_exit_1(tmp_path, case, expected):
    path = tmp_path / ("bad.mat" if case.startswith("mat") else "bad.pt")
    if case == "mat_without_u":
        write_mat73(path, {"a": A})
    elif case == "pt_with_a_string":
        torch.save({"x": torch.zeros(2, 3), "y": "labels"}, path)
    elif case == "pt_with_an_object":
        torch.save({"x": torch.zeros(2, 3), "y": _NotATensor()}, path)  # only a full unpickle could load it
    else:
        torch.save({"x": torch.zeros(2, 3)}, path)
    proc = _cli("info", path)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], proc.stderr


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["pt", "mat73", "mat5"])
def test_train_and_evaluate_on_each_format(tmp_path, fmt):
    if fmt == "pt":
        data = tmp_path / "darcy.pt"
        torch.save({"x": torch.from_numpy(A), "y": torch.from_numpy(np.tanh(A))}, data)
        roles = []
    elif fmt == "mat73":
        data = write_mat73(tmp_path / "ns.mat", {"a": A, "u": U})
        roles = ["--window", "2"]
    else:
        data = tmp_path / "burgers.mat"
        scipy.io.savemat(data, {"a": A, "u": np.tanh(A)})
        roles = []
    info = _cli("info", data)
    assert info.returncode == 0, info.stderr
    run = tmp_path / "run"
    train = _cli("train", "--data", data, "--model", "fno", "--out", run, "--epochs", "1", "--threads", "1",
                 "--no-progress", "--workers", "0", "--split", "8,2,2", *roles,
                 "--config", "width=8", "n_modes=3", "n_layers=2")
    assert train.returncode == 0, train.stderr[-2000:]
    evaluate = _cli("evaluate", "--run", run, "--data", data, *(["--steps", "1"] if fmt == "mat73" else []))
    assert evaluate.returncode == 0, evaluate.stderr[-2000:]
    assert (evaluation_dir(run, data) / "metrics.json").stat().st_size > 0
