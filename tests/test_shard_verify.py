"""A generated set's shards are checked against the manifest's sha256 before a run reads them: a same-size
damaged shard is named in one line by ``info``, ``train``, ``evaluate`` and ``predict`` and nothing trains on it;
a stamp makes the next run hash nothing; ``--no-verify`` skips and says so; files without a manifest are untouched.

One tiny darcy set (3 shards) is generated once with the real ``generate`` command; each test works on a copy.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

import pde_data
from cli_run import ENV, ROOT, run_cli
from operators.cli import main
from pde_data.formats import verification
from pde_data.formats.manifest import ManifestError, read_manifest, sha256_of
from pde_data.formats.verification import STAMP, stamp_paths, verify_set

pytest.importorskip("distributed")

SHARD = "shard-00001-of-00003.nc"
TINY_FNO = ["--model", "fno", "--input", "a", "--target", "u", "--split", "16,4,4", "--epochs", "1",
            "--batch-size", "8", "--config", "n_modes=4", "width=8", "n_layers=2", "--threads", "1", "--no-progress"]


def _settle(folder: Path) -> None:
    """Date the shards an hour back: a shard written under :data:`verification.FRESH_SECONDS` ago is never
    stamped, and the tests should not depend on how long generation took."""
    then = time.time_ns() - 3600 * 10**9
    for path in folder.glob("shard-*.nc"):
        os.utime(path, ns=(then, then))


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("made") / "darcy"
    assert main(["generate", "darcy", "--n", "24", "--n-grid", "16", "--out", str(folder), "--shards", "3",
                 "--workers", "1"]) == 0
    _settle(folder)
    return folder


@pytest.fixture
def data(made, tmp_path) -> Path:
    """A fresh copy of the set (mtimes kept, new inodes: nothing of the original's stamp applies)."""
    return Path(shutil.copytree(made, tmp_path / "darcy"))


def _damage(path: Path) -> None:
    """Invert 72 bytes in the middle of the file, in place: same size, other content."""
    size = path.stat().st_size
    with open(path, "r+b") as fh:
        fh.seek(size // 2)
        block = fh.read(72)
        fh.seek(size // 2)
        fh.write(bytes(b ^ 0xFF for b in block))
    assert path.stat().st_size == size


def _names_the_shard(err: str, data: Path, shard: str = SHARD) -> None:
    """The error is one line naming the shard, the manifest's and the found sha256, and how to remake it."""
    lines = [line for line in err.strip().splitlines() if "error:" in line]
    assert len(lines) == 1, err[-3000:]
    expected = next(s.sha256 for s in read_manifest(data).shards if s.file == shard)
    for text in (f"{data / shard}: expected sha256 {expected[:16]}", f"found {sha256_of(data / shard)[:16]}",
                 f"re-run the `circuitop generate darcy … --shards 3 --out {data}`"):
        assert text in lines[0], lines[0]


def test_info_and_train_name_a_damaged_shard_and_nothing_trains(data, tmp_path):
    first = run_cli("info", data)
    assert first.returncode == 0, first.stderr[-2000:]
    assert "verified: all 3 shards match their sha256 (3 hashed" in first.stdout
    _damage(data / SHARD)
    info = run_cli("info", data)
    assert info.returncode == 1 and "verified" not in info.stdout
    _names_the_shard(info.stderr, data)
    run = tmp_path / "run"
    train = run_cli("train", "--data", data, "--out", run, *TINY_FNO)
    assert train.returncode == 1
    _names_the_shard(train.stderr, data)
    assert "epoch" not in train.stderr and not run.exists()  # refused before the model, the run folder or an epoch


def test_evaluate_and_predict_name_a_damaged_shard_and_no_verify_says_it_skips(data, tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["train", "--data", str(data), "--out", str(run), *TINY_FNO, "--no-verify"]) == 0
    assert f"{data}: shards not checked against manifest.json (--no-verify)" in capsys.readouterr().err
    assert not (data / STAMP).exists()  # nothing hashed
    assert main(["evaluate", "--run", str(run)]) == 0  # the run's own data: checked, then stamped
    assert "all 3 shards match their sha256 (3 hashed" in capsys.readouterr().err and (data / STAMP).is_file()
    _damage(data / SHARD)
    for args in (["evaluate", "--run", str(run)], ["evaluate", "--run", str(run), "--data", str(data), "--out",
                 str(tmp_path / "ev")], ["predict", "--run", str(run), "--data", str(data), "--out",
                 str(tmp_path / "pred.nc")]):
        assert main(args) == 1, args
        _names_the_shard(capsys.readouterr().err, data)
    assert not (tmp_path / "ev").exists() and not (tmp_path / "pred.nc").exists()
    assert [p.name for p in (run / "evaluations").iterdir()] == ["darcy-test"]  # the one made before the damage


def test_a_verified_set_is_not_hashed_again(data, monkeypatch):
    calls = []
    monkeypatch.setattr(verification, "sha256_of", lambda path: calls.append(Path(path).name) or sha256_of(path))
    first = verify_set(data)
    assert (first.shards, first.hashed, len(calls)) == (3, 3, 3) and first.stamp == data / STAMP
    calls.clear()
    again = verify_set(data)
    assert (again.hashed, calls, again.stamp) == (0, [], None)  # a stat per shard, no read, no write
    then = time.time_ns() - 1800 * 10**9
    os.utime(data / SHARD, ns=(then, then))  # the same bytes, another mtime: hashed again, that shard alone
    assert verify_set(data).hashed == 1 and calls == [SHARD]
    calls.clear()
    assert verify_set(data, full=True).hashed == 3 and len(calls) == 3  # info --verify: every shard
    calls.clear()
    _damage(data / "shard-00002-of-00003.nc")  # after it was stamped
    with pytest.raises(ManifestError, match="shard-00002-of-00003.nc: expected sha256"):
        verify_set(data)
    assert calls == ["shard-00002-of-00003.nc"]


def test_a_shard_written_just_now_is_checked_but_not_stamped(data, monkeypatch):
    calls = []
    monkeypatch.setattr(verification, "sha256_of", lambda path: calls.append(Path(path).name) or sha256_of(path))
    os.utime(data / SHARD)  # now: a same-size write in the same timestamp tick would go unseen
    assert verify_set(data).hashed == 3
    assert verify_set(data).hashed == 1 and calls[3:] == [SHARD]


def test_a_read_only_folder_is_stamped_in_the_user_cache(data, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    beside, cache = stamp_paths(data)
    assert cache.parent == tmp_path / "cache" / "circuitop" / "verified"
    writable = verification.atomic_path

    def refusing(*folders):
        """``atomic_path`` refusing to write in ``folders`` (the tests run as root: chmod would not do)."""
        def atomic_path(path):
            if Path(path).parent in folders:
                raise PermissionError(13, "Permission denied", str(path))
            return writable(path)
        return atomic_path

    monkeypatch.setattr(verification, "atomic_path", refusing(data))
    assert verify_set(data).stamp == cache and not beside.exists()
    assert json.loads(cache.read_text())["folder"] == str(data.resolve())
    assert verify_set(data).hashed == 0
    cache.unlink()
    monkeypatch.setattr(verification, "atomic_path", refusing(data, cache.parent))
    nowhere = verify_set(data)
    assert nowhere.stamp is None and "could not be recorded" in nowhere.note
    assert "every run hashes the shards again" in nowhere.note
    assert verify_set(data).hashed == 3


def test_a_file_without_a_manifest_is_not_checked(tmp_path, monkeypatch, capsys):
    import numpy as np
    import xarray as xr

    monkeypatch.setattr(verification, "verify_set", lambda *a, **k: pytest.fail("a plain file was verified"))
    ds = xr.Dataset({"a": (("sample", "x"), np.zeros((4, 8), np.float32))})
    path = pde_data.save(ds, tmp_path / "plain.nc")
    assert main(["info", str(path)]) == 0
    assert "verified" not in capsys.readouterr().out and list(tmp_path.iterdir()) == [path]


@pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"), reason="peak RSS is reset through Linux's /proc")
def test_hashing_keeps_memory_flat(data):
    """A 96 MB shard hashed in a subprocess raises its peak RSS by a few MB at most (read in chunks); the peak
    is reset after the imports (``/proc/self/clear_refs``), so their own peak cannot hide the hashing's."""
    shard = data / SHARD
    with open(shard, "wb") as fh:
        for _ in range(96):
            fh.write(os.urandom(1 << 20))
    _settle(data)
    manifest = read_manifest(data)
    shards = tuple(dataclasses.replace(s, bytes=shard.stat().st_size, sha256=sha256_of(shard)) if s.file == SHARD
                   else s for s in manifest.shards)
    pde_data.formats.manifest.write_manifest(data, dataclasses.replace(manifest, shards=shards))
    code = ("import sys; from pde_data.formats.verification import verify_set\n"
            "def kib(key): return int(open('/proc/self/status').read().split(key + ':')[1].split()[0])\n"
            "open('/proc/self/clear_refs', 'w').write('5'); before = kib('VmRSS')\n"
            "print(verify_set(sys.argv[1]).hashed, kib('VmHWM') - before)")
    out = subprocess.run([sys.executable, "-c", code, str(data)], cwd=ROOT, env=ENV, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    hashed, grown_kib = map(int, out.stdout.split())
    assert hashed == 3 and grown_kib < 16 * 1024, f"peak RSS grew by {grown_kib} KiB hashing a 96 MB shard"


@pytest.mark.slow
def test_under_torchrun_one_process_verifies_and_a_damaged_shard_stops_the_run(data, tmp_path):
    torchrun = Path(sys.executable).with_name("torchrun")

    def ddp(out: Path) -> subprocess.CompletedProcess:
        return subprocess.run([str(torchrun), "--standalone", "--nproc_per_node", "2", "-m", "operators.cli", "train",
                               "--data", str(data), "--out", str(out), *TINY_FNO, "--device", "cpu", "--workers", "0"],
                              cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=300)

    good = ddp(tmp_path / "good")
    assert good.returncode == 0, good.stderr[-3000:]
    assert good.stderr.count("shards match their sha256") == 1 and (tmp_path / "good" / "last.pt").is_file()
    _damage(data / SHARD)
    bad = ddp(tmp_path / "bad")
    assert bad.returncode != 0 and bad.stderr.count(f"{data / SHARD}: expected sha256") == 1, bad.stderr[-3000:]
    assert not (tmp_path / "bad" / "last.pt").exists()
