"""Torch datasets (pairs, time windows), seeded splits and normalizers fitted on the training split."""

import pickle

import numpy as np
import pytest
import torch
import xarray as xr
from torch.utils.data import DataLoader

from pde_data import default_sizes, open_source, to_tensor, write_pdebench
from pde_data.datasets.fields import PairDataset, WindowDataset, split_indices
from pde_data.datasets.normalize import Normalizer, fit_normalizer

F32 = np.float32


def _steady(n=10, nx=6, ny=5, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.normal(3.0, 2.0, (n, nx, ny)).astype(F32)
    u = rng.uniform(-1.0, 4.0, (n, nx, ny)).astype(F32)
    return xr.Dataset({"a": (("sample", "x", "y"), a), "u": (("sample", "x", "y"), u)})


def _unsteady(n=3, t=7, nx=6, ny=5, seed=1):
    rng = np.random.default_rng(seed)
    dims = ("sample", "time", "x", "y")
    return xr.Dataset({k: (dims, rng.standard_normal((n, t, nx, ny)).astype(F32)) for k in ("u", "v")},
                      coords={"time": np.linspace(0, 1, t).astype(F32)})


def test_split_indices_disjoint_seeded():
    s = split_indices(100, sizes=(70, 20, 10), seed=3)
    assert [len(s[k]) for k in ("train", "val", "test")] == [70, 20, 10]
    assert len(np.union1d(np.union1d(s["train"], s["val"]), s["test"])) == 100
    again, other = split_indices(100, sizes=(70, 20, 10), seed=3), split_indices(100, sizes=(70, 20, 10), seed=4)
    assert all(np.array_equal(s[k], again[k]) for k in s)
    assert not np.array_equal(s["test"], other["test"])
    f = split_indices(10, seed=0)
    assert [len(f[k]) for k in ("train", "val", "test")] == [8, 1, 1]
    for n, sizes in ((2, [2, 0, 0]), (3, [1, 1, 1]), (15, [13, 1, 1]), (24, [20, 2, 2])):  # every sample used
        assert [len(split_indices(n, seed=0)[k]) for k in ("train", "val", "test")] == sizes == list(default_sizes(n))
    with pytest.raises(ValueError, match="sizes: expected three non-negative sizes summing to <= 10"):
        split_indices(10, sizes=(8, 2, 1))


@pytest.mark.parametrize("kind", ["gaussian", "minmax"])
def test_normalizer_uses_training_split_only(kind):
    ds = _steady()
    ds["a"][8:] = 1e6  # outliers outside the training split must not move the statistics
    train = np.arange(8)
    norm = fit_normalizer(ds, ["a", "u"], indices=train, method=kind, chunk_size=3)
    x = to_tensor(ds.isel(sample=train), ["a", "u"], dtype=torch.float64)  # (8, 2, 6, 5)
    z = norm.encode(x)
    assert norm.shift.shape == (2, 1, 1)
    if kind == "gaussian":
        torch.testing.assert_close(z.mean(dim=(0, 2, 3)), torch.zeros(2, dtype=torch.float64), atol=1e-6, rtol=0)
        torch.testing.assert_close(z.std(dim=(0, 2, 3), correction=0), torch.ones(2, dtype=torch.float64), atol=1e-6, rtol=0)
    else:
        torch.testing.assert_close(z.amin(dim=(0, 2, 3)), torch.zeros(2, dtype=torch.float64), atol=1e-6, rtol=0)
        torch.testing.assert_close(z.amax(dim=(0, 2, 3)), torch.ones(2, dtype=torch.float64), atol=1e-6, rtol=0)
    torch.testing.assert_close(norm.decode(z), x, atol=1e-5, rtol=1e-6)
    whole = fit_normalizer(ds, ["a", "u"], indices=train, method=kind, chunk_size=100)
    torch.testing.assert_close(norm.shift, whole.shift)
    torch.testing.assert_close(norm.scale, whole.scale)


def test_normalizer_checkpoint_weights_only(tmp_path):
    norm = fit_normalizer(_unsteady(), ["u", "v"], indices=[0, 1], method="minmax")
    torch.save({"normalizer": norm.state_dict()}, tmp_path / "ckpt.pt")
    state = torch.load(tmp_path / "ckpt.pt", weights_only=True)["normalizer"]
    back = Normalizer.from_state_dict(state)
    assert back.method == "minmax"
    torch.testing.assert_close(back.scale, norm.scale)
    batch = torch.randn(4, 3, 2, 6, 5)  # (batch, time, channels, x, y) broadcasts too
    torch.testing.assert_close(back.encode(batch), norm.encode(batch))
    with pytest.raises(ValueError, match="expected method in"):
        Normalizer.from_state_dict({**state, "method": "robust"})
    earlier = {("kind" if k == "method" else k): v for k, v in state.items()}  # a checkpoint before the rename
    assert Normalizer.from_state_dict(earlier).method == "minmax"
    with pytest.raises(ValueError, match="method: expected one of"):
        fit_normalizer(_unsteady(), ["u"], method="robust")


def _xy(item):
    return item.inputs, item.targets


def test_pair_dataset_over_lazy_file(tmp_path):
    ds = _steady()
    path = write_pdebench(ds, tmp_path / "2D_DarcyFlow_beta1.0_Train.hdf5", layout="darcy")
    lazy = open_source(path).dataset
    splits = split_indices(10, sizes=(6, 2, 2), seed=0)
    data = PairDataset(lazy, ["a"], ["u"], indices=splits["val"])
    assert len(data) == 2
    x, y = _xy(data[1])
    i = splits["val"][1]
    assert x.shape == (1, 6, 5) and y.shape == (1, 6, 5)
    torch.testing.assert_close(y[0], torch.from_numpy(ds["u"].values[i]))  # the data's units
    torch.testing.assert_close(x[0], torch.from_numpy(ds["a"].values[i]))
    alone = PairDataset(lazy, ["a"], [], indices=splits["val"]).read_batch([1])  # the inputs alone
    assert alone.targets is None
    torch.testing.assert_close(alone.inputs[0], x)
    clone = pickle.loads(pickle.dumps(data))  # what a DataLoader worker receives
    torch.testing.assert_close(clone[1].targets, y)
    assert next(iter(DataLoader(data, batch_size=2))).inputs.shape == (2, 1, 6, 5)
    with pytest.raises(ValueError, match=r"expected variables \['f', 'u'\] in .*; missing \['f'\]"):
        PairDataset(lazy, ["f"], ["u"])
    with pytest.raises(ValueError, match=r"indices: expected sample indices in \[0, 10\)"):
        PairDataset(lazy, ["a"], ["u"], indices=[3, 10])
    lazy.close()


@pytest.mark.parametrize("m", [1, 3, 5])
def test_window_dataset(tmp_path, m):
    ds = _unsteady()
    lazy = open_source(write_pdebench(ds, tmp_path / "2D_diff-react_NA_NA.h5", layout="diff-react")).dataset
    data = WindowDataset(lazy, ["u", "v"], window=m, indices=[0, 2], stride=1)
    assert len(data) == 2 * (7 - m)
    x, y = _xy(data[len(data) - 1])  # sample 2, last window
    t0 = 7 - m - 1
    frames = to_tensor(ds.isel(sample=[2]), ["u", "v"])[0]  # (time, channels, x, y)
    assert x.shape == (m, 2, 6, 5) and y.shape == (1, 2, 6, 5)
    torch.testing.assert_close(x, frames[t0:t0 + m])
    torch.testing.assert_close(y[0], frames[t0 + m])
    x3, y3 = _xy(WindowDataset(lazy, ["u", "v"], window=m, horizon=2)[0])
    assert x3.shape == (m, 2, 6, 5) and y3.shape == (2, 2, 6, 5)
    torch.testing.assert_close(y3, to_tensor(ds.isel(sample=[0]), ["u", "v"])[0][m:m + 2])
    lazy.close()


def test_window_dataset_rollouts_from_the_start_and_bad_args():
    ds = _unsteady()
    raw = torch.from_numpy(ds["u"].values)
    assert len(WindowDataset(ds, ["u"], window=2, stride=2)) == 3 * 3
    rollouts = WindowDataset(ds, ["u"], window=2, horizon=4, stride=7, indices=[2, 0])  # one per sample, from t = 0
    assert rollouts.windows.tolist() == [[2, 0], [0, 0]]
    batch = rollouts.read_batch([0, 1])
    torch.testing.assert_close(batch.inputs[:, :, 0], raw[[2, 0], :2])
    torch.testing.assert_close(batch.targets[:, :, 0], raw[[2, 0], 2:6])
    given = WindowDataset(ds, ["u"], window=3, horizon=0, stride=7).read_batch([1, 2])  # the given frames alone
    assert given.targets is None
    torch.testing.assert_close(given.inputs[:, :, 0], raw[1:3, :3])
    with pytest.raises(ValueError, match="window \\+ horizon <= 7 frames; found window=7"):
        WindowDataset(ds, ["u"], window=7)
    with pytest.raises(ValueError, match="without time: \\['a'\\]"):
        WindowDataset(_steady(), ["a"], window=1)


def test_pair_dataset_on_order_benchmark():
    """1D fields (sample, s): items (channels, s), per-channel statistics shaped (channels, 1)."""
    from pde_data import generate_order_benchmark

    ds = generate_order_benchmark(6, 2, n_points=128, seed=0)
    norm = fit_normalizer(ds, ["target"], indices=[0, 1, 2, 3])
    data = PairDataset(ds, ["input"], ["target"], indices=[4, 5])
    x, y = _xy(data[0])
    assert x.shape == (1, 128) and norm.shift.shape == (1, 1)
    torch.testing.assert_close(y[0], torch.from_numpy(ds["target"].values[4]).float())
