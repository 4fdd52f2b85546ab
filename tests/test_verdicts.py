"""Verdicts that can fail: the benchmark targets (examples/_bench_tables.py), the GPU section's parsed test log,
the memory rows of bench_generate, the sources a result records and the checks ``results_tables.py --check``
makes of the stored results (examples/_code_age.py). Each rule has a case where it must fail."""

from __future__ import annotations

import contextlib
import io
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))
try:
    import _bench_tables as bt
    import _gpu_tables as gt
    import results_tables
finally:
    sys.path.remove(str(ROOT / "examples"))


def _row(case: str, value: float, benchmark: str = "operators train step", unit: str = "ratio") -> dict:
    return {"benchmark": benchmark, "case": case, "value": value, "unit": unit, "detail": "", "threads": 1}


T = bt.Target("x ≤ 2", "operators train step", "a / fno", "<=", 2.0)


def test_a_target_is_met_only_when_every_matching_row_holds() -> None:
    assert bt.verdict(T, [_row("a / fno, 16²", 1.5), _row("a / fno, 64²", 2.0)]).status == "met"
    assert bt.verdict(T, [_row("a / fno, 16²", 1.5), _row("a / fno, 64²", 2.01)]).status == "not met"
    assert bt.verdict(T, [_row("b / fno", 9.0), _row("a / fno", 1.0, benchmark="scan")]).status == "not measured"
    strict = bt.Target("under 50 ms", "nac", "T=1024", "<", 50.0)
    assert bt.verdict(strict, [_row("T=1024", 50.0, benchmark="nac")]).status == "not met"
    at_least = bt.Target("≥ 3×", "ltc", "speed", ">=", 3.0)
    assert bt.verdict(at_least, [_row("speed", 2.99, benchmark="ltc")]).status == "not met"


def test_nan_rows_are_never_met() -> None:
    """A NaN row is a measurement that failed: all NaN is "not measured", some NaN "partly measured" naming them
    (not "met" from the rest), and a measured row out of bound still makes it "not met"."""
    nan = float("nan")
    only = bt.verdict(T, [_row("a / fno, 16²", nan), _row("a / fno, 64²", None)])
    assert only.status == "not measured" and only.failed_rows and "no value for: a / fno, 16²" in only.line()
    partly = bt.verdict(T, [_row("a / fno, 16²", 1.0), _row("a / fno, 64²", nan)])
    assert partly.status == "partly measured" and partly.failed_rows
    assert "**partly measured** (a / fno, 16², 1 thread: 1 ratio; no value for: a / fno, 64², 1 thread)" in partly.line()
    assert bt.verdict(T, [_row("a / fno, 16²", 3.0), _row("a / fno, 64²", nan)]).status == "not met"
    assert not bt.verdict(T, []).failed_rows and bt.verdict(T, []).line() == "- Target (x ≤ 2): **not measured** in this run."


def test_every_target_is_listed_and_the_failing_ones_from_the_row_details_are_targets() -> None:
    """The bench section lists every target, failing ones included; the PSS bound and the Navier–Stokes FFT floor,
    once only in row details, are targets, not met on the committed full run."""
    results = json.loads((ROOT / "results" / "bench.json").read_text())
    lines = [line for line in bt.bench(results) if line.startswith("- Target (")]
    assert len(lines) == len(bt.TARGETS)
    found = {v.target.case: v.status for v in bt.verdicts(bt.merged_rows(results))}
    assert found["CLI train peak PSS (tree)"] == "not met" and found["step / FFT floor"] == "not met"


def test_the_scan_target_names_the_non_allocating_floor() -> None:
    scan = next(t for t in bt.TARGETS if t.benchmark == "scan ")
    allocating = [_row("fwd+bwd / mul, Q auto", 5.0, benchmark="scan 8x4096x64x16", unit="x")]
    assert bt.verdict(scan, allocating).status == "not measured"
    floor = [_row("fwd+bwd / mul(out=), Q auto", 26.3, benchmark="scan 8x4096x64x16", unit="x")]
    assert bt.verdict(scan, floor).status == "not met"


def test_the_coarsened_ckb_is_compared_with_its_host_too() -> None:
    """A run that predates the host ratio row gets it from its two time rows, right after the ``/ fno`` ratio, and
    the host target judges it; a run that has the row keeps its own."""
    rows = [_row("fno", 0.010, unit="s"), _row(bt.HOST, 0.008, unit="s"), _row(f"{bt.HOST} / fno", 0.8),
            _row("chonn_fno order 2, downsample 2", 0.028, unit="s"), _row("chonn_fno order 2, downsample 2 / fno", 2.8)]
    out = bt.with_host_ratios(rows)
    assert [r["case"] for r in out][-1] == f"chonn_fno order 2, downsample 2 / {bt.HOST}"
    assert out[-1]["value"] == pytest.approx(3.5) and len(out) == len(rows) + 1
    host = next(t for t in bt.TARGETS if t.case.endswith(f"/ {bt.HOST}"))
    fno = next(t for t in bt.TARGETS if t.case == "chonn_fno order 2, downsample 2 / fno")
    assert bt.verdict(host, out).status == "not met" and bt.verdict(fno, out).status == "not met"
    assert bt.with_host_ratios(out) == out  # written once


def test_gpu_rows_get_verdicts() -> None:
    """The GPU section judges its rows against the same targets (the H200 run at 9d3f663: full grid not met)."""
    load = lambda name: json.loads((ROOT / "results" / name).read_text())  # noqa: E731
    lines = gt.gpu(gt.GpuRuns(load("bench-gpu.json"), load("bench-gpu-trainer.json")))
    targets = [line for line in lines if line.startswith("- Target (")]
    assert any("CKB on the full grid" in line and "**not met**" in line for line in targets)
    assert any("its own host" in line for line in targets) and any("neuraloperator's Trainer" in line for line in targets)


LOG = """== tests (at most 300 s, 10:00:00)
timeout: 120.0s
3 workers [6 items]
[gw0] [ 16%] PASSED tests/test_a.py::test_one
[gw1] [ 33%] PASSED tests/test_a.py::test_two[a b]
tests/test_c.py::test_crash Fatal Python error: Segmentation fault
[gw2] node down: Not properly terminated
[gw2] [ 50%] FAILED tests/test_c.py::test_crash
[gw0] [ 66%] FAILED tests/test_a.py::test_slow
tests/test_a.py::test_last == tests: exit 124 after 300 s
"""


def test_the_gpu_test_log_is_read_for_what_passed_failed_and_crashed() -> None:
    run = gt.suite_run(LOG)
    assert (run.items, run.passed, run.failed, run.crashed) == (
        6, 2, ("tests/test_c.py::test_crash", "tests/test_a.py::test_slow"), ("tests/test_c.py::test_crash",))
    assert (run.unfinished, run.limit_s, run.exit_code, run.segfaults, run.workers) == (2, 300, 124, 1, 3)
    stored = gt.suite_run((ROOT / "results" / "bench-gpu-tests.txt").read_text())
    assert (stored.items, stored.passed, len(stored.failed), len(stored.crashed), stored.exit_code) == (1245, 1213, 18, 3, 124)


def test_known_causes_group_the_failures_and_must_fit_the_session() -> None:
    """The notes' causes are said beside the failures they explain (a crash's after the crash line), the rest stay
    "no traceback"; notes of another commit, or naming a test that did not fail, are refused."""
    run, commit = gt.suite_run(LOG), "a" * 40
    notes = {"commit": commit, "causes": [{"tests": ["tests/test_c.py::test_crash"], "cause": "the extension raised"}],
             "after": "A rerun was cut."}
    lines = gt._suite_lines(run, "2", notes, commit)
    assert any(line.startswith("- Their worker process crashed") and line.endswith("Cause: the extension raised.")
               for line in lines)
    assert "- Failed, no traceback in the log: `tests/test_a.py::test_slow`." in lines and "- A rerun was cut." in lines
    slow = {**notes, "causes": [{"tests": ["tests/test_a.py::test_slow"], "cause": "too slow"}]}
    assert "- `tests/test_a.py::test_slow`: too slow." in gt._suite_lines(run, "2", slow, commit)
    with pytest.raises(ValueError, match="written for commit"):
        gt._suite_lines(run, "2", notes, "b" * 40)
    with pytest.raises(ValueError, match="did not fail"):
        gt._suite_lines(run, "2", {**notes, "causes": [{"tests": ["tests/test_a.py::test_one"], "cause": "x"}]}, commit)


def test_every_earlier_gpu_run_is_labelled_with_its_card_commit_and_own_check() -> None:
    """The stored history (two H200 runs, then the H100 one) renders each run with its card and commit, oldest
    first, the gpu_check beside the run it belongs to, and every transcribed test record."""
    section = next(s for s in results_tables.sections(ROOT / "results" / "medium", ROOT / "results" / "bench.json")
                   if s.name == "gpu")
    history = section.lines[section.lines.index(next(line for line in section.lines if line.startswith("**Earlier"))):]
    runs = [line for line in history if line.startswith("- `OMP_NUM_THREADS=1 python -m bench --only bench_operators`")]
    assert [("H100" in line, "H200" in line) for line in runs] == [(False, True), (False, True), (True, False)]
    assert "`5ead3c8ebb`" in runs[0] and "`431d56836e`" in runs[1] and "`a773b72c70`" in runs[2]
    assert "gpu_check" not in runs[0] and "`results/bench-gpu-h200-check.txt`" in runs[1]
    assert "`results/bench-gpu-h100-check.txt`): 87 of 87 checks passed." in runs[2]
    tests = [line for line in history if line.startswith("- The test suite at")]
    assert len(tests) == 2 and "of 1133 tests, 1117 passed, 10 had not finished, 6 failed" in tests[1]
    ratios = [line for line in history if line.startswith("| NVIDIA")]
    cards = ["| NVIDIA H200"] * 2 + ["| NVIDIA H100 80GB HBM3", "| NVIDIA H200"]
    assert [line.split(",")[0] for line in ratios] == cards
    assert "`9d3f663f3d`" in ratios[-1]


def test_the_memory_rows_cannot_pass_a_writer_that_keeps_the_samples() -> None:
    """bench_generate's ratio is NaN (not measured) when the set is too small to tell; with a set above half the
    baseline, a writer that kept the samples (peak = baseline + set) breaks the 1.1 bound."""
    from bench import bench_generate

    target = next(t for t in bt.TARGETS if t.case == "peak RSS flat in --n")
    rows = lambda peaks: [r.__dict__ for r in bench_generate._memory_rows(peaks, 50)]  # noqa: E731
    small_set = rows({64: (350.0, 0.25), 1024: (352.0, 4.0)})
    assert math.isnan(small_set[-1]["value"]) and "too small to tell" in small_set[-1]["detail"]
    assert bt.verdict(target, small_set).status == "not measured"
    base, data = 450.0, 400.0
    assert data >= bench_generate.SET_OVER_BASELINE * base
    assert bt.verdict(target, rows({32: (base, 25.0), 512: (base + 5, data)})).status == "met"
    kept = rows({32: (base, 25.0), 512: (base + data, data)})
    assert bt.verdict(target, kept).status == "not met" and "400 MB, 0.89x the --n 32 peak of 450 MB" in kept[-1]["detail"]


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, check=True,
                          capture_output=True, text=True).stdout


def test_source_hashes_of_the_files_equal_their_commits_and_change_with_them(tmp_path: Path) -> None:
    from operators.provenance import source_hashes

    (tmp_path / "pkg" / "csrc").mkdir(parents=True)
    (tmp_path / "pkg" / "a.py").write_text("x = 1\n")
    (tmp_path / "pkg" / "csrc" / "k.cpp").write_text("int f();\n")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-qm", "one")
    (tmp_path / "pkg" / "notes.txt").write_text("not a source\n")
    (tmp_path / "pkg" / "a.cpython-311.pyc").write_bytes(b"\0")
    on_disk = source_hashes(root=tmp_path, packages=("pkg",))
    assert on_disk == source_hashes("HEAD", root=tmp_path, packages=("pkg",))
    (tmp_path / "pkg" / "csrc" / "k.cpp").write_text("int f(int);\n")
    assert source_hashes(root=tmp_path, packages=("pkg",)) != on_disk
    assert source_hashes("no-such-commit", root=tmp_path, packages=("pkg",)) is None


def test_a_benchmark_json_records_its_sources_and_what_it_measures(tmp_path: Path) -> None:
    from bench import __main__ as entry
    from bench._util import Row
    from operators.provenance import PACKAGES, source_hashes

    assert set(entry.MEASURES) == set(entry.discover()) | set(entry.SEPARATE)
    out = tmp_path / "r.json"
    entry._write_json(out, [Row("scan x", "a", 1.0, "x")], [], quick=True, busy=[], modules=["bench_scan"])
    written = json.loads(out.read_text())
    assert written["measures"] == ["circuitop"] and written["environment"]["sources"] == source_hashes()
    entry._write_json(out, [], [], quick=True, busy=[], program="python -m bench.bench_trainer")
    assert json.loads(out.read_text())["measures"] == list(PACKAGES)


# -- results_tables.py --check on stored results ---------------------------------------------------------
def _current_environment() -> dict:
    from operators.provenance import code_version

    return {"python": "3", "torch": "2", "cores": 2, "omp_num_threads": "1", **code_version()}


def _checked(tmp_path: Path, files: dict[str, dict], stale: dict[str, str] | None = None) -> tuple[int, str, str]:
    """Write ``files`` (under results/) and a RESULTS.md with the bench and gpu markers, generate it, then
    ``--check``; returns the check's exit status, its stderr and the generated text."""
    results = tmp_path / "results"
    (results / "medium").mkdir(parents=True)
    for name, payload in files.items():
        (results / name).write_text(json.dumps(payload))
    if stale is not None:
        (results / "stale.json").write_text(json.dumps(stale))
    md = tmp_path / "RESULTS.md"
    md.write_text("# R\n\n<!-- generated: bench -->\n<!-- end generated: bench -->\n\n"
                  "<!-- generated: gpu -->\n<!-- end generated: gpu -->\n")
    args = ["--results", str(results / "medium"), "--bench", str(results / "bench.json"), "--file", str(md)]
    results_tables.main(args)
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = results_tables.main([*args, "--check"])
    return code, err.getvalue(), md.read_text()


def _bench(environment: dict, value: float = 1.5) -> dict:
    return {"command": "python -m bench", "scale": "full", "environment": environment, "busy": [],
            "measures": ["circuitop"], "rows": [_row("chonn_fno order 2, downsample 1 / fno, full grid 16²", value)]}


def test_check_passes_a_current_result_and_fails_a_nan_only_target(tmp_path: Path) -> None:
    code, err, text = _checked(tmp_path / "a", {"bench.json": _bench(_current_environment())})
    assert code == 0, err
    assert "**met**" in text and "**Code:**" not in text
    code, err, _ = _checked(tmp_path / "b", {"bench.json": _bench(_current_environment(), float("nan"))})
    assert code == 1 and "has rows with no value (chonn_fno order 2, downsample 1 / fno, full grid 16²)" in err


def test_check_fails_a_result_without_commit_unless_listed_as_stale(tmp_path: Path) -> None:
    env = {**_current_environment(), "commit": None, "dirty": False}
    env.pop("sources")
    code, err, _ = _checked(tmp_path / "a", {"bench.json": _bench(env)})
    assert code == 1 and "results/bench.json: run on older code, commit not recorded" in err
    code, err, text = _checked(tmp_path / "b", {"bench.json": _bench(env)}, {"bench.json": "rerun pending."})
    assert code == 0, err
    assert "**Code:** `results/bench.json` run on older code, commit not recorded. Listed in `results/stale.json`: " \
           "rerun pending." in text


def test_check_fails_a_result_older_than_its_code_but_reports_a_gpu_one(tmp_path: Path) -> None:
    old = {**_current_environment(), "sources": {"circuitop": "0" * 16}}
    code, err, text = _checked(tmp_path / "a", {"bench.json": _bench(old)})
    assert code == 1 and "results/bench.json: run on older code: circuitop changed since commit" in err
    gpu = {**_bench(old), "command": "python -m bench --only bench_operators"}
    code, err, text = _checked(tmp_path / "b", {"bench.json": _bench(_current_environment()), "bench-gpu.json": gpu})
    assert code == 0, err
    assert "`results/bench-gpu.json` run on older code: circuitop changed since" in text
    assert "Reported, not failed" in text
    code, err, _ = _checked(tmp_path / "c", {"bench.json": _bench(_current_environment())}, {"bench.json": "old."})
    assert code == 1 and "listed in results/stale.json but measured on the current code" in err
    code, err, _ = _checked(tmp_path / "d", {"bench.json": _bench(_current_environment())}, {"gone.json": "old."})
    assert code == 1 and "lists gone.json, found no such file" in err
