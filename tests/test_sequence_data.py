"""Sequence data sets end to end: generators, the padding convention, NetCDF round trip, SequenceDataset,
normalizers that ignore padding, and ``circuitop generate degradation|digits`` as real subprocesses."""

import json

import numpy as np
import pytest
import torch
import xarray as xr
from sklearn.datasets import load_digits

import pde_data
from cli_run import run_cli
from evaluation.gapped import gap_mask
from pde_data.core.model import LENGTH, padded_time, time_steps, to_tensor, valid_mask

INPUTS = ["health", "gap"]


@pytest.fixture(scope="module")
def degradation():
    return pde_data.generate_degradation(16, min_length=3, max_length=9, seed=4)


@pytest.fixture(scope="module")
def digits():
    return pde_data.generate_gapped_digits(seed=1, gap=0.3)


@pytest.fixture(scope="module")
def seq_file(tmp_path_factory, degradation):
    return pde_data.save(degradation, tmp_path_factory.mktemp("seq") / "seq.nc")


# -- the convention -------------------------------------------------------------------------------------------

def test_valid_mask_and_padded_time():
    mask = valid_mask(np.array([1, 3, 2]), 4)
    assert mask.tolist() == [[True, False, False, False], [True, True, True, False], [True, True, False, False]]
    time = padded_time(np.array([[5.0, 0, 0, 0], [0.0, 1.0, 3.0, 0], [2.0, 2.5, 9, 9]]), np.array([1, 3, 2]))
    np.testing.assert_allclose(time, [[5, 6, 7, 8], [0, 1, 3, 5], [2, 2.5, 3, 3.5]])
    ds = xr.Dataset({"v": (("sample", "time"), np.zeros((2, 3)))})
    assert valid_mask(ds).all() and valid_mask(ds).shape == (2, 3)
    with pytest.raises(ValueError, match="length: expected lengths in \\[1, 4\\], found 0 .. 5"):
        valid_mask(np.array([0, 5]), 4)
    with pytest.raises(ValueError, match="n_time"):
        valid_mask(np.array([1, 2]))


# -- degradation ----------------------------------------------------------------------------------------------

def test_degradation_sample_depends_on_seed_and_index_alone(degradation):
    small = pde_data.generate_degradation(8, min_length=3, max_length=9, seed=4)
    xr.testing.assert_equal(small, degradation.isel(sample=slice(0, 8)))
    shard = pde_data.generate_degradation(16, min_length=3, max_length=9, seed=4, samples=range(5, 11))
    xr.testing.assert_identical(shard, degradation.isel(sample=slice(5, 11)))
    other = pde_data.generate_degradation(8, min_length=3, max_length=9, seed=5)
    assert not np.allclose(other["rul"], small["rul"])


def test_degradation_padding_time_and_rul(degradation):
    ds, mask = degradation, valid_mask(degradation)
    length = ds[LENGTH].values
    assert ds["time"].dims == ("sample", "time") and ds.sizes["time"] == 9
    assert length.min() >= 3 and length.max() <= 9 and len(np.unique(length)) > 1
    assert mask.sum(1).tolist() == length.tolist()
    for name in ("health", "gap", "rul_step"):
        assert (ds[name].values[~mask] == 0).all(), name
    time = ds["time"].values
    assert (np.diff(time, axis=1) > 0).all() and (time_steps(ds) > 0).all()
    rows = np.arange(ds.sizes["sample"])
    last = time[rows, length - 1]
    np.testing.assert_allclose(time[rows, length] - last, last - time[rows, length - 2])  # padding: last step
    np.testing.assert_allclose(ds["rul"], ds["t_fail"] - last)
    assert ((last >= 0.3 * ds["t_fail"] - 1e-9) & (last <= 0.95 * ds["t_fail"] + 1e-9)).all()
    np.testing.assert_allclose(ds["rul_step"].values[rows, length - 1], ds["rul"])
    np.testing.assert_allclose(ds["rul_step"].values[mask], (ds["t_fail"].values[:, None] - time)[mask])
    np.testing.assert_allclose(ds["gap"].values[mask], np.diff(time, axis=1, prepend=0.0)[mask])
    clean = 1 - (time / ds["t_fail"].values[:, None]) ** ds["power"].values[:, None]
    assert np.abs(ds["health"].values - clean)[mask].max() < 0.12  # noise 0.02: within 6 sigma


def test_degradation_rejects_bad_lengths():
    with pytest.raises(ValueError, match="min_length, max_length: expected 1 <= min_length <= max_length"):
        pde_data.generate_degradation(4, min_length=5, max_length=3)


# -- gapped digits --------------------------------------------------------------------------------------------

def test_whole_digits_are_rows_of_the_images():
    ds = pde_data.generate_gapped_digits()
    images = load_digits().images / 16
    assert ds["pixels"].dims == ("sample", "time", "feature") and LENGTH not in ds
    np.testing.assert_array_equal(ds["pixels"].values, images.astype(np.float32))
    assert ds["label"].attrs["n_classes"] == 10 and pde_data.n_classes(ds, "label") == 10
    assert ds["time"].values.tolist() == list(range(8))


def test_gapped_digits_keep_original_times(digits):
    ds, images = digits, load_digits().images.astype(np.float32) / 16
    length, time = ds[LENGTH].values, ds["time"].values
    mask = valid_mask(ds)
    assert sorted(np.unique(length)) == [6, 7, 8]  # gap 0.3 of 8 steps: 0, 1 or 2 rows removed
    assert (np.diff(time, axis=1) > 0).all() and (ds["pixels"].values[~mask] == 0).all()
    rows = np.where(mask, time, 0).astype(int)  # a valid step's time is its row in the image
    samples = np.arange(ds.sizes["sample"])[:, None]
    np.testing.assert_array_equal(ds["pixels"].values[mask], images[samples, rows][mask])
    removed = ~((rows[:, :, None] == np.arange(8)) & mask[:, :, None]).any(1)  # (sample, row)
    largest = removed[length == 6]
    assert (largest == gap_mask(8, 0.3).numpy()).all()  # the protocol's centred 30 % gap
    assert (removed[length == 7].sum(1) == 1).all() and not removed[length == 8].any()


def test_gapped_digits_are_seeded(digits):
    again = pde_data.generate_gapped_digits(seed=1, gap=0.3)
    xr.testing.assert_identical(again, digits)
    other = pde_data.generate_gapped_digits(seed=2, gap=0.3)
    assert not np.array_equal(other[LENGTH], digits[LENGTH])
    with pytest.raises(ValueError, match="gap: expected a fraction in \\[0, 1\\)"):
        pde_data.generate_gapped_digits(gap=1.0)


# -- files ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("which", ["degradation", "digits", "whole digits"])
def test_netcdf_round_trip(tmp_path, which, degradation, digits):
    ds = {"degradation": degradation, "digits": digits, "whole digits": pde_data.generate_gapped_digits()}[which]
    path = pde_data.save(ds, tmp_path / "set.nc")
    with pde_data.open_source(path).dataset as back:
        xr.testing.assert_identical(back.load(), ds)


# -- SequenceDataset -------------------------------------------------------------------------------------------

def _expected(ds, samples):
    """``x``, ``dt``, ``mask`` of ``samples`` from the whole in-memory set."""
    sub = ds.isel(sample=samples)
    mask = torch.from_numpy(valid_mask(sub))
    return to_tensor(sub, INPUTS), time_steps(sub).masked_fill(~mask, 1.0), mask


def test_read_batch_layout_from_memory_and_file(degradation, seq_file):
    split = np.array([1, 4, 5, 6, 11, 15])
    items = [3, 0, 5, 3]
    x0, dt0, mask0 = _expected(degradation, split[items])
    for source in (degradation, seq_file, pde_data.open_source(seq_file)):
        for cache in (False, True):
            data = pde_data.SequenceDataset(source, INPUTS, ["rul"], indices=split, cache=cache)
            batch = data.read_batch(items)
            x, y, dt, mask = batch.inputs, batch.targets, batch.dt, batch.mask
            assert len(data) == 6 and x.shape == (4, 9, 2) and y.shape == (4, 1) and mask.dtype == torch.bool
            torch.testing.assert_close(x, x0)
            torch.testing.assert_close(y[:, 0], torch.as_tensor(degradation["rul"].values[split[items]]).float())
            torch.testing.assert_close(dt, dt0)
            assert torch.equal(mask, mask0) and (dt > 0).all()


def test_read_batch_per_step_and_label_targets(degradation, digits):
    y = pde_data.SequenceDataset(degradation, INPUTS, ["rul_step"]).read_batch([2, 7]).targets
    assert y.shape == (2, 9, 1)
    torch.testing.assert_close(y[..., 0], torch.as_tensor(degradation["rul_step"].values[[2, 7]]).float())
    batch = pde_data.SequenceDataset(digits, ["pixels"], ["label"]).read_batch([0, 1, 2])
    x, y = batch.inputs, batch.targets
    assert x.shape == (3, 8, 8) and y.dtype == torch.int64 and y.tolist() == digits["label"].values[:3].tolist()
    gap_steps = torch.as_tensor(np.diff(digits["time"].values[:3], axis=1, prepend=-1.0)).float()
    torch.testing.assert_close(batch.dt, gap_steps.masked_fill(~batch.mask, 1.0))
    alone = pde_data.SequenceDataset(digits, ["pixels"], ()).read_batch([0, 1, 2])  # no targets: None
    assert alone.targets is None and torch.equal(alone.inputs, x) and torch.equal(alone.mask, batch.mask)


def test_dataloader_workers_yield_read_batch(seq_file):
    data = pde_data.SequenceDataset(seq_file, INPUTS, ["rul"], indices=np.arange(2, 14))
    loader = torch.utils.data.DataLoader(data, batch_size=5, num_workers=2)
    batches = list(loader)
    assert [b.inputs.shape[0] for b in batches] == [5, 5, 2]
    for k, batch in enumerate(batches):
        want = data.read_batch(range(5 * k, min(5 * k + 5, 12)))
        assert isinstance(batch, pde_data.Batch) and len(batch.tensors()) == len(want.tensors()) == 4
        for got, expected in zip(batch.tensors(), want.tensors()):
            assert torch.equal(got, expected)


def test_dataset_errors_name_parameters(degradation):
    with pytest.raises(ValueError, match="inputs: expected variables of the data set; missing \\['speed'\\]"):
        pde_data.SequenceDataset(degradation, ["speed"], ["rul"])
    with pytest.raises(ValueError, match="inputs: expected sequence variables"):
        pde_data.SequenceDataset(degradation, ["rul"], ["rul"])
    with pytest.raises(ValueError, match="targets: expected all per-sequence"):
        pde_data.SequenceDataset(degradation, INPUTS, ["rul", "rul_step"])
    with pytest.raises(ValueError, match="indices: expected sample indices in \\[0, 16\\)"):
        pde_data.SequenceDataset(degradation, INPUTS, ["rul"], indices=[16])


# -- normalizers -----------------------------------------------------------------------------------------------

def test_normalizer_ignores_padding(degradation):
    mask = valid_mask(degradation)
    norm = pde_data.fit_sequence_normalizer(degradation, INPUTS, indices=range(10), chunk_size=3)
    valid = np.stack([degradation[v].values[:10][mask[:10]] for v in INPUTS], axis=1)
    torch.testing.assert_close(norm.shift, torch.as_tensor(valid.mean(0)).float())
    torch.testing.assert_close(norm.scale, torch.as_tensor(valid.std(0) + 1e-8).float())
    noisy = degradation.copy(deep=True)
    for v in INPUTS:
        noisy[v].values[~mask] = 1e6
    again = pde_data.fit_sequence_normalizer(noisy, INPUTS, indices=range(10))
    torch.testing.assert_close(again.shift, norm.shift)
    torch.testing.assert_close(again.scale, norm.scale)
    rul = pde_data.fit_sequence_normalizer(degradation, ["rul"], method="minmax")
    assert rul.shift.item() == pytest.approx(degradation["rul"].min().item(), rel=1e-6)


def test_normalizer_and_dataset_read_through_one_source(degradation, seq_file):
    """A Source of the file serves the fit and the dataset (the same values as the in-memory set); a failed
    read is one line naming the file and the samples."""
    source = pde_data.open_source(seq_file)
    for kind in ("gaussian", "minmax"):
        fitted = pde_data.fit_sequence_normalizer(source, INPUTS, indices=range(10), method=kind, chunk_size=4)
        expected = pde_data.fit_sequence_normalizer(degradation, INPUTS, indices=range(10), method=kind)
        assert fitted.method == kind and fitted.shift.shape == (2,)
        torch.testing.assert_close(fitted.shift, expected.shift)
        torch.testing.assert_close(fitted.scale, expected.scale)
    data = pde_data.SequenceDataset(source, INPUTS, ["rul_step"], indices=[3, 4, 5, 9])
    assert data.source is source
    broken = degradation.copy(deep=True)
    broken["time"].values[4, 2] = broken["time"].values[4, 1]  # a step of 0 in sample 4
    with pytest.raises(pde_data.DataReadError, match=r"^in-memory data: reading sample 4\.\.5 failed: time "):
        pde_data.SequenceDataset(broken, INPUTS, ["rul"], indices=[3, 4, 5]).read_batch([1, 2])


def test_normalizers_encode_valid_steps_and_keep_padding_zero(degradation):
    from operators.training.tasks import Normalizers  # the run's processor: the datasets read the data's units

    norm = pde_data.fit_sequence_normalizer(degradation, INPUTS)
    out = pde_data.fit_sequence_normalizer(degradation, ["rul"])
    data = pde_data.SequenceDataset(degradation, INPUTS, ["rul"])
    raw = data.read_batch([0, 1, 2])
    assert not raw.inputs[~raw.mask].any()
    batch = Normalizers(norm, out).encode_batch(data.read_batch([0, 1, 2]))
    x, mask = batch.inputs, batch.mask
    torch.testing.assert_close(x[mask], norm.encode(raw.inputs)[mask])
    assert (x[~mask] == 0).all()
    torch.testing.assert_close(batch.targets, out.encode(raw.targets))
    with pytest.raises(ValueError, match="variables: expected float variables"):
        pde_data.fit_sequence_normalizer(degradation, ["length"])


# -- the command line -------------------------------------------------------------------------------------------

def test_generate_degradation_command(tmp_path):
    out = tmp_path / "seq.nc"
    args = ["generate", "degradation", "--out", out, "--n", "12", "--min-length", "4", "--max-length", "7",
            "--seed", "3"]
    done = run_cli(*args)
    assert done.returncode == 0, done.stderr
    with pde_data.open_source(out).dataset as ds:
        expected = pde_data.generate_degradation(12, min_length=4, max_length=7, seed=3)
        written = ds.load()
        spec = pde_data.GenerationSpec.from_json(json.loads(written.attrs.pop("circuitop_generator")))
        assert spec == pde_data.GenerationSpec("degradation", 12, 3, {"min_length": 4, "max_length": 7})
        xr.testing.assert_identical(written, expected)  # the library's set, and the spec that made it
    from operators.cli import main

    assert main([str(a) for a in args]) == 1  # refuses to overwrite
    assert main([str(a) for a in args] + ["--overwrite"]) == 0


def test_generate_digits_command(tmp_path, capsys):
    out = tmp_path / "digits.nc"
    done = run_cli("generate", "digits", "--out", out, "--gap", "0.3", "--seed", "1")
    assert done.returncode == 0, done.stderr
    with pde_data.open_source(out).dataset as ds:
        assert ds["pixels"].dims == ("sample", "time", "feature") and LENGTH in ds
        mask = pde_data.SequenceDataset(out, ["pixels"], ["label"]).read_batch([0, 1]).mask
        assert mask.sum(1).tolist() == ds[LENGTH].values[:2].tolist()
    from operators.cli import main

    assert main(["generate", "digits", "--out", str(tmp_path / "bad.nc"), "--gap", "1.5"]) == 1
    assert "--gap: expected a fraction in [0, 1), found 1.5" in capsys.readouterr().err
