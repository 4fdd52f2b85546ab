"""``--no-verify`` and the check every reading command (``train``, ``evaluate``, ``predict``) makes first: a
generated set's shards against their manifest's sha256 (:func:`pde_data.formats.verification.verify_set`, hashed once,
then trusted by its stamp). Other files have no manifest and are not checked.

Under ``torchrun`` only local rank 0 of each node verifies; the node's other processes wait for it where the
process group forms, and a damaged shard ends the run there, before any epoch.
"""

from __future__ import annotations

import argparse
import os
import sys

from pde_data.formats.manifest import MANIFEST, is_manifest_folder

__all__ = ["add_no_verify", "verify_data", "verified_set", "summary"]


def add_no_verify(p: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    p.add_argument("--no-verify", action="store_true", default=False,
                   help="do not check a generated set's shards against the sha256 in its manifest.json (default: "
                        "check them once, then whenever a shard's size or mtime changed)")


def verify_data(path: str | os.PathLike | None, *, skip: bool = False) -> None:
    """Check the generated set ``path`` (nothing for a file, a glob or None); one line on stderr when it
    hashed shards or was told to skip.

    Raises:
        ManifestError: a shard is missing, resized or damaged (one line naming it and how to remake it).
    """
    if path is None or not is_manifest_folder(path) or os.environ.get("LOCAL_RANK", "0") != "0":
        return
    if skip:
        print(f"{path}: shards not checked against {MANIFEST} (--no-verify)", file=sys.stderr)
        return
    result = verified_set(path)
    if result.hashed:
        print(f"{path}: {summary(result)}", file=sys.stderr)
    if result.note:
        print(f"{path}: {result.note}", file=sys.stderr)


def verified_set(path: str | os.PathLike, *, full: bool = False):
    """:func:`pde_data.formats.verification.verify_set` with one line on stderr before hashing a GiB or more (minutes on
    a slow disk), and a damaged shard's remedy given as the command that remakes it.

    Raises:
        ManifestError: the shards that differ from the manifest, and the generate command to re-run.
    """
    from pde_data.formats.manifest import ManifestError
    from pde_data.formats.verification import DamagedShards, verify_set

    def announce(shards: int, size: int) -> None:
        if size >= 1 << 30:
            print(f"{path}: checking {shards} shards ({size / 2**30:.1f} GiB) against {MANIFEST}…", file=sys.stderr)

    try:
        return verify_set(path, full=full, announce=announce)
    except DamagedShards as exc:
        raise ManifestError(exc.describe(
            f"to regenerate, re-run the `circuitop generate {exc.generator} … --shards {exc.count} "
            f"--out {exc.folder}` "
            f"command that made the set (the options {MANIFEST} records): it keeps the intact shards and remakes "
            "the others")) from None


def summary(result) -> str:
    """``"all 3 shards match their sha256 (2 hashed: 1.2 MB in 0.01 s; 1 unchanged since last checked; …)"``."""
    parts = []
    if result.hashed:
        parts.append(f"{result.hashed} hashed: {result.bytes_hashed / 1e6:.3g} MB in {result.seconds:.2g} s")
    if result.shards > result.hashed:
        parts.append(f"{result.shards - result.hashed} unchanged since last checked")
    if result.stamp:
        parts.append(f"recorded in {result.stamp}")
    return f"all {result.shards} shards match their sha256 ({'; '.join(parts)})"
