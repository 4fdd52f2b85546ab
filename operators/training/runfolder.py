"""A run folder belongs to one run: held with a lock, refused when it already holds a run.

:func:`claim` is what ``train`` does before it computes anything:

- ``RUN_DIR`` must be a folder (or not exist yet) that this process can write to;
- ``RUN_DIR/.lock`` is locked (a POSIX record lock, ``lockf``) for as long as the run lasts and names
  its holder (pid, host, start time). A second process is refused with one line naming the holder.
  The kernel drops the lock of a process that dies (``kill -9``), and a POSIX lock is not inherited by
  forked children (DataLoader workers, which outlive a killed parent by seconds), so a lock file left
  behind is taken over at once, with a note naming the process that left it;
- a folder that already holds a run is refused unless the caller resumes it (``last.pt`` must exist)
  or overwrites it. Overwriting deletes only the files a run writes (:data:`RUN_FILES`), and only when
  the caller says the new run is ready to start (:meth:`RunFolder.clear`), so a run whose arguments
  turn out to be wrong leaves the old one whole; a folder holding anything else is refused;
- the folder's file system must have room for the run's checkpoints (:meth:`RunFolder.check_room`), counting
  what the overwritten run's files free and what a resumed run's checkpoints already hold.

Example:
    >>> with claim("runs/a", resume=False, overwrite=True) as folder:
    ...     check_everything()
    ...     folder.check_room(checkpoint_bytes, copies=3, margin=2**20)
    ...     folder.clear()                    # the old run's files go now
    ...     train(...)                        # the lock is released on exit, even on an error
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import errno
import fcntl
import json
import os
import re
import shutil
import socket
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

from pde_data.core.params import ParameterError
from pde_data.core.room import check_room, format_bytes

__all__ = ["claim", "RunFolder", "RunFolderError", "Holder", "RUN_FILES", "EVALUATIONS", "LOCK"]

LOCK = ".lock"
#: The files a run writes into its folder (``train``; the last six are where ``evaluate --run`` of earlier
#: versions wrote); ``--overwrite`` deletes these, :data:`EVALUATIONS`, and nothing else.
RUN_FILES = ("last.pt", "best.pt", "history.json", "run.json", "config.yaml", "metrics.csv", "curves.png", "metrics.json",
             "rollout.csv", "pred.nc", "fields.png", "spectra.png", "rollout.png")
#: The folder of a run's evaluations (``evaluate --run``, each in a folder of its own); ``--overwrite`` of the
#: run deletes it with the run's files.
EVALUATIONS = "evaluations"
#: Temporary files of :func:`pde_data.atomic_path` left by a killed writer (``.<name>.<random>.tmp``) and
#: TensorBoard's event files (``events.out.tfevents.<time>.<host>.<pid>.<n>``).
_OTHER_RUN_FILES = re.compile(r"^\.(" + "|".join(re.escape(n) for n in RUN_FILES) + r")\.[^/]+\.tmp$"
                        r"|^events\.out\.tfevents\.[^/]+$")


class RunFolderError(ParameterError):
    """The run folder cannot be used as asked (one line: what was expected, what was found; the parameter at fault,
    ``resume`` or ``overwrite``, if one is)."""


@dataclass(frozen=True)
class Holder:
    """Who holds (or last held) a run folder's lock."""

    pid: int
    host: str
    started: str

    @classmethod
    def me(cls) -> "Holder":
        return cls(os.getpid(), socket.gethostname(), _dt.datetime.now().isoformat(timespec="seconds"))

    @classmethod
    def parse(cls, text: str) -> "Holder | None":
        try:
            state = json.loads(text)
            return cls(int(state["pid"]), str(state["host"]), str(state["started"]))
        except (ValueError, KeyError, TypeError):
            return None

    def describe(self) -> str:
        return f"pid {self.pid} on {self.host} since {self.started}"


def _lock(folder: Path) -> int:
    """An open descriptor of ``folder/.lock`` holding its lock, with this process named in it."""
    path = folder / LOCK
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            if err.errno not in (errno.EACCES, errno.EAGAIN):
                raise
            holder = Holder.parse(os.pread(fd, 4096, 0).decode(errors="replace"))
            os.close(fd)
            named = holder.describe() if holder else "another process"
            raise RunFolderError((), f"{folder}: expected a run folder no other process uses; found it locked by "
                                 f"{named}; wait for that run to end") from None
        try:
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:  # else the holder we waited for removed the file: lock the one now there
            break
        os.close(fd)
    left = Holder.parse(os.pread(fd, 4096, 0).decode(errors="replace"))
    if left is not None:
        print(f"note: {folder}: taking over the lock file left by {left.describe()} (no process holds it now)",
              file=sys.stderr)
    me = Holder.me()
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps({"pid": me.pid, "host": me.host, "started": me.started}).encode(), 0)
    return fd


def _unlock(folder: Path, fd: int) -> None:
    (folder / LOCK).unlink(missing_ok=True)  # still holding the lock: nobody else can have replaced it
    os.close(fd)


def _is_run_file(path: Path) -> bool:
    if path.is_dir():
        return path.name == EVALUATIONS
    return path.is_file() and (path.name in RUN_FILES or _OTHER_RUN_FILES.match(path.name) is not None)


class RunFolder:
    """A claimed run folder (see :func:`claim`)."""

    def __init__(self, path: Path, run_files: list[Path]):
        self.path, self._old = path, run_files

    def clear(self) -> None:
        """Delete the files of the run being overwritten (none unless ``overwrite``); call it once the new
        run has checked its arguments and is about to write."""
        for path in self._old:
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink(missing_ok=True)
        self._old = []

    def check_room(self, checkpoint_bytes: int, *, copies: int, margin: int) -> None:
        """Refuse a run whose file system has no room for ``copies`` checkpoints of ``checkpoint_bytes`` and
        ``margin`` bytes more, less the checkpoints already there that the run keeps (a resumed run's); the
        files :meth:`clear` will delete count as free.

        Raises:
            NoRoomError: one line naming the folder, the bytes needed and the bytes free.
        """
        old = set(self._old)
        kept = _disk_bytes(p for p in (self.path / "last.pt", self.path / "best.pt") if p.is_file() and p not in old)
        held = kept + _disk_bytes(self._old)
        needed = copies * checkpoint_bytes + margin - held
        less = f", less the {format_bytes(held)} the run's files already take" if held else ""
        check_room(self.path, needed, what=f"{needed:,} bytes ({format_bytes(needed)}): {copies} checkpoints of "
                   f"about {format_bytes(checkpoint_bytes)} and {format_bytes(margin)} for logs{less}",
                   advice="free some space or choose another run folder")


def _disk_bytes(paths: Iterable[Path]) -> int:
    """The bytes of the files ``paths`` (and of those in the folders among them), each file once (``best.pt``
    may be a hard link to ``last.pt``)."""
    seen: dict[tuple[int, int], int] = {}
    for path in paths:
        for f in [path] if not path.is_dir() else [p for p in path.rglob("*") if p.is_file()]:
            st = f.stat()
            seen[(st.st_dev, st.st_ino)] = st.st_size
    return sum(seen.values())


def _old_run(folder: Path, *, resume: bool, overwrite: bool) -> list[Path]:
    """The files ``overwrite`` will delete; raises when the folder may not be used as asked."""
    entries = sorted(p for p in folder.iterdir() if p.name != LOCK)
    if resume:
        if not (folder / "last.pt").is_file():
            raise RunFolderError("resume", f"{folder / 'last.pt'} from an earlier run",
                                 "an empty folder" if not entries else "no last.pt")
        return []
    if not entries:
        return []
    names = [p.name for p in entries]
    if not overwrite:
        raise RunFolderError((), f"{folder}: expected an empty or new run folder, found {', '.join(names[:5])}"
                             f"{' ...' if len(names) > 5 else ''}; pass {{resume=True}} to continue that run or "
                             "{overwrite=True} to replace it", mentions=["resume", "overwrite"])
    foreign = [p.name for p in entries if not _is_run_file(p)]
    if foreign:
        raise RunFolderError("overwrite", f"{folder} holds files a run does not write ({', '.join(foreign[:5])}); "
                             "expected a run folder: move them away or choose another run folder")
    return entries


@contextlib.contextmanager
def claim(folder: str | os.PathLike, *, resume: bool = False, overwrite: bool = False) -> Iterator[RunFolder]:
    """Hold ``folder`` for one run (see the module docstring) until the ``with`` block ends; a folder
    this call created is removed again if the block fails before anything was written into it.

    Raises:
        RunFolderError: ``folder`` is a file, not writable, locked by a live process, or holds a run
            (or, with ``overwrite``, files a run does not write); with ``resume``, it has no ``last.pt``.
    """
    if resume and overwrite:
        raise RunFolderError(("resume", "overwrite"), "one of them", "both")
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise RunFolderError((), f"{folder}: expected a run folder, found a file")
    created = not folder.exists()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd = _lock(folder)
    except PermissionError:
        raise RunFolderError((), f"{folder}: expected a folder this process can write to, found it read-only") from None
    except OSError as exc:  # e.g. under /proc, or a file where a parent folder should be
        raise RunFolderError("out", "a folder this process can create and write to", f"{folder}, which cannot be "
                             f"created ({exc.strerror or type(exc).__name__})") from None
    try:
        yield RunFolder(folder, _old_run(folder, resume=resume, overwrite=overwrite))
    except BaseException:
        _unlock(folder, fd)
        if created and not any(folder.iterdir()):  # a run that failed before writing anything leaves no folder
            folder.rmdir()
        raise
    _unlock(folder, fd)
