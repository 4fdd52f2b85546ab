"""The streaming run layer: window items are file slices, streaming equals caching, batches do not
depend on workers or processes, evaluation scores the stored split of the same data wherever it lies,
and a read error in a worker is one line naming the file and sample."""

import json
import os
import shutil
import subprocess
import sys

import h5py
import numpy as np
import pytest
import torch
import xarray as xr

import pde_data
from operators.cli import main
from operators.training import (DataSpec, Loader, LoadingSpec, ModelSpec, OptimSpec, RunSpec, TaskSpec, Trainer,
                                evaluate_run, load_checkpoint, make_task, resolve, train_run)
from operators.training import loader as loader_module
from operators.training.data import make_loaders
from operators.training.distributed import DistInfo
from pde_data.datasets.batches import BatchReads
from test_trainer import write_poisson

ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
CFD = ("density", "pressure", "Vx", "Vy")


def cfd_dataset(n=6, nt=7, nx=8, seed=0) -> xr.Dataset:
    """A PDEBench 2D-CFD-like set: four smooth random fields per sample, drifting in time."""
    rng = np.random.default_rng(seed)
    x = (np.arange(nx) + 0.5) / nx
    t = np.linspace(0.0, 1.0, nt)
    phase = rng.uniform(0, 2 * np.pi, (n, len(CFD), 1, 1, 1))
    waves = np.sin(2 * np.pi * (x[:, None] + x[None, :]) + phase + t[:, None, None])  # (n, C, t, x, y)
    data = (1.0 + 0.3 * waves + 0.05 * rng.standard_normal(waves.shape)).astype("f4")
    dims = ("sample", "time", "x", "y")
    return xr.Dataset({v: (dims, data[:, c]) for c, v in enumerate(CFD)}, coords={"x": x, "y": x, "time": t})


@pytest.fixture
def cfd_file(tmp_path):
    return pde_data.write_pdebench(cfd_dataset(), tmp_path / "2D_CFD_test.hdf5", layout="cfd")


def test_every_window_item_is_a_slice_of_the_file(cfd_file):
    data = pde_data.WindowDataset(cfd_file, ["density", "Vx"], window=3, horizon=2, indices=[1, 4, 5])
    batch = data.read_batch(list(range(len(data))))
    x, y = batch.inputs, batch.targets
    with h5py.File(cfd_file) as f:
        for k, (sample, t0) in enumerate(data.windows):
            frames = np.stack([f[v][sample, t0:t0 + 5] for v in ("density", "Vx")], axis=1)  # (5, C, x, y)
            np.testing.assert_array_equal(x[k].numpy(), frames[:3])
            np.testing.assert_array_equal(y[k].numpy(), frames[3:])
    assert torch.equal(data[7].inputs, x[7]) and torch.equal(data[7].targets, y[7])


@pytest.mark.parametrize("layout", ["netcdf", "group", "diff-react"])
def test_window_batches_are_the_same_from_every_layout(cfd_file, tmp_path, layout):
    """The PDEBench fast path (straight into the batch) and the generic xarray path give identical batches:
    NetCDF goes through xarray, the group layouts (one (T, X, Y, C) dataset per sample, diff-react stored
    (..., y, x)) through their own reads; windows alone and several of one sample in a batch."""
    ds = cfd_dataset()
    if layout == "netcdf":
        path = pde_data.save(ds, tmp_path / "cfd.nc")
    else:
        ds = ds[["density", "Vx"]]
        path = pde_data.write_pdebench(ds, tmp_path / f"{layout}.h5", layout=layout)
    variables = list(ds.data_vars)
    reference = pde_data.WindowDataset(cfd_file, variables, window=2, horizon=2)
    other = pde_data.WindowDataset(path, variables, window=2, horizon=2)
    for items in ([0, 5, 9, 14], [3, 4, 5, 20, 21]):  # one window per sample; three and two of one sample
        for a, b in zip(reference.read_batch(items).tensors(), other.read_batch(items).tensors()):
            assert torch.equal(a, b)


def test_cached_items_equal_streamed_items(cfd_file):
    from operators.training.tasks import Normalizers, TaskBatches

    norm = pde_data.fit_normalizer(pde_data.open_source(cfd_file).dataset, list(CFD), indices=[0, 2, 3])
    common = dict(window=2, horizon=1, indices=[0, 2, 3, 5], dtype=torch.float64)
    streamed = pde_data.WindowDataset(cfd_file, list(CFD), **common)
    cached = TaskBatches(pde_data.WindowDataset(cfd_file, list(CFD), cache=True, **common), Normalizers(norm, norm))
    items = [13, 0, 7, 7, 19, 2]
    for _ in range(2):  # encoding in place never reaches the cache
        for a, b in zip(streamed.read_batch(items).tensors(), cached.read_batch(items).tensors()):
            assert a.dtype == torch.float64 and torch.equal(norm.encode(a), b)


class Tensors(BatchReads):
    """In-memory tensors as a dataset: item k is ``Batch(x[k], y[k])``."""

    def __init__(self, x, y):
        self.x, self.y = x, y

    def __len__(self):
        return len(self.x)

    def read_batch(self, items):
        idx = torch.as_tensor(list(items), dtype=torch.long)
        return pde_data.Batch(self.x[idx], self.y[idx])


def test_batches_do_not_depend_on_workers_or_processes():
    x = torch.arange(23.0)[:, None]
    one = Loader(Tensors(x, x), batch_size=5, seed=3)
    batches = [b.inputs.flatten().tolist() for b in one.epoch(2)]
    workers = Loader(Tensors(x, x), batch_size=5, seed=3, workers=2)
    assert [b.inputs.flatten().tolist() for b in workers.epoch(2)] == batches
    assert sorted(sum(batches, [])) == list(range(23)) and [len(b) for b in batches] == [5, 5, 5, 5, 3]
    halves = [Loader(Tensors(x, x), batch_size=5, seed=3, dist=DistInfo(rank=r, world_size=2))
              for r in range(2)]
    assert all(h.global_sizes(2) == [len(b) for b in batches] for h in (one, *halves))
    for whole, a, b in zip(batches, *(h.epoch(2) for h in halves)):
        ax, bx = a.inputs, b.inputs
        assert sorted(ax.flatten().tolist() + bx.flatten().tolist()) == sorted(whole)
        assert len(ax) - len(bx) in (0, 1)


def test_worker_batches_in_reused_memory_stay_intact_while_held(cfd_file, monkeypatch):
    """A worker reads into shared buffers it reuses once the main process holds no tensor over them: every
    batch of an epoch, all held, equals the batch read in the main process, and a loop that drops each
    batch gets buffers lent again."""
    data = pde_data.WindowDataset(pde_data.open_source(cfd_file), CFD, window=2)
    lent, unwrap = [], loader_module._Lent.unwrap
    monkeypatch.setattr(loader_module._Lent, "unwrap", lambda self: lent.append(list(self.slots)) or unwrap(self))
    reference = [batch.tensors() for batch in Loader(data, batch_size=4, seed=1).epoch(0)]
    loader = Loader(data, batch_size=4, seed=1, workers=1)
    held = list(loader.epoch(0))
    assert len(held) == len(reference) == 8
    for batch, expected in zip(held, reference):
        assert all(torch.equal(a, b) for a, b in zip(batch.tensors(), expected))
    del held, batch
    lent.clear()
    for batch, expected in zip(loader.epoch(0), reference):
        assert all(torch.equal(a, b) for a, b in zip(batch.tensors(), expected))
    slots = [k for batch in lent for k in batch if k >= 0]
    assert len(slots) > len(set(slots))  # buffers lent again


def test_loading_leaves_the_global_rng_alone():
    """Creating a DataLoader iterator draws a base seed; it comes from the loader's own generator, so the
    global RNG (dropout, ...) is the same with or without workers, and on resume."""
    x = torch.arange(12.0)[:, None]
    draws = []
    for workers in (0, 1):
        torch.manual_seed(0)
        loader = Loader(Tensors(x, x), batch_size=4, seed=3, workers=workers)
        for epoch in range(3):
            list(loader.epoch(epoch))
        draws.append(torch.rand(1))
    torch.manual_seed(0)
    assert torch.equal(draws[0], draws[1]) and torch.equal(draws[0], torch.rand(1))


def _window_task(source, *, seed=0, sizes=(4, 1, 1), **loading):
    """The task of a window-2 U-Net run on ``source``, with its normalizers fitted."""
    spec = RunSpec(data=DataSpec(source.path, split=sizes, split_seed=seed), task=TaskSpec(window=2),
                   model=ModelSpec("unet", {"n_layers": 1, "n_res": 1, "n_res_neck": 1, "channel_multiplier": 4}),
                   optim=OptimSpec(epochs=2, batch_size=4), loading=LoadingSpec(**loading))
    task = make_task(resolve(spec, source))
    return make_task(task.spec, task.fit_normalizers(source))


def _train(path, cache, workers, tmp_path):
    source = pde_data.open_source(path)
    task = _window_task(source, seed=1, cache=cache, workers=workers)
    train, val = make_loaders(task, source, batch_size=4, seed=0, dtype=torch.float64)
    assert train.dataset.dataset.cached == (cache == "memory")
    torch.manual_seed(0)
    m = task.spec.model
    model = m.build().double()
    trainer = Trainer(model, task, train, val, tmp_path / cache, progress=False)
    trainer.fit()
    return trainer


def test_streaming_and_in_memory_training_give_identical_weights(cfd_file, tmp_path):
    streamed = _train(cfd_file, "stream", 2, tmp_path)
    cached = _train(cfd_file, "memory", 0, tmp_path)
    a, b = streamed.state_dict()["model"], cached.state_dict()["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert [r["train_loss"] for r in streamed.history] == [r["train_loss"] for r in cached.history]
    assert streamed.history[-1]["val_rel_l2"] == cached.history[-1]["val_rel_l2"]


def test_auto_cache_follows_the_memory_budget(cfd_file):
    source = pde_data.open_source(cfd_file)
    need = 5 * pde_data.item_bytes(source, list(CFD))
    small, _ = make_loaders(_window_task(source, memory_budget=need - 1, workers=0), source, batch_size=2, seed=0)
    fits, _ = make_loaders(_window_task(source, memory_budget=need), source, batch_size=2, seed=0)
    assert not small.dataset.dataset.cached and fits.dataset.dataset.cached


def _steady_run(tmp_path, data):
    spec = RunSpec(data=DataSpec(str(data), inputs=("f",), targets=("u",), split=(12, 2, 4)),
                   model=ModelSpec("fno", {"n_modes": 3, "width": 6, "n_layers": 2}),
                   optim=OptimSpec(epochs=1, batch_size=4), loading=LoadingSpec(cache="stream", workers=0))
    return train_run(spec, tmp_path / "run", progress=False)


def test_evaluation_of_a_copy_scores_the_stored_split_and_another_file_is_refused(tmp_path, capsys):
    data = write_poisson(tmp_path / "p.nc", n_samples=18)
    _steady_run(tmp_path, data)
    moved = tmp_path / "elsewhere" / "renamed.nc"
    moved.parent.mkdir()
    shutil.copy(data, moved)
    first = evaluate_run(tmp_path / "run", data, write=False)
    copy = evaluate_run(tmp_path / "run", moved)
    assert copy["samples"] == "test" and copy["n_samples"] == 4 and copy["metrics"] == first["metrics"]
    folder = tmp_path / "run" / "evaluations" / "renamed.nc-test"
    predictions = pde_data.open_source(folder / "pred.nc").dataset
    assert predictions.sizes["sample"] == 4 and "u" in predictions
    assert copy["out"] == str(folder) and str(folder / "pred.nc") in copy["files"]
    other = write_poisson(tmp_path / "other.nc", n_samples=18, seed=1)
    capsys.readouterr()
    assert main(["evaluate", "--run", str(tmp_path / "run"), "--data", str(other)]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "not the data this run was trained on" in err and "--samples all" in err
    every = evaluate_run(tmp_path / "run", other, samples="all", write=False)
    assert every["samples"] == "all" and every["n_samples"] == 18


def test_streamed_evaluation_equals_one_batch(tmp_path):
    data = write_poisson(tmp_path / "p.nc", n_samples=18)
    _steady_run(tmp_path, data)
    one = evaluate_run(tmp_path / "run", data, write=False, batch_size=100)
    many = evaluate_run(tmp_path / "run", data, write=False, batch_size=1)
    assert one["metrics"].keys() == many["metrics"].keys()
    for key, value in one["metrics"].items():  # NaN (an empty frequency band) is None in the JSON result
        assert (value is None and many["metrics"][key] is None) or many["metrics"][key] == pytest.approx(value, rel=1e-6)


def test_a_truncated_file_fails_in_a_worker_with_one_line(tmp_path):
    path = pde_data.write_pdebench(cfd_dataset(n=40, nt=4, nx=32), tmp_path / "big.hdf5", layout="cfd")
    source = pde_data.open_source(path)
    dataset = _window_task(source, sizes=(40, 0, 0)).dataset(source, range(40), cache=False)
    loader = Loader(dataset, batch_size=2, seed=0, workers=2, prefetch=1)
    batches = loader.epoch(0)
    next(batches)
    os.truncate(path, os.path.getsize(path) // 3)
    with pytest.raises(pde_data.DataReadError) as err:
        for _ in batches:
            pass
    message = str(err.value)
    assert len(message.splitlines()) == 1 and str(path) in message and "reading sample" in message


def test_cli_streams_with_workers(tmp_path):
    path = pde_data.write_pdebench(cfd_dataset(), tmp_path / "cfd.hdf5", layout="cfd")
    out = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "operators.cli", "train", "--data", str(path), "--model", "fno",
                           "--out", str(out), "--window", "2", "--split", "4,1,1", "--epochs", "1", "--batch-size", "4",
                           "--cache", "stream", "--workers", "2", "--config", "n_modes=3", "width=6", "n_layers=2",
                           "--threads", "1", "--no-progress"], env=ENV, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    run = RunSpec.from_dict(load_checkpoint(out / "last.pt")["spec"])
    assert run.data.splits.test and run.data.fingerprint


@pytest.mark.parametrize("layout", ["netcdf", "cfd"])
def test_a_training_run_with_0_workers_opens_its_data_file_once(tmp_path, monkeypatch, layout):
    """Resolving the spec, the fingerprint, the normalizer fit, the train and validation reads of every
    epoch: one open of the file (HDF5 opens and Python opens counted), whatever the format."""
    import builtins

    ds = cfd_dataset(n=8)
    path = (pde_data.save(ds, tmp_path / "cfd.nc") if layout == "netcdf"
            else pde_data.write_pdebench(ds, tmp_path / "cfd.hdf5", layout="cfd"))
    opened, h5_open, py_open = [], h5py.h5f.open, builtins.open

    def counted_h5(name, *args, **kwargs):
        opened.append(os.fsdecode(name))
        return h5_open(name, *args, **kwargs)

    def counted_py(file, *args, **kwargs):
        if isinstance(file, (str, bytes, os.PathLike)):
            opened.append(os.fsdecode(file))
        return py_open(file, *args, **kwargs)

    monkeypatch.setattr(h5py.h5f, "open", counted_h5)
    monkeypatch.setattr(builtins, "open", counted_py)
    assert main(["train", "--data", str(path), "--model", "fno", "--out", str(tmp_path / "run"), "--window", "2",
                 "--split", "6,2,0", "--epochs", "2", "--batch-size", "4", "--cache", "stream", "--workers", "0",
                 "--config", "n_modes=3", "width=6", "n_layers=2", "--threads", "1", "--no-progress"]) == 0
    assert [p for p in opened if os.path.abspath(p) == str(path)] == [str(path)]
    assert len(json.loads((tmp_path / "run" / "history.json").read_text())) == 2  # it did read the data
