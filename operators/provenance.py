"""Which code made a number: the git commit of the source checkout and a hash of the packages' sources, for
results JSON and benchmark rows.

Example:
    >>> code_version()
    {'commit': '0c0b163…', 'dirty': False, 'circuitop': '0.1.0', 'sources': {'circuitop': '5f1d…', ...}}
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from importlib import metadata
from pathlib import Path

__all__ = ["code_version", "source_hashes", "PACKAGES"]

_ROOT = Path(__file__).resolve().parents[1]
#: the packages whose sources a result is measured on (the toolkit; not bench/, examples/ or tests/)
PACKAGES = ("circuitop", "pde_data", "operators", "evaluation")
#: what counts as a source file of a package (its Python and its native kernels)
_SUFFIXES = (".py", ".cpp", ".cu", ".h", ".c")


def _git(*args: str, root: Path = _ROOT) -> str | None:
    try:
        done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip()


def code_version() -> dict:
    """``{"commit", "dirty", "circuitop"}``: the checkout's HEAD commit (None outside a git checkout, e.g. an
    installed wheel), whether tracked files other than ``results/`` and Markdown differ from it (the number
    may come from uncommitted code), and the package version. A copy of a checkout sent elsewhere (a GPU
    machine, where its ``.git`` may be missing or stale) names its commit in ``CIRCUITOP_COMMIT``, which then
    wins; the copy is taken as that commit, clean."""
    if os.environ.get("CIRCUITOP_COMMIT"):
        return {"commit": os.environ["CIRCUITOP_COMMIT"], "dirty": False, "circuitop": _version(),
                "sources": source_hashes()}
    commit = _git("rev-parse", "HEAD")
    # results and prose do not change what the code computes: a regenerated RESULTS.md is not "dirty" code
    changes = _git("status", "--porcelain", "--untracked-files=no", "--", ".", ":!results", ":!*.md") if commit else None
    return {"commit": commit, "dirty": bool(changes), "circuitop": _version(), "sources": source_hashes()}


def _blob_id(data: bytes) -> str:
    """git's id of a file's content (``git hash-object``), so that files on disk and a commit's tree hash alike."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _digest(blobs: dict[str, str]) -> str:
    lines = "".join(f"{path}\0{blob}\n" for path, blob in sorted(blobs.items()))
    return hashlib.sha256(lines.encode()).hexdigest()[:16]


def source_hashes(commit: str | None = None, *, root: Path = _ROOT,
                  packages: tuple[str, ...] = PACKAGES) -> dict[str, str] | None:
    """``{package: hash}`` of each package's sources (``.py`` and the native kernels' files): a sha256 over the
    sorted (path, git blob id) pairs, of the files on disk, or of ``commit``'s tree (git), which hash alike
    when they hold the same sources. A result records them; a later check compares them with the current
    ones. None where ``commit`` is not in the repository (or git is missing)."""
    if commit is None:
        return {name: _digest({path.relative_to(root).as_posix(): _blob_id(path.read_bytes())
                               for path in (root / name).rglob("*") if path.suffix in _SUFFIXES and path.is_file()})
                for name in packages}
    listing = _git("ls-tree", "-r", "--full-tree", commit, "--", *packages, root=root)
    if listing is None:
        return None
    found: dict[str, dict[str, str]] = {name: {} for name in packages}
    for line in listing.splitlines():
        meta, path = line.split("\t", 1)
        if Path(path).suffix in _SUFFIXES:
            found[path.split("/", 1)[0]][path] = meta.split()[2]
    return {name: _digest(blobs) for name, blobs in found.items()}


def _version() -> str | None:
    try:
        return metadata.version("circuitop")
    except metadata.PackageNotFoundError:
        return None
