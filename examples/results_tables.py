"""The RESULTS.md tables, generated from the stored results JSON.

The ``--medium`` runs' ``results.json`` files are kept in ``results/medium/<script>.json`` (``--collect RUNS``
copies ``RUNS/<script>/results.json`` there, medium runs only), the benchmarks' in ``results/bench*.json``.
This script renders one Markdown section per result and writes it into RESULTS.md between the markers
``<!-- generated: <name> -->`` and ``<!-- end generated: <name> -->``; nothing else in the file changes.
Each section says when its result was measured on code older than the packages it measures now
(:mod:`_code_age`). The claims' rules are in :mod:`_claims`, the renderers in :mod:`_medium_tables`,
:mod:`_bench_tables`, :mod:`_model_tables` and :mod:`_gpu_tables` (:mod:`_medium_tables` takes the sections of
``examples/online_vs_file.py`` and ``examples/conditioned_sweep.py``, which write their JSON there themselves, from
:mod:`_online_tables` and :mod:`_conditioning_tables`).

``--check`` writes nothing and exits 1 when a generated section differs from what the JSON gives (a test
runs it), when a table stands outside the generated sections, when a target's rows came back without a value
(NaN), or when a result names no commit or was measured on older code, unless ``results/stale.json`` lists it
with the reason (a GPU result is reported in its section, not failed, until a GPU is lent again).

Examples:
    python examples/results_tables.py --collect runs      # after the medium runs
    python examples/results_tables.py --check
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from _bench_tables import Verdict, merged_rows
from _bench_tables import bench as bench_section
from _bench_tables import verdicts as target_verdicts
from _code_age import STALE, acknowledged, code_age
from _gpu_tables import GpuRuns
from _gpu_tables import gpu as gpu_section
from _medium_tables import SCRIPTS, render
from _model_tables import models as models_section

__all__ = ["Section", "sections", "problems", "render", "update", "main"]

#: the generated sections of the full and the quick benchmark runs
BENCH, BENCH_QUICK = "bench", "bench_quick"
#: benchmarks run again alone after the full run (``results/bench-<name>.json``): their rows replace its
BENCH_RERUNS = ("generate", "trainer", "scan", "threads", "remote")
#: earlier GPU runs of bench_operators kept as history (``results/bench-gpu-<name>.json``, with the session's
#: gpu_check in ``-<name>-check.txt`` where kept), oldest first, and the transcribed records of earlier sessions'
#: test suites
GPU_HISTORY, GPU_HISTORY_TESTS = ("h200-before", "h200", "h100"), ("h200-tests", "h100-tests")

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Section:
    """One generated section: its marker ``name``, its ``lines``, the result ``files`` it renders (each gets a line
    when its code is older) and the ``verdicts`` of its targets (``--check`` fails on their NaN rows)."""

    name: str
    lines: tuple[str, ...]
    files: tuple[Path, ...] = ()
    verdicts: tuple[Verdict, ...] = ()


def _load(path: Path) -> dict:
    return json.loads(path.read_text())


def _medium(results_dir: Path) -> list[Section]:
    """One section per script with a JSON, the claims summary, and the demo's."""
    found = [Section(name, tuple(render(name, _load(path)).splitlines()), (path,)) for name in SCRIPTS
             if (path := results_dir / f"{name}.json").is_file()]
    if found:
        claims = [f"- `{s.name}`: {line[2:]}" for s in found for line in s.lines if line.startswith("- Claim")]
        found.append(Section("verdicts", tuple(claims)))
    if (demo := results_dir / "demo.json").is_file():
        found.append(Section("demo", tuple(render("demo", _load(demo)).splitlines()), (demo,)))
    return found


def _benchmarks(bench: Path) -> list[Section]:
    """The full run (with the benchmarks run again alone) and the quick run, the model table, the GPU section."""
    found = []
    again = [p for name in BENCH_RERUNS if (p := bench.with_name(f"{bench.stem}-{name}.json")).is_file()]
    quick = bench.with_name(bench.stem + "-quick.json")
    for name, path, reruns in ((BENCH, bench, again), (BENCH_QUICK, quick, [])):
        if path.is_file():
            results, later = _load(path), tuple(_load(p) for p in reruns)
            found.append(Section(name, tuple(bench_section(results, later)), (path, *reruns),
                                 tuple(target_verdicts(merged_rows(results, later)))))
    models = bench.with_name(bench.stem + "-models.json")
    if models.is_file():
        rerun = models.with_name(models.stem + "-rerun.json")
        found.append(Section("models", tuple(models_section(_load(models), _load(rerun) if rerun.is_file() else None)),
                             (models, *([rerun] if rerun.is_file() else []))))
    gpu = bench.with_name(bench.stem + "-gpu.json")
    if gpu.is_file():
        found.append(_gpu(gpu))
    return found


def _gpu(gpu: Path) -> Section:
    def beside(suffix: str) -> Path:
        return gpu.with_name(gpu.stem + suffix)

    def text(suffix: str) -> str | None:
        return beside(suffix).read_text() if beside(suffix).is_file() else None

    names = [name for name in GPU_HISTORY if beside(f"-{name}.json").is_file()]
    history = [beside(f"-{name}.json") for name in names]
    checks = tuple((c.name, c.read_text()) if (c := beside(f"-{name}-check.txt")).is_file() else None for name in names)
    trainer, notes = beside("-trainer.json"), beside("-tests-notes.json")
    runs = GpuRuns(_load(gpu), _load(trainer) if trainer.is_file() else None, text("-check.txt"), text("-tests.txt"),
                   _load(notes) if notes.is_file() else None, tuple(_load(p) for p in history), checks,
                   tuple(_load(p) for name in GPU_HISTORY_TESTS if (p := beside(f"-{name}.json")).is_file()))
    rows = runs.operators["rows"] + (runs.trainer["rows"] if runs.trainer else [])
    return Section("gpu", tuple(gpu_section(runs)), (gpu, *([trainer] if trainer.is_file() else []), *history),
                   tuple(v for v in target_verdicts(rows) if v.measured or v.missing))


def sections(results_dir: Path, bench: Path) -> list[Section]:
    """Every generated section the stored results give: ``results_dir`` holds the medium runs' JSON, ``bench`` is
    the full benchmark run's JSON, the other benchmark files beside it."""
    return _medium(results_dir) + _benchmarks(bench)


def _name(path: Path, results_root: Path) -> str:
    try:
        return path.resolve().relative_to(results_root.resolve()).as_posix()
    except ValueError:
        return path.name


def _aged(section: Section, results_root: Path, acks: dict[str, str]) -> tuple[list[str], list[str]]:
    """The section's lines, each older result's line first, and what ``--check`` fails on."""
    ages = [code_age(p, _load(p), name=_name(p, results_root), acknowledged_as=acks) for p in section.files]
    said = [line for age in ages if (line := age.line())]
    found = [problem for age in ages if (problem := age.problem())]
    for v in section.verdicts:
        if v.failed_rows:
            lost = "; ".join(r["case"] for r in v.missing)
            found.append(f"RESULTS.md section {section.name}: the target '{v.target.claim}' has rows with no value "
                         f"({lost}): {v.status}; expected a value (rerun the benchmark)")
    return said + ([""] if said else []) + list(section.lines), found


def problems(found: list[Section], results_root: Path) -> list[str]:
    """What ``--check`` fails on besides out-of-date text: see :func:`_aged`, and entries of ``results/stale.json``
    naming no file."""
    acks = acknowledged(results_root)
    issues = [f"results/{STALE}: lists {name}, found no such file" for name in acks if not (results_root / name).is_file()]
    return issues + [issue for s in found for issue in _aged(s, results_root, acks)[1]]


def _markers(name: str) -> tuple[str, str]:
    return f"<!-- generated: {name} -->\n", f"<!-- end generated: {name} -->"


def update(text: str, name: str, body: str) -> str:
    """``text`` with the section of ``name`` replaced by ``body``; the markers must be there."""
    begin, end = _markers(name)
    if begin not in text or end not in text:
        raise SystemExit(f"RESULTS.md: expected the markers {begin.strip()!r} and {end!r}, found none")
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    return head + begin + body + end + tail


def hand_tables(text: str) -> list[int]:
    """Line numbers of Markdown table rules (``|---``) outside the generated sections: tables typed by hand."""
    found, inside = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith("<!-- generated:"):
            inside = True
        elif line.startswith("<!-- end generated:"):
            inside = False
        elif line.startswith("|---") and not inside:
            found.append(number)
    return found


def collect(runs: Path, results_dir: Path, demo_dir: Path = ROOT / "demo_output") -> None:
    """Copy ``runs/<script>/results.json`` of every medium run into ``results_dir`` as ``<script>.json``,
    and the demo's ``metrics.json`` as ``demo.json``."""
    if (demo_dir / "metrics.json").is_file():
        results_dir.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(demo_dir / "metrics.json", results_dir / "demo.json")
        print(f"collected {demo_dir / 'metrics.json'}")
    for name in SCRIPTS:
        source = runs / name / "results.json"
        if source.is_file() and json.loads(source.read_text())["scale"] == "medium":
            results_dir.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, results_dir / f"{name}.json")
            print(f"collected {source}")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--results", type=Path, default=ROOT / "results" / "medium",
                   help="folder of <script>.json (default results/medium/)")
    p.add_argument("--file", type=Path, default=ROOT / "RESULTS.md", help="the Markdown file to update")
    p.add_argument("--collect", type=Path, default=None, metavar="RUNS",
                   help="first copy RUNS/<script>/results.json of medium runs into --results")
    p.add_argument("--bench", type=Path, default=ROOT / "results" / "bench.json",
                   help="python -m bench --json output (default results/bench.json; beside it: -quick.json, python -m "
                        "bench --quick; -generate/-trainer/-scan/-threads/-remote.json, a benchmark run again alone; -models.json, "
                        "circuitop bench models; -gpu*.json, -gpu-check.txt and -gpu-tests.txt, bench/gpu_session.sh "
                        "on a GPU; stale.json, the results acknowledged as measured on older code)")
    p.add_argument("--check", action="store_true",
                   help="write nothing; exit 1 when a section is out of date or a result fails the rules above")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.collect:
        collect(args.collect, args.results)
    results_root = args.bench.parent
    text = original = args.file.read_text()
    found = sections(args.results, args.bench)
    acks = acknowledged(results_root)
    for section in found:
        text = update(text, section.name, "\n".join(_aged(section, results_root, acks)[0]) + "\n")
    typed = hand_tables(text)
    if typed:
        print(f"{args.file}: tables outside the generated sections (lines {typed}); expected every table generated "
              "from JSON", file=sys.stderr)
        return 1
    failures = problems(found, results_root)
    if args.check and text != original:
        failures.append(f"{args.file}: generated sections out of date; run python examples/results_tables.py")
    for line in failures:
        print(line, file=sys.stderr)
    if not args.check and text != original:
        tmp = args.file.with_name(args.file.name + ".tmp")
        tmp.write_text(text)
        tmp.replace(args.file)
        print(f"updated {args.file}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
