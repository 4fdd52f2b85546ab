"""A run folder belongs to one run: claimed with a lock file, refused when it already holds a run.

:func:`claim` is what ``train`` does before it computes anything:

- ``RUN_DIR`` must be a folder (or not exist yet) that this process can write to;
- ``RUN_DIR/.lock`` is created exclusively and names its holder (pid, host, start time). A second
  process is refused with one line naming the holder. A lock whose process is gone (a dead pid on this
  host, e.g. after ``kill -9``) is taken over with a one-line note;
- a folder that already holds a run is refused unless the caller resumes it (``last.pt`` must exist)
  or overwrites it. ``overwrite`` deletes only the files a run writes (:data:`RUN_FILES`); a folder
  holding anything else is refused even then, so no file a user made is ever deleted.

Example:
    >>> with claim("runs/a", resume=False, overwrite=False):
    ...     train(...)                        # the lock is released on exit, even on an error
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import fnmatch
import json
import os
import shutil
import socket
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

__all__ = ["claim", "RunFolderError", "Holder", "RUN_FILES", "LOCK"]

LOCK = ".lock"
#: What a run writes into its folder (``--overwrite`` deletes these and nothing else).
RUN_FILES = ("last.pt", "best.pt", "history.json", "run.json", "config.yaml", "metrics.csv", "metrics.json",
             "rollout.csv", "pred.nc", "*.png", "events.out.tfevents.*", ".*.tmp")


class RunFolderError(ValueError):
    """The run folder cannot be used as asked (one line: what was expected, what was found)."""


@dataclass(frozen=True)
class Holder:
    """Who holds a run folder's lock."""

    pid: int
    host: str
    started: str

    @classmethod
    def me(cls) -> "Holder":
        return cls(os.getpid(), socket.gethostname(), _dt.datetime.now().isoformat(timespec="seconds"))

    def alive(self) -> bool:
        """``False`` only when the holder is a process of this host that no longer exists."""
        if self.host != socket.gethostname():
            return True  # another machine's process: cannot tell, assume it runs
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True

    def describe(self) -> str:
        return f"pid {self.pid} on {self.host} since {self.started}"


def _read_holder(lock: Path) -> Holder | None:
    try:
        state = json.loads(lock.read_text())
        return Holder(int(state["pid"]), str(state["host"]), str(state["started"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None  # half-written or foreign: treated as stale


def _create_lock(lock: Path, me: Holder) -> bool:
    """Create ``lock`` exclusively with ``me`` in it; ``False`` if it exists."""
    try:
        fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as fh:
        json.dump({"pid": me.pid, "host": me.host, "started": me.started}, fh)
    return True


def _lock(folder: Path) -> Path:
    """Take ``folder/.lock`` (taking over a stale one with a note); raise if a live process holds it."""
    lock, me = folder / LOCK, Holder.me()
    for _ in range(3):  # a stale lock removed by someone else between our tries: try again
        if _create_lock(lock, me):
            return lock
        holder = _read_holder(lock)
        if holder is not None and holder.alive():
            raise RunFolderError(f"{folder}: expected a run folder no other process uses; found it locked by "
                                 f"{holder.describe()} ({lock}); wait for that run to end")
        gone = holder.describe() if holder else "an unreadable lock"
        print(f"note: {folder}: taking over the lock of {gone}, which is no longer running", file=sys.stderr)
        lock.unlink(missing_ok=True)
    raise RunFolderError(f"{folder}: could not take the lock {lock} (it keeps reappearing)")


def _is_run_file(name: str) -> bool:
    return any(fnmatch.fnmatch(name, pattern) for pattern in RUN_FILES)


def _check_contents(folder: Path, *, resume: bool, overwrite: bool) -> None:
    entries = sorted(p.name for p in folder.iterdir() if p.name != LOCK)
    if resume:
        if not (folder / "last.pt").is_file():
            raise RunFolderError(f"--resume: expected {folder / 'last.pt'} from an earlier run, found "
                                 f"{'an empty folder' if not entries else 'no last.pt'}")
        return
    if not entries:
        return
    foreign = [name for name in entries if not _is_run_file(name)]
    if not overwrite:
        raise RunFolderError(f"{folder}: expected an empty or new run folder, found {', '.join(entries[:5])}"
                             f"{' ...' if len(entries) > 5 else ''}; pass --resume to continue that run or "
                             "--overwrite to replace it")
    if foreign:
        raise RunFolderError(f"--overwrite: {folder} holds files a run does not write ({', '.join(foreign[:5])}); "
                             "expected a run folder: move them away or choose another --out")
    for name in entries:
        path = folder / name
        shutil.rmtree(path) if path.is_dir() else path.unlink()


@contextlib.contextmanager
def claim(folder: str | os.PathLike, *, resume: bool = False, overwrite: bool = False) -> Iterator[Path]:
    """Hold ``folder`` for one run (see the module docstring) until the ``with`` block ends; a folder
    this call created is removed again if the block fails before anything was written into it.

    Raises:
        RunFolderError: ``folder`` is a file, not writable, locked by a live process, or holds a run
            (or, with ``overwrite``, files a run does not write); with ``resume``, it has no ``last.pt``.
    """
    if resume and overwrite:
        raise RunFolderError("--resume and --overwrite: expected one of them, found both")
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise RunFolderError(f"{folder}: expected a run folder, found a file")
    created = not folder.exists()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        if not os.access(folder, os.W_OK | os.X_OK):
            raise PermissionError
    except PermissionError:
        raise RunFolderError(f"{folder}: expected a folder this process can write to, found it read-only") from None
    lock = _lock(folder)
    try:
        _check_contents(folder, resume=resume, overwrite=overwrite)
        yield folder
    except BaseException:
        lock.unlink(missing_ok=True)
        if created and not any(folder.iterdir()):  # a run that failed before writing anything leaves no folder
            folder.rmdir()
        raise
    lock.unlink(missing_ok=True)
