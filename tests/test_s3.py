"""Data in an object store: a real S3-protocol server on 127.0.0.1 (moto's server mode, as s3fs's own tests use),
started by the tests and stopped after. ``generate --format zarr --shards 4 --workers 2 --out s3://...`` writes one
Zarr store region by region from Dask workers, equal bit for bit to the store one process writes locally; ``train``
on it equals training on the local store, and its credentials reach no file of the run; a sharded store resumes,
keeping the regions whose chunks match their records; an unfinished store is refused."""

from __future__ import annotations

import json
import re

import pytest
import torch
import zarr

import pde_data
from bench._s3 import KEY, SECRET, S3Server
from operators.cli import main
from operators.training import load_checkpoint
from pde_data.core import remote
from pde_data.formats import zarr_store
from pde_data.generate.registry import GenerationSpec
from pde_data.generate.sharded_zarr import RECORDS
from test_remote import TINY, _no_options_left  # noqa: F401 - the autouse fixture, here too

GEN = ["generate", "darcy", "--n", "12", "--n-grid", "16", "--threads", "1", "--format", "zarr"]
SPEC = GenerationSpec("darcy", n=12, seed=0, params={"n_grid": 16})


@pytest.fixture(scope="module")
def s3():
    server = S3Server()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def stores(s3, tmp_path_factory):
    """The same set three ways: one process on disk, 4 Dask regions on disk, 4 Dask regions in the bucket."""
    folder = tmp_path_factory.mktemp("s3")
    assert main([*GEN, "--out", str(folder / "one.zarr")]) == 0
    assert main([*GEN, "--out", str(folder / "sharded.zarr"), "--shards", "4", "--workers", "2"]) == 0
    assert main([*GEN, "--out", s3.url("d.zarr"), "--shards", "4", "--workers", "2", *s3.arguments()]) == 0
    remote._DEFAULT.clear()
    return folder


def _chunks(path: str) -> tuple[int, str]:
    return zarr_store.digest(path, range(12))


def test_a_store_written_by_dask_workers_into_a_bucket_equals_one_process_on_disk(s3, stores):
    remote.register(s3.url("d.zarr"), s3.options())
    local, sharded, bucket = str(stores / "one.zarr"), str(stores / "sharded.zarr"), s3.url("d.zarr")
    assert _chunks(local) == _chunks(sharded) == _chunks(bucket) and _chunks(local)[0] > 0
    assert not s3.filesystem().exists(f"{s3.bucket}/d.zarr/{RECORDS}")
    source = pde_data.open_source(bucket)
    assert source.format == "zarr" and torch.equal(source.read(["u"], range(12)),
                                                   pde_data.open_source(local).read(["u"], range(12)))
    manifest = zarr.open_group(sharded, mode="r").attrs[zarr_store.MANIFEST_ATTR]
    assert [(s["start"], s["stop"]) for s in manifest["shards"]] == [(0, 3), (3, 6), (6, 9), (9, 12)]


def test_training_on_the_bucket_equals_training_on_disk_and_keeps_no_credential(s3, stores, tmp_path, capsys):
    common = ["--model", "fno", "--input", "a", "--target", "u", "--split", "8,2,2", "--epochs", "2",
              "--batch-size", "4", "--threads", "1", "--no-progress", *TINY]
    assert main(["train", "--data", str(stores / "sharded.zarr"), "--out", str(tmp_path / "local"), *common]) == 0
    assert main(["train", "--data", s3.url("d.zarr"), "--out", str(tmp_path / "s3"), *common, *s3.arguments()]) == 0
    a, b = load_checkpoint(tmp_path / "local" / "last.pt"), load_checkpoint(tmp_path / "s3" / "last.pt")
    assert all(torch.equal(a["model"][k], v) for k, v in b["model"].items())
    assert b["spec"]["data"]["storage"] == {"endpoint_url": s3.endpoint}
    for path in (tmp_path / "s3").rglob("*"):
        if path.is_file():
            assert KEY.encode() not in path.read_bytes() and SECRET.encode() not in path.read_bytes(), path
    assert SECRET not in capsys.readouterr().err


def test_a_missing_key_in_the_bucket_is_one_line(s3, tmp_path, capsys):
    assert main(["info", s3.url("nothing.nc"), *s3.arguments()]) == 1
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert re.search(r"no such file: s3://bucket/nothing\.nc", line) and SECRET not in line, line


def _interrupted(store: str, keep: list[int]) -> dict:
    """``store`` as a run killed after writing the regions ``keep`` leaves it: marked incomplete, with those
    regions' records; the others' chunks gone. Returns the manifest it had."""
    group = zarr.open_group(store, mode="r+")
    manifest = group.attrs[zarr_store.MANIFEST_ATTR]
    group.attrs[zarr_store.INCOMPLETE] = "killed"
    zarr.consolidate_metadata(group.store)
    fs, root = zarr_store.filesystem(store)
    fs.makedirs(f"{root}/{RECORDS}", exist_ok=True)
    for shard in manifest["shards"]:
        if shard["index"] in keep:
            name = f"shard-{shard['index']:05d}-of-00004.json"
            fs.pipe_file(f"{root}/{RECORDS}/{name}", json.dumps(shard).encode())
        else:
            for i in range(shard["start"], shard["stop"]):
                fs.rm(f"{root}/u/c/{i}", recursive=True)
    return manifest


@pytest.mark.filterwarnings("ignore:Consolidated metadata")
def test_a_sharded_store_resumes_keeping_the_regions_whose_chunks_match(stores, tmp_path):
    """Regions 0 and 1 recorded, 2 and 3 missing, and a chunk of region 1 damaged: the unfinished store is refused
    by readers; the same call again makes regions 1, 2, 3 and leaves region 0's chunks untouched."""
    import shutil

    store = tmp_path / "d.zarr"
    shutil.copytree(stores / "sharded.zarr", store)
    before = _interrupted(str(store), keep=[0, 1])
    (store / "u" / "c" / "4" / "0" / "0").write_bytes(b"damaged")
    with pytest.raises(ValueError, match="expected a complete Zarr store, found one whose writing did not finish"):
        pde_data.open_source(store)
    untouched = (store / "u" / "c" / "0" / "0" / "0").stat().st_mtime_ns
    manifest = pde_data.generate_zarr_sharded(SPEC, store, shards=4, workers=2)
    assert [s.to_json() for s in manifest.shards] == before["shards"]
    assert _chunks(str(store)) == _chunks(str(stores / "one.zarr"))
    assert (store / "u" / "c" / "0" / "0" / "0").stat().st_mtime_ns == untouched
    assert (store / "u" / "c" / "4" / "0" / "0").read_bytes() != b"damaged" and not (store / RECORDS).exists()
    assert pde_data.open_source(store).sizes["sample"] == 12


def test_a_store_made_otherwise_is_refused_and_other_things_are_never_replaced(stores, tmp_path):
    other = GenerationSpec("darcy", n=12, seed=1, params={"n_grid": 16})
    with pytest.raises(FileExistsError, match=r"found one made otherwise \(seed: 1 here, 0 there\); pass overwrite"):
        pde_data.generate_zarr_sharded(other, stores / "sharded.zarr", shards=4, workers=1)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("a user's file")
    with pytest.raises(FileExistsError, match="no store; it is left as it is"):
        pde_data.generate_zarr_sharded(SPEC, tmp_path / "mine", shards=4, workers=1, overwrite=True)
    assert (tmp_path / "mine" / "notes.txt").read_text() == "a user's file"
