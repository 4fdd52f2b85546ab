"""``pde_data.Source``: one object per opened file, probed once; every dataset reads through it; torch's
DataLoader contract with the default collate; pickling reopens; shipped statistics."""

import ctypes
import os
import pickle
import struct

import h5py
import numpy as np
import pytest
import torch
import xarray as xr
import yaml
from torch.utils.data import DataLoader

import pde_data
import pde_data.formats.source as source_module
from h5_reads import counting_reads

F32 = np.float32
DIMS = ("sample", "time", "x", "y")


def fields(n=10, nt=6, nx=8, ny=5, names=("u", "v"), seed=0) -> xr.Dataset:
    rng = np.random.default_rng(seed)
    data = {v: (DIMS, rng.standard_normal((n, nt, nx, ny)).astype(F32)) for v in names}
    return xr.Dataset(data, coords={"x": (np.arange(nx) + 0.5) / nx, "y": (np.arange(ny) + 0.5) / ny,
                                    "time": np.linspace(0.0, 1.0, nt)})


def images(n=12, seed=0) -> xr.Dataset:
    rng = np.random.default_rng(seed)
    return xr.Dataset({"image": (("sample", "x", "y"), rng.standard_normal((n, 6, 6)).astype(F32)),
                       "label": (("sample",), rng.integers(0, 3, n))})


STATS = {"mean": {"density": 0.5, "velocity": [0.1, -0.2]}, "std": {"density": 2.0, "velocity": [1.5, 3.0]}}


def write_well(path, n=6, nt=5, seed=0, stats=None):
    rng = np.random.default_rng(seed)
    return pde_data.write_well(path, fields={"density": rng.standard_normal((n, nt, 8, 6)).astype(F32),
                                             "velocity": rng.standard_normal((n, nt, 8, 6, 2)).astype(F32)},
                               time=np.arange(nt) * 0.5, coords={"x": np.arange(8.0), "y": np.arange(6.0)}, stats=stats)


def loader_equals_read_batch(dataset, *, workers):
    """Every batch of a plain DataLoader (default collate) is a ``Batch`` equal to ``read_batch`` of its items."""
    loader = DataLoader(dataset, batch_size=4, num_workers=workers)
    n = 0
    for k, batch in enumerate(loader):
        expected = dataset.read_batch(list(range(4 * k, min(4 * k + 4, len(dataset)))))
        absent = [name for name, t in vars(expected).items() if t is None]
        assert isinstance(batch, pde_data.Batch) and [name for name, t in vars(batch).items() if t is None] == absent
        for got, want in zip(batch.tensors(), expected.tensors()):
            assert got.dtype == want.dtype and torch.equal(got, want)
        n += len(batch.inputs)
    assert n == len(dataset)


@pytest.mark.parametrize("fmt", ["the-well", "pdebench:cfd"])
def test_a_plain_dataloader_with_workers_batches_windows_as_read_batch(tmp_path, fmt):
    if fmt == "the-well":
        source = pde_data.open_source(write_well(tmp_path / "flow.hdf5"))
        variables = ["density", "velocity_x", "velocity_y"]
    else:
        ds = fields(names=("density", "pressure", "Vx", "Vy"))
        source = pde_data.open_source(pde_data.write_pdebench(ds, tmp_path / "2D_CFD.hdf5", layout="cfd"))
        variables = ["density", "Vx"]
    assert source.format == fmt
    windows = pde_data.WindowDataset(source, variables, window=2, horizon=2, stride=1, indices=[1, 3, 4])
    loader_equals_read_batch(windows, workers=2)


def test_pairs_and_labels_in_a_plain_dataloader(tmp_path):
    darcy = fields(names=("a", "u")).isel(time=0, drop=True)
    source = pde_data.open_source(pde_data.write_pdebench(darcy, tmp_path / "darcy.h5", layout="darcy"))
    pairs = pde_data.PairDataset(source, ["a"], ["u"], indices=[9, 2, 2, 5, 7])
    loader_equals_read_batch(pairs, workers=0)
    torch.testing.assert_close(pairs[1].targets[0], torch.from_numpy(darcy["u"].values[2]))
    labels = pde_data.LabelDataset(pde_data.save(images(), tmp_path / "digits.nc"), ["image"], ["label"],
                                   indices=range(1, 12))
    loader_equals_read_batch(labels, workers=0)
    item = labels[3]
    assert item.inputs.shape == (1, 6, 6) and item.targets.dtype == torch.int64
    assert item.targets == images()["label"].values[4] and item.dt is None and item.mask is None


class OsOpens:
    """Counts the opens of one file by any code (the kernel's inotify ``IN_OPEN`` events): the C libraries
    (HDF5, netCDF-C, torch) as well as Python's ``open``.

    The kernel merges an event into an identical one queued just before it, so two opens in a row would
    read as one; the file's folder is watched too, and its events, queued between the file's, keep every
    open apart.
    """

    IN_OPEN, IN_Q_OVERFLOW = 0x20, 0x4000

    def __init__(self, path):
        libc = ctypes.CDLL(None, use_errno=True)
        if not hasattr(libc, "inotify_init1"):
            pytest.skip("counting a file's opens needs Linux's inotify")
        self.fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        assert self.fd >= 0, os.strerror(ctypes.get_errno())
        self.file = libc.inotify_add_watch(self.fd, os.fsencode(path), self.IN_OPEN)
        folder = libc.inotify_add_watch(self.fd, os.fsencode(os.path.dirname(os.path.abspath(path))), self.IN_OPEN)
        assert self.file >= 0 and folder >= 0, os.strerror(ctypes.get_errno())

    def count(self) -> int:
        """The opens of the file since the last call."""
        n = 0
        while True:
            try:
                events = os.read(self.fd, 1 << 16)
            except BlockingIOError:
                return n
            offset = 0
            while offset < len(events):
                wd, mask, _, size = struct.unpack_from("iIII", events, offset)
                assert not mask & self.IN_Q_OVERFLOW, "inotify dropped events"
                n += wd == self.file and bool(mask & self.IN_OPEN)
                offset += 16 + size

    def close(self) -> None:
        os.close(self.fd)


def counting_probes(monkeypatch) -> list[str]:
    """From now on, append the path of every format probe (:func:`pde_data.formats.opener.probe`) to the returned list."""
    probes, original = [], source_module.probe
    monkeypatch.setattr(source_module, "probe", lambda path, *options: probes.append(path) or original(path, *options))
    return probes


def fields_and_steady(n=12) -> xr.Dataset:
    """``vx``, ``vy``, ``particles`` (sample, time, x, y) and ``force_x``, ``force_y`` (sample, x, y)."""
    ds = fields(n=n, names=("vx", "vy", "particles"))
    steady = fields(n=n, names=("force_x", "force_y"), seed=1).isel(time=0, drop=True)
    return ds.assign(force_x=steady["force_x"], force_y=steady["force_y"])


@pytest.mark.parametrize("fmt", ["netcdf", "pdebench:ns_incom"])
def test_training_from_one_source_opens_the_file_once(tmp_path, monkeypatch, fmt):
    """A 0-worker use of a file — the Source, a WindowDataset and a PairDataset over it, the normalizer fit
    and the fingerprint — opens it once in this process, counted by the kernel, and reads what it holds."""
    ds, path = fields_and_steady(), tmp_path / "data.h5"
    pde_data.save(ds, path) if fmt == "netcdf" else pde_data.write_pdebench(ds, path, layout="ns_incom")
    opens = OsOpens(path)
    held = h5py.File(path, "r")
    open(path, "rb").close()  # back to back with HDF5's open: the counter sees both
    held.close()
    assert opens.count() == 2
    probes, reads = counting_probes(monkeypatch), counting_reads(monkeypatch)

    source = pde_data.open_source(path)
    splits = pde_data.split_indices(12, sizes=(8, 2, 2), seed=0)
    timed = ["vx", "vy", "particles"]
    pde_data.fit_normalizer(source, timed, indices=splits["train"])
    assert pde_data.normalizer_from_stats(source, timed) is None
    windows = pde_data.WindowDataset(source, timed, window=2, indices=splits["train"])
    pairs = pde_data.PairDataset(source, ["force_x"], ["force_y"], indices=splits["val"])
    (x, y), (a, b) = ((b.inputs, b.targets) for data in (windows, pairs)
                      for b in [next(iter(DataLoader(data, batch_size=5, num_workers=0)))])
    fingerprint = source.fingerprint()

    assert opens.count() == 1 and probes == [str(path)]
    assert source.format == fingerprint.format == fmt
    assert sum(reads) >= 3 * 8 * 6 * 8 * 5  # the fit read every frame of the training split from the file
    sample = windows.windows[0][0]
    expected = pde_data.to_tensor(ds.isel(sample=[sample]), timed)[0, :3]
    torch.testing.assert_close(x[0], expected[:2])
    torch.testing.assert_close(y[0], expected[2:])
    torch.testing.assert_close(a[:, 0], torch.from_numpy(ds["force_x"].values[splits["val"]]))
    torch.testing.assert_close(b[:, 0], torch.from_numpy(ds["force_y"].values[splits["val"]]))
    source.close()
    assert opens.count() == 0
    opens.close()


def test_a_pickled_source_reopens_and_reads_the_same(tmp_path, monkeypatch):
    ds = fields()
    path = pde_data.write_pdebench(ds, tmp_path / "g.h5", layout="group")
    source = pde_data.open_source(path)
    expected = source.read(["v", "u"], [7, 2, 7], slice(1, 4))
    torch.testing.assert_close(expected, pde_data.to_tensor(ds.isel(sample=[7, 2, 7], time=slice(1, 4)), ["v", "u"]))
    probes = counting_probes(monkeypatch)
    clone = pickle.loads(pickle.dumps(source))
    assert probes == [] and (clone.path, clone.format) == (source.path, source.format)  # opened when used
    assert torch.equal(clone.read(["v", "u"], [7, 2, 7], slice(1, 4)), expected)
    assert len(probes) == 1 and torch.equal(source.read(["v", "u"], [7, 2, 7], slice(1, 4)), expected)
    assert len(probes) == 1  # the process that opened it never opens it again
    stale = pickle.dumps(source)
    pde_data.write_pdebench(ds.assign(u=ds["u"] + 1), path, layout="group")  # replaced since it was opened
    with pytest.raises(OSError, match="changed since"):
        pickle.loads(stale).read(["u"], [0])
    in_memory = pickle.loads(pickle.dumps(pde_data.open_source(ds)))
    assert in_memory.format == "in-memory" and torch.equal(in_memory.read(["v", "u"], [7, 2, 7], slice(1, 4)), expected)


def test_the_well_stats_come_from_its_stats_yaml(tmp_path):
    path = write_well(tmp_path / "flow.hdf5", stats=STATS)
    source = pde_data.open_source(path)
    shipped = yaml.safe_load((tmp_path / "stats.yaml").read_text())
    expected = {"density": {k: shipped[k]["density"] for k in ("mean", "std")}}
    for c, axis in enumerate("xy"):
        expected[f"velocity_{axis}"] = {k: shipped[k]["velocity"][c] for k in ("mean", "std")}
    assert source.stats() == expected
    assert all(not key.startswith("well_stats") for key in source.dataset.attrs)  # not a side channel
    norm = pde_data.normalizer_from_stats(source, ["density", "velocity_y"])
    assert norm.shift.flatten().tolist() == pytest.approx([0.5, -0.2]) and norm.scale.shape == (2, 1, 1)
    assert pde_data.open_source(write_well(tmp_path / "other" / "flow.hdf5")).stats() is None
    assert pde_data.open_source(fields()).stats() is None


def test_reads_from_hdf5_and_through_xarray_agree(tmp_path, monkeypatch):
    """HDF5 fields (PDEBench, and NetCDF-4 stored as decoded) read straight into the result; decoded
    NetCDF and in-memory data through xarray: the same values for any sample order, repeats, frame
    ranges and dtypes, into ``out`` when it is given."""
    ds = fields()
    scaled = pde_data.save(ds, tmp_path / "scaled.nc")
    ds.to_netcdf(scaled, engine="netcdf4", encoding={v: {"dtype": "int16", "scale_factor": 1e-3, "_FillValue": -9999}
                                                     for v in ("u", "v")})
    decoded = xr.open_dataset(scaled).load()
    sources = [pde_data.open_source(pde_data.write_pdebench(ds, tmp_path / "g.h5", layout="group")),
               pde_data.open_source(pde_data.save(ds, tmp_path / "d.nc")), pde_data.open_source(ds),
               pde_data.open_source(scaled)]
    direct = []
    original = source_module.read_channels
    monkeypatch.setattr(source_module, "read_channels", lambda *args: direct.append(1) or original(*args))
    for samples, times in (([4, 0, 4, 9], slice(2, 5)), ([3], None), ([5, 6, 7], slice(-2, None))):
        for source in sources:
            data = decoded if source.path == str(scaled) else ds
            reference = pde_data.to_tensor(data.isel(sample=samples, time=times or slice(None)), ["u", "v"],
                                           dtype=torch.float64)
            direct.clear()
            out = torch.full(reference.shape, float("nan"), dtype=torch.float64)
            assert source.read(["u", "v"], samples, times, dtype=torch.float64, out=out) is out
            assert torch.equal(out, reference)
            assert torch.equal(source.read(["u", "v"], samples, times), reference.float())
            assert bool(direct) == (source.format in ("pdebench:group", "netcdf") and source.path != str(scaled))
    with pytest.raises(ValueError, match=r"variables: expected variables of .*missing \['w'\]"):
        sources[0].read(["u", "w"], [0])
    with pytest.raises(ValueError, match="out: expected a contiguous CPU tensor of shape"):
        sources[0].read(["u"], [0], out=torch.empty(2, 3))
    with pytest.raises(ValueError, match="times: expected a slice of consecutive frames"):
        sources[1].read(["u"], [0], slice(0, 6, 2))


def test_a_read_into_tensors_that_split_the_frames_fills_each_with_its_frames(tmp_path):
    """``out=(x, y)``: a window's given frames and its targets, each read once, equal to one read cut in two,
    from HDF5 (group layout: a group per sample; NetCDF-4) straight and through xarray (in-memory) alike."""
    ds = fields()
    sources = [pde_data.open_source(pde_data.write_pdebench(ds, tmp_path / "g.h5", layout="group")),
               pde_data.open_source(pde_data.save(ds, tmp_path / "d.nc")), pde_data.open_source(ds)]
    for source in sources:
        whole = source.read(["v", "u"], [7, 2, 7], slice(1, 6))
        x, y = (torch.full((3, n, 2, 8, 5), float("nan")) for n in (3, 2))
        parts = source.read(["v", "u"], [7, 2, 7], slice(1, 6), out=(x, y))
        assert parts[0] is x and parts[1] is y
        assert torch.equal(torch.cat([x, y], dim=1), whole), source.format
    with pytest.raises(ValueError, match=r"out: expected tensors splitting the frames of shape \(1, 5, 2, 8, 5\)"):
        sources[0].read(["v", "u"], [0], slice(1, 6), out=(x[:1], y[:1, :1]))
    with pytest.raises(ValueError, match="out: expected tensors splitting the frames"):
        sources[0].read(["v", "u"], [0], slice(0, 1), out=(torch.empty(1, 2, 8, 5),))
    steady = pde_data.open_source(ds.isel(time=0, drop=True))
    with pytest.raises(ValueError, match="out: expected tensors splitting the frames"):
        steady.read(["v", "u"], [0], out=(torch.empty(1, 1, 8, 5), torch.empty(1, 1, 8, 5)))


def test_open_data_is_the_sources_dataset_without_side_channels(tmp_path):
    odd = fields().assign(spectrum=(("sample", "x", "band"), np.ones((10, 8, 3), F32)))  # not a field: no fast path
    source = pde_data.open_source(pde_data.save(odd, tmp_path / "odd.nc"))
    torch.testing.assert_close(source.read(["u"], [1]), pde_data.to_tensor(odd.isel(sample=[1]), ["u"]))
    path = write_well(tmp_path / "flow.hdf5", stats=STATS)
    with pde_data.open_source(path).dataset as ds:
        assert "source_file" not in ds.attrs and "source_format" not in ds.attrs and "well_stats" not in ds.attrs
        assert all(not var.encoding for var in ds.variables.values())
    with pytest.raises(TypeError, match="data: expected a Source, a path or an xarray.Dataset, found int"):
        pde_data.open_source(3)


@pytest.mark.parametrize("fmt", ["netcdf", "pdebench:cfd"])
def test_a_failed_read_is_one_line_naming_the_file_samples_and_frames(tmp_path, fmt):
    ds = fields(n=6, nt=5, nx=32, ny=32, names=("density", "pressure", "Vx", "Vy"))
    path = tmp_path / "data.h5"
    pde_data.save(ds, path) if fmt == "netcdf" else pde_data.write_pdebench(ds, path, layout="cfd")
    windows = pde_data.WindowDataset(pde_data.open_source(path), ["density", "Vx"], window=2)
    windows.read_batch([0, 1])
    os.truncate(path, os.path.getsize(path) // 3)
    with pytest.raises(pde_data.DataReadError) as err:
        windows.read_batch([len(windows) - 1])
    message = str(err.value)
    assert "\n" not in message and message.startswith(f"{path}: reading sample 5, frames 2..4 failed: ")
