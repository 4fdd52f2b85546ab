"""Data behind a URL: a real HTTP server on 127.0.0.1 (aiohttp's static files, which answer range requests), started
by the tests and stopped after. ``info``, ``train`` (in memory and streamed by 2 workers), ``--resume``,
``evaluate`` and ``predict`` read the URL as they read the same file on disk, bit for bit; missing, forbidden
and unreachable URLs and a file that changes are one line each; credentials never reach a run's files."""

from __future__ import annotations

import re
import shutil

import numpy as np
import pytest
import torch
import xarray as xr

import pde_data
from bench._http import SECRET, Server
from operators.cli import main
from operators.training import load_checkpoint
from pde_data.core import remote

TINY = ["--config", "n_modes=4", "width=8", "n_layers=2"]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A server over a folder holding ``ns.nc``: 12 samples of 6 frames of a smooth 16² field."""
    root = tmp_path_factory.mktemp("served")
    rng = np.random.default_rng(0)
    x = np.linspace(0, 2 * np.pi, 16, endpoint=False)
    phase = rng.uniform(0, 2 * np.pi, (12, 1, 1, 1))
    t = np.arange(6)[None, :, None, None]
    u = np.sin(x[None, None, :, None] + 0.3 * t + phase) * np.cos(x[None, None, None, :] - 0.2 * t)
    pde_data.save(xr.Dataset({"u": (("sample", "time", "x", "y"), u.astype("float32"))},
                             coords={"time": np.arange(6.0)}),
                  root / "ns.nc")
    server = Server(root)
    yield server, root
    server.stop()


@pytest.fixture(autouse=True)
def _no_options_left():
    yield
    remote._OPTIONS.clear()
    remote._DEFAULT.clear()


def _train(data, out, *extra):
    return ["train", "--data", data, "--model", "fno", "--out", str(out), "--window", "2", "--split", "8,2,2",
            "--epochs", "2", "--batch-size", "4", "--threads", "1", "--no-progress", *TINY, *extra]


def test_info_reads_a_url_instead_of_a_local_path(served, capsys):
    server, _ = served
    assert main(["info", server.url("ns.nc")]) == 0
    out = capsys.readouterr().out
    assert "netcdf" in out and "no such file" not in out and "sample" in out


def test_a_url_reads_as_the_file_on_disk_and_only_what_it_reads(served):
    server, root = served
    local, url = pde_data.open_source(root / "ns.nc"), pde_data.open_source(server.url("ns.nc"))
    assert url.path == server.url("ns.nc") and url.format == local.format == "netcdf"
    assert torch.equal(url.read(["u"], [3, 7], slice(1, 4)), local.read(["u"], [3, 7], slice(1, 4)))
    assert url.fingerprint() == local.fingerprint()



def test_a_read_at_a_url_fetches_the_blocks_it_touches_not_the_file(served):
    """A 16 MB file (four blocks and more): one sample's read fetches at most the two blocks it may straddle."""
    server, root = served
    u = np.random.default_rng(1).random((40, 6, 128, 128), dtype=np.float32)
    pde_data.save(xr.Dataset({"u": (("sample", "time", "x", "y"), u)}), root / "big.nc")
    size = (root / "big.nc").stat().st_size
    assert size > 3 * remote.BLOCK_BYTES
    source = pde_data.open_source(server.url("big.nc"))
    before = server.bytes
    assert np.array_equal(source.read(["u"], [20]).numpy()[0, :, 0], u[20])
    assert server.bytes - before <= 2 * remote.BLOCK_BYTES


def test_a_window_read_at_a_url_fetches_its_chunks_in_one_round_of_requests(served):
    """A sample's frames (one compressed HDF5 chunk each) are asked for at once, as one range where they lie
    together: one request for the read (once HDF5's chunk index of the sample is at hand), and about the bytes of
    those chunks (within the prefetch's gap), not a 4 MiB block."""
    server, root = served
    u = np.random.default_rng(3).random((40, 6, 128, 128), dtype=np.float32)
    pde_data.save(xr.Dataset({"u": (("sample", "time", "x", "y"), u)}), root / "window.nc")
    source = pde_data.open_source(server.url("window.nc"))
    source.read(["u"], [30], slice(3, 6))  # fetches the chunk index's nodes of sample 30 too (blocks, kept)
    requests, served_bytes = server.requests, server.bytes
    assert np.array_equal(source.read(["u"], [30], slice(0, 3)).numpy()[0, :, 0], u[30, 0:3])
    assert server.requests - requests == 1
    assert server.bytes - served_bytes <= 3 * u[0, 0].nbytes + remote.PREFETCH_GAP < remote.BLOCK_BYTES


def test_train_resume_evaluate_and_predict_on_a_url_equal_the_local_file(served, tmp_path, capsys):
    server, root = served
    assert main(_train(str(root / "ns.nc"), tmp_path / "local")) == 0
    url = server.url("ns.nc")
    assert main(_train(url, tmp_path / "remote", "--epochs", "1")) == 0
    assert main(_train(url, tmp_path / "remote", "--resume")) == 0  # the stored URL reopened
    a, b = load_checkpoint(tmp_path / "local" / "last.pt"), load_checkpoint(tmp_path / "remote" / "last.pt")
    assert b["spec"]["data"]["path"] == url and b["epoch"] == 2
    assert all(torch.equal(a["model"][k], v) for k, v in b["model"].items())
    assert main(["evaluate", "--run", str(tmp_path / "remote"), "--threads", "1"]) == 0
    assert main(["predict", "--run", str(tmp_path / "remote"), "--data", url, "--out", str(tmp_path / "p.nc"),
                 "--threads", "1"]) == 0
    assert xr.open_dataset(tmp_path / "p.nc").sizes["sample"] == 12


def test_streaming_workers_read_a_url_with_credentials_that_no_file_keeps(served, tmp_path, capsys):
    """2 loader workers stream the authenticated URL (each opens it with the options the Source carries in memory);
    the token is in no file of the run folder."""
    server, root = served
    url, out = server.url("ns.nc", "auth/"), tmp_path / "run"
    assert main(_train(url, out, "--cache", "stream", "--workers", "2",
                       "--storage-option", f"headers.Authorization=Bearer {SECRET}", "timeout=30")) == 0
    assert load_checkpoint(out / "last.pt")["spec"]["data"]["storage"] == {"timeout": 30}
    for path in out.rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path
    assert SECRET not in capsys.readouterr().err


@pytest.mark.parametrize("case, expected", [
    ("missing", r"no such file: http://127\.0\.0\.1:\d+/nothing\.nc \(the server has nothing at that address\)"),
    ("forbidden", r"http://127\.0\.0\.1:\d+/forbidden/ns\.nc: expected a readable file, found access forbidden "
                  r"\(403\)"),
    ("refused", r"http://127\.0\.0\.1:1/ns\.nc: expected a readable file, found no server answering "
                r"\(connection refused\)"),
])
def test_an_unreadable_url_is_one_line_without_credentials(served, tmp_path, capsys, case, expected):
    server, _ = served
    url = {"missing": server.url("nothing.nc"), "forbidden": server.url("ns.nc", "forbidden/"),
           "refused": "http://user:pw@127.0.0.1:1/ns.nc?token=abc"}[case]
    assert main(_train(url, tmp_path / "run")) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len([line for line in err if "error" in line]) == 1, err
    assert re.search(expected, err[-1]), err[-1]
    assert "pw" not in err[-1] and "abc" not in err[-1] and not (tmp_path / "run").exists()


def test_a_request_that_times_out_is_tried_again_then_named_in_one_line(served, monkeypatch):
    """Requests time out after 0.3 s here: one stalled request (of the open, or of a read) is tried again and the
    read equals the file's; a server that stalls every time fails after TRIES tries, in one line."""
    monkeypatch.setattr(remote, "TIMEOUT_SECONDS", 0.3)
    server, root = served
    u = np.random.default_rng(2).random((40, 6, 128, 128), dtype=np.float32)  # 16 MB: four blocks and more
    pde_data.save(xr.Dataset({"u": (("sample", "time", "x", "y"), u)}), root / "large.nc")
    server.stall, server.stalls = 1.0, 1
    source = pde_data.open_source(server.url("large.nc", "slow/"))  # its first request stalls
    server.stalls = 1
    assert np.array_equal(source.read(["u"], [20]).numpy()[0, :, 0], u[20])  # a block read after the open stalls
    assert server.stalls == 0
    server.stalls = 10
    with pytest.raises(OSError, match=rf"^http://127\.0\.0\.1:\d+/slow/ns\.nc: expected a readable file, found no "
                                      rf"answer in time \(timed out, {remote.TRIES} tries\)$"):
        remote.stamp(server.url("ns.nc", "slow/"))
    assert 10 - server.stalls >= remote.TRIES  # each try asked (HTTP info may ask twice: HEAD, then GET)
    server.stalls = 0


def test_a_file_that_changes_at_its_url_is_refused(served, tmp_path, monkeypatch):
    """Asked again after every read, at most every RECHECK_SECONDS (0 here)."""
    monkeypatch.setattr(remote, "RECHECK_SECONDS", 0.0)
    server, root = served
    shutil.copyfile(root / "ns.nc", root / "changing.nc")
    source = pde_data.open_source(server.url("changing.nc"))
    source.verify()
    with open(root / "changing.nc", "ab") as fh:
        fh.write(b"\0" * 1000)
    with pytest.raises(OSError, match="changed while it was being read"):
        source.verify()


def test_storage_options_are_for_urls_and_secrets_are_never_public():
    with pytest.raises(ValueError, match="storage_options: expected a URL"):
        pde_data.open_source("local.nc", storage_options={"anon": True})
    options = remote.nested(dict(remote.parse_option(t) for t in
                                 ["endpoint_url=http://h:9000", "key=AK", "secret=SK", "client_kwargs.region_name=x",
                                  "headers.Authorization=Bearer t", "anon=false"]))
    assert remote.public(options) == {"endpoint_url": "http://h:9000", "client_kwargs": {"region_name": "x"},
                                      "anon": False}
    assert remote.display("https://u:p@host:8443/a/b.h5?sig=1#f") == "https://host:8443/a/b.h5"
    assert not remote.is_url("/data/x.nc") and not remote.is_url("file:///x.nc") and remote.is_url("s3://b/k")


def test_a_source_carries_its_url_options_where_it_is_unpickled(served):
    """A loader worker started by spawn (not fork) inherits nothing: the Source's pickle brings its options along
    (in memory only)."""
    import pickle

    server, _ = served
    url = server.url("ns.nc", "auth/")
    source = pde_data.open_source(url, storage_options={"headers": {"Authorization": f"Bearer {SECRET}"}})
    state = pickle.dumps(source)
    remote._OPTIONS.clear()
    with pytest.raises(OSError, match="403"):
        remote.stamp(url)
    assert torch.equal(pickle.loads(state).read(["u"], [1]), source.read(["u"], [1]))
