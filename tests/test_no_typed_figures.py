"""No measured figure typed by hand in README.md, docs/*.md or the packages' docstrings (issue 41).

A figure is a number with a unit of time, size, speed-up or share: "13×", "3 x faster", "3.1 ms", "2 s",
"45 minutes", "1.2 GB", "256 KiB", "5.7 %". A measured one belongs in a generated section, between
``<!-- generated: NAME -->`` and ``<!-- end generated: NAME -->`` (RESULTS.md's, written from the results
JSON, or README's demo time, checked here against ``results/demo-time.json``), or the text points at one.
Figures that measure nothing — a setting, an input's size, a factor by definition, an example of an output's
format — are listed in :data:`ALLOWED`, each with its reason; an entry that no longer matches fails too.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("circuitop", "pde_data", "operators", "evaluation")

_UNIT = (r"(?:×|x(?=\s+(?:faster|slower))|ms|µs|us|ns|s|sec|seconds?|min|minutes?|h|hours?|[kKMGT]i?B|%)")
#: a number (or a range of two) and a unit; "1×1" and "20×20×64²" are shapes, not figures
FIGURE = re.compile(r"(?<![\w.])\d+(?:[.,]\d+)?(?:\s*[–-]\s*\d+(?:[.,]\d+)?)?\s?" + _UNIT + r"(?![\w²³])")

#: (file, or "*" for any; a pattern whose match must cover the figure; why it is no measurement)
ALLOWED = [
    ("*", r"2× (?:\(bi\))?(?:average )?(?:pooling|resampling|upsampling|\(bi\)linear)|coarsens 2×",
     "the CKB's coarse grid halves each axis: a factor by definition"),
    ("*", r"(?:mmap|trim) threshold (?:to )?\d+ MiB|blocks below 64 MiB",
     "the glibc thresholds the allocator sets (pde_data/core/allocator.py)"),
    ("pde_data/core/allocator.py", r"128 KiB at", "glibc's default mmap threshold, from its manual"),
    ("*", r"4 KiB page", "the page size"),
    ("*", r"256 KiB (?:chunks|buffer)", "the read size of sha256_of"),
    ("*", r"at most 64 MiB|default 64 MiB", "the block size of the normalizer's streaming fit (max_bytes)"),
    ("docs/training.md", r"default 2 GiB", "the --memory-budget default"),
    ("docs/training.md", r"files of 1 GB and 4 GB", "the sizes of bench_data's input files"),
    ("docs/training.md", r"to 1\.2 GiB|a 201 MB file", "the bound and input size of tests/test_memory.py"),
    ("docs/training.md", r"is 60 MB", "computed from the window's shape (20 × 11 frames × 4 variables × 128²)"),
    ("docs/data-model.md", r"less than 2 s before", "the stamp's rule for a shard written just now"),
    ("pde_data/generate/sharded.py", r"about every 0\.2 s", "the poll interval of the progress callback"),
    ("pde_data/core/room.py", r"\(3\.15 MB\)|\"1\.23 MB\"|found 1\.2 MB free", "examples of the message's format"),
    ("operators/cli/_generation.py", r"\"1\.5 min\"", "an example of _duration's format"),
    ("operators/cli/_verified.py", r"1\.2 MB in 0\.01 s", "an example of the verification line's format"),
    ("pde_data/datasets/fields.py", r"80/10/10 %", "the default split"),
    ("evaluation/gapped.py", r"gap of (?:5|15|30) %|totalling 20 %", "the gapped protocol's gap sizes"),
]


def _markdown_lines(path: Path):
    """``(line number, line)`` of a Markdown file outside its generated sections."""
    inside = False
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if line.startswith("<!-- generated:"):
            inside = True
        elif line.startswith("<!-- end generated:"):
            inside = False
        elif not inside:
            yield number, line


def _docstring_lines(path: Path):
    """``(line number, line)`` of every module, class and function docstring of a Python file."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                    and isinstance(first.value.value, str):
                for offset, line in enumerate(first.value.value.splitlines()):
                    yield first.value.lineno + offset, line


def _texts():
    """``(file relative to the root, line number, line)`` of every text this test reads."""
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        yield from ((path.relative_to(ROOT).as_posix(), n, line) for n, line in _markdown_lines(path))
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            yield from ((path.relative_to(ROOT).as_posix(), n, line) for n, line in _docstring_lines(path))


def _allowed_by(file: str, line: str, figure: re.Match) -> int | None:
    """The index of the :data:`ALLOWED` entry that covers ``figure`` in ``line`` of ``file``, or None."""
    for index, (where, pattern, _) in enumerate(ALLOWED):
        if where in ("*", file) and any(m.start() <= figure.start() and figure.end() <= m.end()
                                        for m in re.finditer(pattern, line)):
            return index
    return None


def typed_figures(texts) -> tuple[list[str], set[int]]:
    """``file:line: figure | line`` of each figure that no entry allows, and the entries used."""
    found, used = [], set()
    for file, number, line in texts:
        for figure in FIGURE.finditer(line):
            index = _allowed_by(file, line, figure)
            if index is None:
                found.append(f"{file}:{number}: {figure.group(0)!r} | {line.strip()}")
            else:
                used.add(index)
    return found, used


def test_no_measured_figure_is_typed_by_hand():
    found, _ = typed_figures(_texts())
    assert not found, ("figures outside the generated sections (generate them from JSON, point at RESULTS.md's "
                       "generated sections, or add a non-measurement to ALLOWED with its reason):\n"
                       + "\n".join(found))


def test_every_allowed_entry_still_matches():
    _, used = typed_figures(_texts())
    assert set(range(len(ALLOWED))) == used, [ALLOWED[i][:2] for i in sorted(set(range(len(ALLOWED))) - used)]


def test_the_scanner_finds_what_it_should():
    lines = ["13× faster", "3.1 ms against 11.3 ms", "about 45 minutes", "9–11 min", "5.7% faster", "2 s",
             "a 1.2 GB file", "1.1-1.7x faster", "about 50x slower", "at 5.7 %"]
    found, _ = typed_figures(("README.md", n, line) for n, line in enumerate(lines, 1))
    assert len(found) == 11 and found[0].startswith("README.md:1: '13×'")
    shapes = ["a 1×1 branch", "20×20×64²", "n = 3 seeds", "version 1.2", "order 2 scheme", "16 steps"]
    assert typed_figures(("README.md", n, line) for n, line in enumerate(shapes, 1))[0] == []


def _demo_time_block(record: dict) -> str:
    """README's generated demo-time line from ``results/demo-time.json``."""
    load = record["load_average_1min"]
    code = f"commit `{record['commit'][:10]}`" + (" with uncommitted changes" if record["dirty"] else "")
    return (f"`make demo` (`{record['command']}`, embedded defaults) took {record['wall_seconds'] / 60:.1f} min "
            f"of wall time on {record['cores']} {record['conditions']} CPU cores (mean 1-minute load average "
            f"{load['mean']:.1f} during the run, up to {load['max']:.1f}; torch's default threads), measured once "
            f"on {code}, {record['date'][:10]} (`results/demo-time.json`).")


def test_the_readme_demo_time_is_the_measured_one():
    record = json.loads((ROOT / "results" / "demo-time.json").read_text())
    assert record["returncode"] == 0
    text = (ROOT / "README.md").read_text()
    block = text.split("<!-- generated: demo-time -->\n", 1)[1].split("\n<!-- end generated: demo-time -->", 1)[0]
    expected = _demo_time_block(record)
    assert block == expected, f"expected between README's demo-time markers:\n{expected}"
