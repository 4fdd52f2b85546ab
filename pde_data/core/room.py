"""Room on the disk: checked before a long computation writes, and named when a write runs out of it.

``generate`` checks its set's size and ``train`` its checkpoints' with :func:`check_room` before computing
anything; a write that fills the disk later is recognised by :func:`is_disk_full` and reported as a
:class:`NoRoomError`, which carries the folder, the bytes needed and the bytes free.

Example:
    >>> check_room("runs/a", 3 * 2**20, what="3 checkpoints (3.15 MB)", advice="choose another folder")
"""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path
from typing import Iterable

from pde_data.core.params import Advice

__all__ = ["NoRoomError", "check_room", "free_bytes", "format_bytes", "is_disk_full"]

#: the errors of a write that found the disk (or the user's quota) full
_FULL = (errno.ENOSPC, errno.EDQUOT)


class NoRoomError(Advice, OSError):
    """A write needs more room than its folder's file system has free (``errno`` ENOSPC); the folder, the
    bytes needed and the bytes free are attributes, and the parameters the message suggests are ``mentions``
    (``{resume=True}``: :class:`~pde_data.core.params.Advice`)."""

    def __init__(self, message: str, folder: str | os.PathLike | None = None, needed: int = 0, free: int = 0,
                 mentions: Iterable[str] = ()):
        super().__init__(message, mentions)
        self.errno = errno.ENOSPC
        self.folder, self.needed, self.free = folder if folder is None else Path(folder), needed, free

    def __reduce__(self):  # OSError's would call __init__ with the message alone
        return type(self), (self.expected, self.folder, self.needed, self.free, self.mentions)


def free_bytes(folder: str | os.PathLike) -> int:
    """The bytes this process may still write on the file system holding ``folder``."""
    return shutil.disk_usage(folder).free


def format_bytes(nbytes: float) -> str:
    """``1234567`` -> ``"1.23 MB"``."""
    for unit in ("B", "kB", "MB", "GB"):
        if abs(nbytes) < 1000:
            break
        nbytes /= 1000
    else:
        unit = "TB"
    return f"{nbytes:.3g} {unit}"


def check_room(folder: str | os.PathLike, needed: int, *, what: str, advice: str, name: str | None = None) -> int:
    """The free bytes of ``folder``'s file system, when at least ``needed``.

    Args:
        folder: an existing folder the write goes to.
        needed: the bytes the write needs there.
        what, advice: the error's wording: ``"{name}: expected room for {what}, found 1.2 MB free in
            {folder}; {advice}"`` (``name``: the option or parameter that chose the folder, if any).

    Raises:
        NoRoomError: fewer than ``needed`` bytes are free.
    """
    free = free_bytes(folder)
    if needed > free:
        prefix = f"{name}: " if name else ""
        raise NoRoomError(f"{prefix}expected room for {what}, found {format_bytes(free)} free in {folder}; {advice}",
                          folder, needed, free)
    return free


def is_disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` is a write's error for a full disk (or quota): ENOSPC, EDQUOT, or a :class:`NoRoomError`."""
    return isinstance(exc, OSError) and exc.errno in _FULL
