"""Sharded generation on Dask: the same bits for any shards and workers, a manifest whose statistics equal a
full fit, resume after kill -9, corrupt and foreign shards named, real ``dask scheduler``/``dask worker``
processes, and a manifest folder through ``train``, ``evaluate`` and ``info``."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

import pde_data
from cli_run import ENV, ROOT, run_cli
from operators.cli import main
from pde_data.generate.registry import GenerationSpec, make_samples
from pde_data.formats.manifest import ManifestError, read_manifest
from pde_data.formats.verification import DamagedShards, verify_set
from pde_data.generate.sharded import PROGRESS_TOPIC, generate_sharded, write_samples

distributed = pytest.importorskip("distributed")

#: one tiny set per generator; n and blocks allow 8 shards
SPECS = {
    "order": GenerationSpec("order", 16, 42, {"n_points": 128}),
    "poisson": GenerationSpec("poisson", 16, 0, {"K": 4, "n_grid": 16}),
    "darcy": GenerationSpec("darcy", 16, 0, {"n_grid": 12}),
    "darcy_sweep": GenerationSpec("darcy", 16, 0, {"n_grid": 12, "beta": "0.5..2"}),  # a beta per sample (issue 44)
    "ns": GenerationSpec("ns", 16, 3, {"n_sim": 32, "n_out": 16, "t_final": 1.0, "n_records": 2, "dt": 1e-2,
                                       "batch_size": 2}),
    "swe": GenerationSpec("swe", 16, 4, {"n_grid": 16, "t_final": 0.1, "n_frames": 3, "batch_size": 2}),
    "degradation": GenerationSpec("degradation", 16, 0, {"min_length": 4, "max_length": 8}),
}


@pytest.fixture(scope="module")
def clusters():
    """Scheduler addresses of a 1-worker and a 2-worker local cluster (processes, one thread each)."""
    from distributed import LocalCluster

    kwargs = dict(threads_per_worker=1, processes=True, dashboard_address=":0")
    with LocalCluster(n_workers=1, **kwargs) as one, LocalCluster(n_workers=2, **kwargs) as two:
        yield one.scheduler_address, two.scheduler_address


def _flip_a_byte(path: Path) -> None:
    """Invert the file's middle byte in place (same size, other content)."""
    with open(path, "r+b") as fh:
        fh.seek(os.path.getsize(path) // 2)
        byte = fh.read(1)
        fh.seek(-1, 1)
        fh.write(bytes([byte[0] ^ 0xFF]))


def _bytes(folder) -> dict[str, bytes]:
    with pde_data.open_source(folder).dataset as ds:
        return {str(k): v.values.tobytes() for k, v in ds.data_vars.items()}


@pytest.mark.parametrize("kind", sorted(SPECS))
def test_one_shard_on_one_worker_and_eight_on_two_give_the_same_bits(tmp_path, clusters, kind):
    spec = SPECS[kind]
    one = generate_sharded(spec, tmp_path / "one", shards=1, device="cpu", scheduler=clusters[0])
    eight = generate_sharded(spec, tmp_path / "eight", shards=8, device="cpu", scheduler=clusters[1])
    assert len(one.shards) == 1 and len(eight.shards) == 8
    assert _bytes(tmp_path / "one") == _bytes(tmp_path / "eight")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the workers' thread count
    try:
        whole = make_samples(spec, range(spec.n))
    finally:
        torch.set_num_threads(threads)
    assert _bytes(tmp_path / "one") == {k: v.values.tobytes() for k, v in whole.data_vars.items()}
    assert not list(tmp_path.glob("*/shard-*.json")) and not list(tmp_path.glob("*/.*.tmp"))
    for name in pde_data.parameters_of(whole):  # each sample's value in the manifest too, however it is sharded
        for made in (one, eight):
            assert [v for shard in made.shards for v in shard.parameters[name]] == whole[name].values.tolist()


def test_manifest_records_the_set_and_its_statistics_equal_a_full_fit(tmp_path, clusters):
    spec = SPECS["ns"]
    manifest = generate_sharded(spec, tmp_path / "set", shards=5, device="cpu", scheduler=clusters[1])
    saved = json.loads((tmp_path / "set" / "manifest.json").read_text())
    assert saved["generator"] == spec.complete().to_json() and saved["versions"]["torch"] == torch.__version__
    assert [(s["start"], s["stop"]) for s in saved["shards"]] == [(0, 2), (2, 6), (6, 8), (8, 12), (12, 16)]
    for shard in manifest.shards:  # bytes and sha256 of the files
        assert shard.bytes == (tmp_path / "set" / shard.file).stat().st_size
        assert shard.sha256 == pde_data.formats.manifest.sha256_of(tmp_path / "set" / shard.file)
    with pde_data.open_source(tmp_path / "set").dataset as ds:
        values = ds["vorticity"].values.astype(np.float64)
    stats = manifest.statistics["vorticity"]
    assert stats["count"] == values.size
    scale = values.std()
    assert abs(stats["mean"] - values.mean()) <= 1e-6 * scale
    assert stats["std"] == pytest.approx(values.std(), rel=1e-6)
    fitted = pde_data.fit_normalizer(tmp_path / "set", ["vorticity"], indices=range(spec.n))
    shipped = pde_data.normalizer_from_stats(tmp_path / "set", ["vorticity"])  # what a run uses
    torch.testing.assert_close(shipped.shift, fitted.shift, rtol=1e-6, atol=1e-6 * scale)
    torch.testing.assert_close(shipped.scale, fitted.scale, rtol=1e-6, atol=0)


def test_corrupt_and_foreign_shards_are_named_and_a_rerun_repairs_them(tmp_path, clusters):
    spec = SPECS["darcy"]
    generate_sharded(spec, tmp_path / "set", shards=4, device="cpu", scheduler=clusters[1])
    good = {s.file: s.sha256 for s in read_manifest(tmp_path / "set").shards}
    shard = tmp_path / "set" / "shard-00002-of-00004.nc"
    with open(shard, "ab") as fh:  # a shard that grew
        fh.write(b"junk")
    with pytest.raises(ManifestError, match=r"shard-00002-of-00004.nc: expected \d+ bytes as the manifest records"):
        pde_data.open_source(tmp_path / "set").dataset
    # another set's shard 1 in its place
    import dataclasses
    generate_sharded(dataclasses.replace(spec, seed=1), tmp_path / "other", shards=4, device="cpu", scheduler=clusters[1])
    shutil.copy(tmp_path / "other" / "shard-00001-of-00004.nc", tmp_path / "set" / "shard-00001-of-00004.nc")
    with pytest.raises(ManifestError, match="shard-00001-of-00004.nc: expected"):
        pde_data.open_source(tmp_path / "set").dataset
    _flip_a_byte(tmp_path / "set" / "shard-00003-of-00004.nc")  # same size, other content: only sha256 tells
    with pytest.raises(DamagedShards) as damaged:
        verify_set(tmp_path / "set", full=True)
    problems = damaged.value.problems
    assert len(problems) == 3 and [p.split(": ")[0].rsplit("/", 1)[-1][:11] for p in problems] == [
        "shard-00001", "shard-00002", "shard-00003"]
    generate_sharded(spec, tmp_path / "set", shards=4, device="cpu", scheduler=clusters[1])  # the same call again
    assert {s.file: s.sha256 for s in read_manifest(tmp_path / "set").shards} == good
    assert verify_set(tmp_path / "set", full=True).hashed == 4


def test_a_folder_of_other_parameters_is_refused_unless_overwrite(tmp_path, capsys, clusters):
    args = ["generate", "darcy", "--n", "4", "--n-grid", "12", "--out", str(tmp_path / "set"), "--shards", "2",
            "--scheduler", clusters[1]]
    assert main(args) == 0
    capsys.readouterr()
    assert main([*args[:5], "16", *args[6:]]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("circuitop generate: error: ") and "made with other parameters" in err[-1]
    assert "n_grid: 16 here, 12 there" in err[-1] and "--overwrite" in err[-1]
    assert read_manifest(tmp_path / "set").generator["params"]["n_grid"] == 12
    assert main([*args[:5], "16", *args[6:], "--overwrite"]) == 0
    assert read_manifest(tmp_path / "set").generator["params"]["n_grid"] == 16
    assert main([*args[:5], "16", *args[6:9], "3", *args[10:]]) == 1  # another shard count: refused too
    assert "shards: 3 here, 2 there" in capsys.readouterr().err


NS = ["generate", "ns", "--n", "16", "--n-sim", "64", "--n-out", "16", "--t-final", "2", "--dt", "1e-2",
      "--batch-size", "2", "--device", "cpu", "--shards", "8"]


def _ns_spec() -> GenerationSpec:
    return GenerationSpec("ns", 16, 0, {"n_sim": 64, "n_out": 16, "t_final": 2.0, "dt": 1e-2, "batch_size": 2})


def _wait_for(condition, timeout: float = 120.0) -> None:
    end = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.1)


def test_kill_9_midway_then_the_same_command_completes_the_set(tmp_path, clusters):
    out = tmp_path / "set"
    cmd = [sys.executable, "-m", "operators.cli", *NS, "--out", str(out), "--workers", "2"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for(lambda: len(list(out.glob("shard-*.json"))) >= 2)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert not (out / "manifest.json").exists() and len(list(out.glob("shard-*.nc"))) < 8
    again = run_cli(*NS, "--out", out, "--workers", "2")
    assert again.returncode == 0, again.stderr[-2000:]
    reference = generate_sharded(_ns_spec(), tmp_path / "reference", shards=8, device="cpu", scheduler=clusters[1])
    assert [s.sha256 for s in read_manifest(out).shards] == [s.sha256 for s in reference.shards]
    assert sorted(p.name for p in out.iterdir()) == ["manifest.json"] + [f"shard-{i:05d}-of-00008.nc" for i in range(8)]


#: A ``dask worker --preload`` script: the first shard task to start, on whichever worker, writes its worker's
#: pid and shard into ``{handshake}/doomed.json`` and then blocks until that worker is killed; every other task
#: runs as written. So the kill lands mid-task, never after the set is complete.
_BLOCK_THE_FIRST_SHARD = '''
import functools, inspect, json, os, time
from pathlib import Path

import pde_data.generate.sharded

_HANDSHAKE = Path({handshake!r})
_write_samples = inspect.unwrap(pde_data.generate.sharded.write_samples)  # Dask may run a preload twice


@functools.wraps(_write_samples)
def _block_the_first(spec, samples, path, **kwargs):
    try:
        os.close(os.open(_HANDSHAKE / "claimed", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return _write_samples(spec, samples, path, **kwargs)
    (_HANDSHAKE / "doomed.tmp").write_text(json.dumps({{"pid": os.getpid(), "shard": Path(path).name}}))
    os.replace(_HANDSHAKE / "doomed.tmp", _HANDSHAKE / "doomed.json")
    while True:
        time.sleep(1)


pde_data.generate.sharded.write_samples = _block_the_first
'''

#: a set of 4 shards, small enough that the rerun of the killed task is quick
SMALL_NS = ["generate", "ns", "--n", "8", "--n-sim", "32", "--n-out", "16", "--t-final", "1", "--dt", "1e-2",
            "--batch-size", "2", "--device", "cpu", "--shards", "4"]


def test_a_real_scheduler_and_two_workers_survive_a_killed_worker(tmp_path):
    """A worker killed while its shard task runs: the scheduler sends that task out again, the progress bar
    counts one retry, and every shard has the bytes a run without the kill writes."""
    from distributed import Client

    def processing_counts(dask_scheduler) -> dict[str, int]:  # run on the scheduler (a local function: by value)
        """How many times the scheduler sent each shard task to a worker, from its transition log."""
        keys = [str(t.key) for t in dask_scheduler.transition_log if t.finish == "processing"]
        return {k: keys.count(k) for k in set(keys) if k.startswith("circuitop-shard-")}

    dask = Path(sys.executable).with_name("dask")
    file, handshake = tmp_path / "scheduler.json", tmp_path / "handshake"
    handshake.mkdir()
    preload = tmp_path / "block_the_first_shard.py"
    preload.write_text(_BLOCK_THE_FIRST_SHARD.format(handshake=str(handshake)))
    procs = [subprocess.Popen([str(dask), "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
                               "--scheduler-file", str(file)], env=ENV, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)]
    try:
        _wait_for(file.is_file, 60)
        address = json.loads(file.read_text())["address"]
        workers = {}
        for _ in range(2):
            worker = subprocess.Popen([str(dask), "worker", address, "--nthreads", "1", "--no-nanny",
                                       "--no-dashboard", "--host", "127.0.0.1", "--preload", str(preload)],
                                      cwd=ROOT, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            procs.append(worker)
            workers[worker.pid] = worker
        out = tmp_path / "set"
        gen = subprocess.Popen([sys.executable, "-m", "operators.cli", *SMALL_NS, "--out", str(out),
                                "--scheduler", address], cwd=ROOT, env=ENV, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
        procs.append(gen)  # stopped too if the test fails before it ends
        doomed = handshake / "doomed.json"
        _wait_for(lambda: doomed.is_file() or gen.poll() is not None)
        blocked = json.loads(doomed.read_text())  # raises if gen ended first
        with Client(address, timeout="30s") as client:
            # the task's start event (sent before it blocked) is on the scheduler, so the bar will see it
            _wait_for(lambda: any(msg["pid"] == blocked["pid"] for _, msg in client.get_events(PROGRESS_TOPIC)))
            workers[blocked["pid"]].send_signal(signal.SIGKILL)  # its task is running: Dask must rerun it elsewhere
            _, err = gen.communicate(timeout=300)
            assert gen.returncode == 0, err[-2000:]
            counts = client.run_on_scheduler(processing_counts)
    finally:
        for p in procs:
            p.kill()
            p.wait()
    doomed_key = next(key for key in counts if key.startswith(f"circuitop-shard-{int(blocked['shard'][6:11])}-"))
    assert len(counts) == 4 and counts[doomed_key] >= 2, counts  # the scheduler sent the blocked shard out twice
    assert re.findall(r"(\d+) retries", err)[-1] == "1", err[-500:]  # the bar counts the one restarted task
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the workers' thread count
    try:  # each shard as a run without the kill writes it: the same bytes
        manifest = read_manifest(out)
        for shard in manifest.shards:
            again = write_samples(GenerationSpec.from_json(manifest.generator), range(shard.start, shard.stop), tmp_path / shard.file, device="cpu")
            assert again.sha256 == shard.sha256, shard.file
    finally:
        torch.set_num_threads(threads)
    assert sorted(p.name for p in out.iterdir()) == ["manifest.json"] + [f"shard-{i:05d}-of-00004.nc" for i in range(4)]


def test_train_evaluate_and_info_on_a_manifest_folder(tmp_path):
    data = tmp_path / "darcy"
    assert main(["generate", "darcy", "--n", "24", "--n-grid", "16", "--out", str(data), "--shards", "3",
                 "--workers", "1"]) == 0
    run = tmp_path / "run"
    train = run_cli("train", "--data", data, "--model", "fno", "--out", run, "--input", "a", "--target", "u",
                    "--split", "16,4,4", "--epochs", "1", "--batch-size", "8", "--config", "n_modes=4", "width=8",
                    "n_layers=2", "--threads", "1", "--no-progress")
    assert train.returncode == 0, train.stderr[-2000:]
    assert run_cli("evaluate", "--run", run, "--data", data).returncode == 0
    info = run_cli("info", data)
    assert info.returncode == 0, info.stderr
    for text in ("darcy", "24 samples", "3 shards", "n_grid", "statistics"):
        assert text in info.stdout, info.stdout
    verified = run_cli("info", data, "--verify")
    assert verified.returncode == 0 and "all 3 shards match their sha256" in verified.stdout
    _flip_a_byte(data / "shard-00001-of-00003.nc")
    bad = run_cli("info", data, "--verify")
    assert bad.returncode == 1 and "shard-00001-of-00003.nc: expected sha256" in bad.stderr
