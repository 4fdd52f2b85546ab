"""A generated set's shards checked against their manifest's sha256 before a run trusts them, once: a stamp
records what was verified, so a later run pays one ``stat`` per shard.

The stamp is ``DIR/.verified.json``, written atomically beside ``manifest.json``; it holds per shard the
``bytes``, ``mtime_ns`` and ``ino`` it had when its content was hashed, and that ``sha256``. A shard is trusted
without hashing while its size, mtime and inode are the stamp's and the stamp's sha256 is the manifest's; any
other shard is hashed (:func:`pde_data.formats.manifest.sha256_of`, in 256 KiB chunks: memory stays flat whatever the
shard's size). A shard written since (other size or mtime) or copied elsewhere (other inode) is hashed again.
A shard written less than :data:`FRESH_SECONDS` before it is hashed is checked but not stamped: a same-size
write within the file system's timestamp granularity would leave its mtime as it was (git's "racily clean").

Where the folder is read-only, the stamp goes to the user's cache, ``$XDG_CACHE_HOME/circuitop/verified/``
(default ``~/.cache/circuitop/verified/``), under a name derived from the folder's absolute path; where
neither can be written, every run hashes again and :attr:`Verified.note` says so.

Example:
    >>> result = verify_set("ns_set")           # raises DamagedShards (a ManifestError) naming a damaged shard
    >>> result.hashed, result.shards            # (16, 16) the first time, (0, 16) after
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from pde_data.core.io import atomic_path
from pde_data.formats.manifest import MANIFEST, Manifest, ManifestError, ShardRecord, read_manifest, sha256_of

__all__ = ["verify_set", "Verified", "DamagedShards", "STAMP", "FRESH_SECONDS", "stamp_paths"]

#: the stamp's name beside ``manifest.json``
STAMP = ".verified.json"
_FORMAT = "circuitop-verified-shards"
#: a shard modified less than this many seconds before its hash is not stamped (hashed again next time)
FRESH_SECONDS = 2.0


@dataclass(frozen=True)
class Verified:
    """What :func:`verify_set` did: of ``shards``, ``hashed`` were read (``bytes_hashed`` in ``seconds``), the
    others trusted by their stamp; ``stamp`` is where the stamp was written (None: nothing new to record, or no
    writable place, then ``note`` says so)."""

    folder: Path
    shards: int
    hashed: int
    bytes_hashed: int
    seconds: float
    stamp: Path | None = None
    note: str | None = None


class DamagedShards(ManifestError):
    """Shards of ``folder`` that are missing, resized or damaged: ``problems`` (one phrase each, naming the
    shard), of the set the manifest says the generator ``generator`` made in ``count`` shards; the message says how
    to remake them."""

    def __init__(self, folder: Path, manifest: Manifest, problems: list[str]):
        self.folder, self.problems = folder, problems
        self.generator, self.count = manifest.generator_name, len(manifest.shards)
        super().__init__(self.describe(f"to regenerate them, call generate_sharded again with the spec and shard "
                                       f"count {MANIFEST} records (it keeps the intact shards and remakes the others)"))

    def describe(self, remedy: str) -> str:
        """One line: the problems, then ``remedy``."""
        head = "" if len(self.problems) == 1 else \
            f"{len(self.problems)} of {self.count} shards differ from {self.folder / MANIFEST}: "
        return head + "; ".join(self.problems) + "; " + remedy


def stamp_paths(folder: str | os.PathLike) -> tuple[Path, Path]:
    """``(beside, cache)``: the stamp beside the manifest, and the user-cache one used when the folder is
    read-only (``$XDG_CACHE_HOME/circuitop/verified/<sha256 of the folder's resolved path>.json``)."""
    folder = Path(folder).resolve()
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "circuitop" / "verified"
    return folder / STAMP, cache / f"{hashlib.sha256(os.fsencode(folder)).hexdigest()[:32]}.json"


def verify_set(folder: str | os.PathLike, *, full: bool = False,
               announce: Callable[[int, int], None] | None = None) -> Verified:
    """Check every shard of the generated set ``folder`` against its manifest: its size, and its sha256 unless
    the stamp vouches for it (module docstring); record what was hashed in the stamp.

    Args:
        full: hash every shard, whatever the stamp says (``circuitop info DIR --verify``).
        announce: ``announce(n_shards, n_bytes)`` once, before hashing begins (not called when nothing is hashed).

    Raises:
        FileNotFoundError: the folder has no manifest.
        DamagedShards: one line naming each missing, resized or damaged shard (expected vs found hash) and how
            to remake it; the intact shards are stamped first.
    """
    folder = Path(folder)
    manifest = read_manifest(folder)
    trusted = {} if full else _load_stamps(folder)
    entries, problems, todo = {}, [], []
    for s in manifest.shards:
        path = folder / s.file
        if not path.is_file():
            problems.append(f"{path}: expected shard {s.index} (samples {s.start}-{s.stop - 1}) as {MANIFEST} "
                            "records, found no such file")
            continue
        st = path.stat()
        if st.st_size != s.bytes:
            problems.append(f"{path}: expected {s.bytes} bytes as {MANIFEST} records, found {st.st_size}")
        elif _entry(st, s.sha256) in trusted.get(s.file, ()):
            entries[s.file] = _entry(st, s.sha256)
        else:
            todo.append(s)
    if todo and announce is not None:
        announce(len(todo), sum(s.bytes for s in todo))
    started = time.perf_counter()
    for s in todo:
        entry, problem = _hashed(folder / s.file, s)
        entries.update({s.file: entry} if entry else {})
        problems += [problem] if problem else []
    seconds = time.perf_counter() - started
    stamp, note = _record(folder, manifest, entries) if todo else (None, None)
    if problems:
        raise DamagedShards(folder, manifest, problems)
    return Verified(folder, len(manifest.shards), len(todo), sum(s.bytes for s in todo), seconds, stamp, note)


def _entry(st: os.stat_result, sha256: str) -> tuple:
    return st.st_size, st.st_mtime_ns, st.st_ino, sha256


def _hashed(path: Path, shard: ShardRecord) -> tuple[tuple | None, str | None]:
    """``(stamp entry or None, problem or None)`` of one shard hashed: no entry for a damaged shard, or for one
    that changed while it was read or was written less than :data:`FRESH_SECONDS` before."""
    before, started = path.stat(), time.time_ns()
    found = sha256_of(path)
    if found != shard.sha256:
        return None, (f"{path}: expected sha256 {shard.sha256[:16]}… as {MANIFEST} records, found {found[:16]}… "
                      f"({shard.bytes} bytes, samples {shard.start}-{shard.stop - 1}): the shard is damaged")
    after = path.stat()
    settled = before.st_mtime_ns < started - int(FRESH_SECONDS * 1e9)
    return (_entry(after, found) if settled and _entry(before, found) == _entry(after, found) else None), None


def _load_stamps(folder: Path) -> dict[str, set[tuple]]:
    """``{shard file: {(bytes, mtime_ns, ino, sha256), ...}}`` from both stamp places (an unreadable or foreign
    stamp counts as none)."""
    trusted: dict[str, set[tuple]] = {}
    for path in stamp_paths(folder):
        try:
            data = json.loads(path.read_text())
            if data.get("format") != _FORMAT or data.get("folder") != str(folder.resolve()):
                continue
            for name, e in data["shards"].items():
                trusted.setdefault(name, set()).add((int(e["bytes"]), int(e["mtime_ns"]), int(e["ino"]),
                                                     str(e["sha256"])))
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue
    return trusted


def _record(folder: Path, manifest: Manifest, entries: dict[str, tuple]) -> tuple[Path | None, str | None]:
    """Write the stamp of ``entries`` beside the manifest, else in the user cache; ``(where, note)``."""
    data = {"format": _FORMAT, "version": 1, "folder": str(folder.resolve()),
            "shards": {s.file: dict(zip(("bytes", "mtime_ns", "ino", "sha256"), entries[s.file]))
                       for s in manifest.shards if s.file in entries}}
    text, failures = json.dumps(data, indent=1) + "\n", []
    for path in stamp_paths(folder):
        try:
            with atomic_path(path) as tmp:
                tmp.write_text(text)
            return path, None
        except OSError as exc:
            failures.append(f"{path.parent}: {exc.strerror or exc}")
    return None, (f"the verification could not be recorded ({'; '.join(failures)}): every run hashes the shards "
                  "again")
