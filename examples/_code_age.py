"""Whether a stored result was measured on the code that ships: its recorded sources (or its commit's) against
the packages' sources now, and the results acknowledged as older, listed with the reason in one place
(``results/stale.json``).

A result records its commit, whether the tree had uncommitted changes, and a hash of each package's sources
(:func:`operators.provenance.source_hashes`); ``measures`` names the packages it measures (all four where it
does not say). Its code is *older* when one of those packages' sources differs now, when it names no commit,
or when it had uncommitted changes and recorded no sources (then nothing can tell). ``--check`` fails on an
older result unless ``results/stale.json`` lists it, and on a listed result that is not older (the list must
not outlive the reruns); a GPU result is reported in its section, not failed, until a GPU is lent again.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from _bench_tables import commit_text
from operators.provenance import PACKAGES, source_hashes

__all__ = ["CodeAge", "code_age", "acknowledged", "environment_of", "STALE", "ROOT"]

#: the list of results acknowledged as measured on older code, under the results folder: {file: reason}
STALE = "stale.json"
#: the checkout whose sources are the current code
ROOT = Path(__file__).resolve().parent.parent


def environment_of(results: dict) -> dict:
    """The environment record of a results JSON (``darcy16_equal_time`` writes it as ``code_version``)."""
    return results.get("environment") or results.get("code_version") or {}


@dataclass(frozen=True)
class CodeAge:
    """How a result file's code compares with the current sources. ``changed``: the measured packages whose
    sources differ (None: cannot tell); ``committed_in``: for a result naming no commit, the commit that added
    its JSON; ``acknowledged``: its reason in ``results/stale.json``; ``gpu``: a GPU result (reported, not failed)."""

    name: str
    env: dict
    changed: tuple[str, ...] | None
    committed_in: str | None = None
    acknowledged: str | None = None
    gpu: bool = False

    @property
    def older(self) -> bool:
        return self.env.get("commit") is None or self.changed is None or bool(self.changed)

    def _what(self) -> str:
        if self.env.get("commit") is None:
            since = (f" (its JSON was committed in `{self.committed_in}`: the code that made it is no newer)"
                     if self.committed_in else "")
            return f"run on older code, commit not recorded{since}"
        if self.changed is None:
            return f"{commit_text(self.env)} and no record of its sources: whether it is the current code cannot be told"
        return f"run on older code: {', '.join(self.changed)} changed since {commit_text(self.env)}"

    def line(self) -> str | None:
        """The section's line saying the result is older than its code (None when it is not)."""
        if not self.older:
            return None
        line = f"**Code:** `results/{self.name}` {self._what()}."
        if self.acknowledged:
            line += f" Listed in `results/{STALE}`: {self.acknowledged}"
        elif self.gpu:
            line += " Reported, not failed: GPU rows stay until a GPU is lent again."
        return line

    def problem(self) -> str | None:
        """What ``--check`` fails on (None: nothing)."""
        if self.older and not self.acknowledged and not self.gpu:
            return (f"results/{self.name}: {self._what()}; expected a rerun on the current code, or the file listed in "
                    f"results/{STALE} with the reason")
        if self.acknowledged and not self.older:
            return f"results/{self.name}: listed in results/{STALE} but measured on the current code; remove it there"
        return None


def _git(root: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() or None


@lru_cache(maxsize=None)
def _sources(commit: str | None, root: Path) -> dict[str, str] | None:
    return source_hashes(commit, root=root)


def _changed(results: dict, root: Path) -> tuple[str, ...] | None:
    env = environment_of(results)
    measures = tuple(results.get("measures") or PACKAGES)
    recorded = env.get("sources")
    if recorded is None and env.get("commit") and not env.get("dirty"):
        recorded = _sources(env["commit"], root)
    if recorded is None:
        return None
    now = _sources(None, root)
    return tuple(p for p in measures if recorded.get(p) != now[p])


def code_age(path: Path, results: dict, *, name: str, root: Path = ROOT,
             acknowledged_as: dict[str, str] | None = None) -> CodeAge:
    """The :class:`CodeAge` of the result file ``path`` (``results``: its JSON; ``name``: as ``results/stale.json``
    and the sections name it), against the sources of the checkout ``root``."""
    env = environment_of(results)
    added = None
    if env.get("commit") is None:
        history = _git(root, "log", "--diff-filter=A", "--format=%h (%cs)", "--", str(path.resolve()))
        added = history.splitlines()[-1] if history else None
    return CodeAge(name, env, _changed(results, root), added, (acknowledged_as or {}).get(name),
                   gpu=Path(name).name.startswith("bench-gpu"))


def acknowledged(results_dir: Path) -> dict[str, str]:
    """``results_dir/stale.json``: ``{file under results_dir: why it stays though measured on older code}``."""
    path = results_dir / STALE
    return json.loads(path.read_text()) if path.is_file() else {}
