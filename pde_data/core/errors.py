"""The one-line read errors: a failed read of a dataset's batch is a :class:`DataReadError` whose message is
one line naming the file, the samples and the frames (reads themselves are :meth:`pde_data.Source.read`)."""

from __future__ import annotations

__all__ = ["DataReadError", "one_line"]


class DataReadError(RuntimeError):
    """Reading a sample of a data file failed (truncated file, I/O error, NaN where the reader checks)."""


def one_line(exc: BaseException) -> str:
    """The first line of an exception's message (its type name if it has none)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
