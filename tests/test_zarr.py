"""Zarr stores: ``generate --format zarr`` writes one Zarr v3 store (one sample per chunk, blosc lz4) equal to the NetCDF
set bit for bit; ``info``, ``train`` and the opener read it by content, on disk and over HTTP (a real aiohttp
server on 127.0.0.1, as in test_remote); what cannot be written is one line."""

from __future__ import annotations

import re

import pytest
import torch
import zarr

import pde_data
from operators.cli import main
from operators.training import load_checkpoint
from test_remote import TINY, Server

GEN = ["generate", "darcy", "--n", "12", "--n-grid", "16", "--threads", "1"]


@pytest.fixture(scope="module")
def sets(tmp_path_factory):
    folder = tmp_path_factory.mktemp("zarr")
    assert main([*GEN, "--out", str(folder / "d.zarr"), "--format", "zarr"]) == 0
    assert main([*GEN, "--out", str(folder / "d.nc")]) == 0
    return folder


def test_a_zarr_store_holds_the_netcdf_set_bit_for_bit_one_sample_per_chunk(sets, capsys):
    store, nc = pde_data.open_source(sets / "d.zarr"), pde_data.open_source(sets / "d.nc")
    assert store.format == "zarr" and store.variables == nc.variables
    for name in nc.variables:
        read = dict(samples=range(12), dtype=torch.float64)
        assert torch.equal(store.read([name], **read), nc.read([name], **read))
    assert store.fingerprint().digest == nc.fingerprint().digest
    group = zarr.open_group(sets / "d.zarr", mode="r")
    arrays = {name: group[name] for name in nc.variables}
    assert all(a.chunks[0] == 1 and a.chunks[1:] == a.shape[1:] for a in arrays.values())
    assert all(type(a.compressors[0]).__name__ == "BloscCodec" and a.compressors[0].cname.value == "lz4"
               for a in arrays.values())
    assert main(["info", str(sets / "d.zarr")]) == 0
    assert "format: zarr" in capsys.readouterr().out


def test_a_sample_in_time_is_cut_into_chunks_of_whole_frames_of_about_chunk_bytes():
    """All of a sample's frames in one chunk where they fit, else as many whole frames as fit (at least one)."""
    import numpy as np
    import xarray as xr

    from pde_data.formats.zarr_store import CHUNK_BYTES, _chunks

    def field(frames: int, n: int) -> xr.DataArray:
        return xr.DataArray(np.zeros((1, frames, n, n), np.float32), dims=("sample", "time", "x", "y"))

    assert _chunks(field(21, 128)) == (1, 21, 128, 128)  # 1.3 MiB: the sample whole
    assert _chunks(field(200, 512)) == (1, CHUNK_BYTES // (4 * 512**2), 512, 512)  # 1 MiB frames: 4 per chunk
    assert _chunks(field(3, 2048)) == (1, 1, 2048, 2048)  # a 16 MiB frame: one per chunk


def test_training_on_a_zarr_store_equals_training_on_the_netcdf_set(sets, tmp_path):
    common = ["--model", "fno", "--input", "a", "--target", "u", "--split", "8,2,2", "--epochs", "2",
              "--batch-size", "4", "--threads", "1", "--no-progress", *TINY]
    assert main(["train", "--data", str(sets / "d.zarr"), "--out", str(tmp_path / "z"), *common]) == 0
    assert main(["train", "--data", str(sets / "d.nc"), "--out", str(tmp_path / "n"), *common]) == 0
    a, b = load_checkpoint(tmp_path / "z" / "last.pt"), load_checkpoint(tmp_path / "n" / "last.pt")
    assert all(torch.equal(a["model"][k], v) for k, v in b["model"].items())


def test_a_zarr_store_reads_over_http_with_its_consolidated_metadata(sets):
    server = Server(sets)
    try:
        url = pde_data.open_source(server.url("d.zarr"))
        local = pde_data.open_source(sets / "d.zarr")
        assert url.format == "zarr" and torch.equal(url.read(["u"], [3, 9]), local.read(["u"], [3, 9]))
    finally:
        server.stop()


def test_what_a_zarr_store_cannot_be_written_as_is_one_line(sets, tmp_path, capsys):
    cases = [([*GEN, "--out", str(sets / "d.zarr"), "--format", "zarr"], "found the store .*; pass --overwrite"),
             ([*GEN, "--out", str(tmp_path), "--format", "zarr", "--overwrite"], "no Zarr store; it is left as it is"),
             ([*GEN, "--out", "s3://bucket/d.nc"], "--out: a URL takes --format zarr .* found s3://bucket/d.nc with "
                                                     "--format netcdf")]
    for args, expected in cases:
        assert main(args) == 1
        line = capsys.readouterr().err.strip().splitlines()[-1]
        assert line.startswith("circuitop generate: error: ") and re.search(expected, line), line
    assert main([*GEN, "--out", str(sets / "d.zarr"), "--format", "zarr", "--overwrite"]) == 0


def test_the_writer_replaces_a_store_and_nothing_else(tmp_path):
    """Called from Python without the command's checks, the writer still never deletes a folder that is no store."""
    from pde_data.generate.registry import GenerationSpec
    from pde_data.generate.sharded import write_samples

    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "notes.txt").write_text("a user's file")
    spec = GenerationSpec("darcy", n=2, seed=0, params={"n_grid": 8})
    with pytest.raises(ValueError, match="a folder that is no store; it is left as it is"):
        write_samples(spec, range(2), folder, zarr=True)
    assert (folder / "notes.txt").read_text() == "a user's file"
    write_samples(spec, range(2), tmp_path / "s.zarr", zarr=True)
    write_samples(spec, range(2), tmp_path / "s.zarr", zarr=True)  # a store is replaced
    assert pde_data.open_source(tmp_path / "s.zarr").sizes["sample"] == 2
