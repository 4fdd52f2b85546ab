"""The streaming normalizer fit equals the in-memory fit, block by block, on files written in the test."""

import numpy as np
import pytest
import torch
import xarray as xr

import pde_data
from pde_data.datasets.normalize import fit_normalizer

EPS = 1e-8
DIMS = ("sample", "time", "x", "y")


def _fields(n=6, t=9, nx=8, ny=5, *, offset=0.0, spread=1.0, seed=0) -> xr.Dataset:
    """Time-dependent 2D fields ``u``, ``v`` (sample, time, x, y), float32, ``v`` on another scale."""
    rng = np.random.default_rng(seed)
    u = offset + spread * rng.standard_normal((n, t, nx, ny))
    v = 3.0 - 2.0 * offset + 0.5 * spread * rng.standard_normal((n, t, nx, ny))
    return xr.Dataset({"u": (DIMS, u.astype(np.float32)), "v": (DIMS, v.astype(np.float32))},
                      coords={"time": np.linspace(0.0, 1.0, t), "x": np.arange(nx) / nx, "y": np.arange(ny) / ny})


def _reference(ds: xr.Dataset, indices, kind: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Shift and scale ``(channels,)`` from the whole split in memory (float64, over samples, time, space)."""
    x = pde_data.to_tensor(ds.isel(sample=indices).load(), ["u", "v"], dtype=torch.float64)  # (b, t, c, x, y)
    dims = (0, 1, 3, 4)
    if kind == "gaussian":
        return x.mean(dims), x.std(dims, correction=0) + EPS
    low, high = x.amin(dims), x.amax(dims)
    return low, high - low + EPS


def _check(norm, ds, indices, kind):
    shift, scale = _reference(ds, indices, kind)
    assert norm.shift.shape == (2, 1, 1)
    torch.testing.assert_close(norm.shift.flatten().double(), shift, rtol=1e-6, atol=0)
    torch.testing.assert_close(norm.scale.flatten().double(), scale, rtol=1e-6, atol=0)


@pytest.mark.parametrize("kind", ["gaussian", "minmax"])
@pytest.mark.parametrize("max_bytes", [8 * 2 * 40 * 2, 8 * 2 * 40 * 9 * 2, 64 * 2**20])
def test_streaming_fit_equals_in_memory_fit(tmp_path, kind, max_bytes):
    """Blocks of 2 frames (5 per sample), of 2 whole samples, or the whole split in one block."""
    ds = _fields()
    lazy = pde_data.open_source(pde_data.save(ds, tmp_path / "fields.nc")).dataset
    _check(fit_normalizer(lazy, ["u", "v"], method=kind, max_bytes=max_bytes), ds, np.arange(6), kind)
    lazy.close()


@pytest.mark.parametrize("kind", ["gaussian", "minmax"])
def test_training_subset_only(tmp_path, kind):
    ds = _fields(n=8)
    ds["u"][[1, 6]] = 1e6  # samples outside the training split must not move the statistics
    train = [0, 2, 3, 5, 7]
    lazy = pde_data.open_source(pde_data.save(ds, tmp_path / "fields.nc")).dataset
    norm = fit_normalizer(lazy, ["u", "v"], indices=[7, 0, 3, 2, 5], method=kind, max_bytes=8 * 2 * 40 * 3)
    _check(norm, ds, train, kind)
    lazy.close()


def test_large_offset_has_no_cancellation(tmp_path):
    """Values 1e4 + N(0, 1e-2): E[x²] - E[x]² in float32 loses every digit of the variance; M2 does not."""
    ds = _fields(n=4, t=16, nx=16, ny=16, offset=1e4, spread=1e-2, seed=3)
    lazy = pde_data.open_source(pde_data.save(ds, tmp_path / "offset.nc")).dataset
    norm = fit_normalizer(lazy, ["u", "v"], max_bytes=8 * 2 * 256 * 3)
    _check(norm, ds, np.arange(4), "gaussian")
    x = torch.from_numpy(ds["u"].values).flatten()  # float32
    naive = ((x * x).mean() - x.mean() ** 2).clamp_min(0).sqrt()
    assert abs(naive.item() - norm.scale[0].item()) > 0.5 * norm.scale[0].item()  # the naive way fails
    lazy.close()


def test_chunk_size_caps_samples_and_bad_arguments():
    ds = _fields(n=5)
    capped = fit_normalizer(ds, ["u", "v"], chunk_size=2)
    _check(capped, ds, np.arange(5), "gaussian")
    with pytest.raises(ValueError, match=r"indices: expected sample indices in \[0, 5\), found 0 .. 5"):
        fit_normalizer(ds, ["u"], indices=[0, 5])
    with pytest.raises(ValueError, match="max_bytes, chunk_size: expected positive integers"):
        fit_normalizer(ds, ["u"], max_bytes=0)
    with pytest.raises(ValueError, match="expected at least one training sample"):
        fit_normalizer(ds, ["u"], indices=[])


def test_blocks_stay_within_max_bytes(monkeypatch):
    """Every read holds at most ``max_bytes`` of float64 values; all frames of the split are read once."""
    reads, read = [], pde_data.Source.read

    def recording(self, variables, samples, times=None, **kwargs):
        out = read(self, variables, samples, times, **kwargs)
        reads.append(out)
        return out

    monkeypatch.setattr(pde_data.Source, "read", recording)
    ds = _fields(n=4, t=9)  # one frame of u and v: 2 * 8 * 5 values
    frame_bytes = 8 * 2 * 40
    # 3 samples of 9 frames: 3 blocks of <= 4 frames each; 2 whole samples per block; 1 frame per block
    for max_bytes, n_reads in [(frame_bytes * 4, 3 * 3), (frame_bytes * 20, 2), (frame_bytes, 3 * 9)]:
        reads.clear()
        fit_normalizer(ds, ["u", "v"], indices=[0, 1, 3], max_bytes=max_bytes)
        assert len(reads) == n_reads
        assert all(t.numel() * 8 <= max_bytes for t in reads)
        assert sum(t.shape[0] * t.shape[1] for t in reads) == 3 * 9


def test_encode_in_place_gives_the_same_values():
    norm = pde_data.Normalizer("gaussian", torch.tensor([1.5, -2.0]).reshape(2, 1, 1), torch.tensor([0.3, 7.0]).reshape(2, 1, 1))
    x = torch.randn(3, 4, 2, 5, 6)  # (batch, time, channel, x, y)
    expected = norm.encode(x)
    got = norm.encode_(x)
    assert got is x and torch.equal(got, expected)
