"""The RESULTS.md section of the GPU sessions (``bench/gpu_session.sh`` on a lent GPU): the latest run's
benchmark rows with their targets' verdicts, its ``bench.gpu_check`` summary, its trainer rows and what its
test suite did (parsed from the stored pytest log, with the failures' known causes from a hand-written notes
record), then earlier runs as history, each labelled with its card and commit. Timings are never compared
across cards; a ratio is always within one run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from _bench_tables import commit_text, row_case, run_line, table_rows, value_text, verdicts, with_host_ratios

__all__ = ["GpuRuns", "SuiteRun", "suite_run", "gpu"]

#: rows a GPU run of bench_operators made before they were left out there (they timed the CPU's kernels)
_CPU_ONLY_ON_GPU = "scan kernels alone"
#: the full-grid ratio every run has, the one history compares (within each run)
_FULL_GRID = "chonn_fno order 2, downsample 1 / fno, full grid"


@dataclass(frozen=True)
class SuiteRun:
    """What a pytest log of ``bench/gpu_session.sh``'s test stage shows: ``items`` collected, the tests that
    passed and failed, the failed ones whose worker crashed (xdist's "node down"), the segmentation faults
    the log reports, the stage's time limit, exit status and seconds, and pytest's per-test timeout."""

    items: int
    passed: int
    failed: tuple[str, ...]
    crashed: tuple[str, ...]
    segfaults: int
    limit_s: int | None
    exit_code: int | None
    seconds: int | None
    timeout_s: float | None
    workers: int

    @property
    def unfinished(self) -> int:
        return self.items - self.passed - len(self.failed)


def suite_run(log: str) -> SuiteRun:
    """Parse the test stage's log (``pytest -v -n N`` output framed by the session's ``== tests`` lines)."""
    collected = re.search(r"(\d+) workers \[(\d+) items\]", log)
    if collected is None:
        raise ValueError("GPU test log: expected xdist's 'N workers [M items]' line, found none")
    passed = log.count("PASSED tests/")  # a worker's line may be interleaved with another's output
    failed, crashed, down = [], [], set()
    for line in log.splitlines():
        if (worker := re.match(r"\[(gw\d+)\] node down", line)) is not None:
            down.add(worker.group(1))
        elif (fail := re.match(r"\[(gw\d+)\] \[ *\d+%\] FAILED (.+?)\s*$", line)) is not None:
            failed.append(fail.group(2))
            if fail.group(1) in down:
                crashed.append(fail.group(2))
                down.discard(fail.group(1))
    limit = re.search(r"== tests \(at most (\d+) s", log)
    end = re.search(r"== tests: exit (\d+) after (\d+) s", log)
    timeout = re.search(r"^timeout: ([\d.]+)s", log, re.M)
    return SuiteRun(int(collected.group(2)), passed, tuple(failed), tuple(crashed),
                    log.count("Fatal Python error: Segmentation fault"), int(limit.group(1)) if limit else None,
                    int(end.group(1)) if end else None, int(end.group(2)) if end else None,
                    float(timeout.group(1)) if timeout else None, int(collected.group(1)))


@dataclass(frozen=True)
class GpuRuns:
    """The stored GPU results: the latest session's ``operators`` run (bench_operators), its ``trainer`` run
    (bench_trainer --device cuda), its gpu_check output ``check`` and test log ``tests``; ``tests_notes``: the
    known causes of that log's failures (``{"commit", "causes": [{"tests", "cause"}], "after"}``, hand-written; its
    commit must be the session's); ``history``: earlier bench_operators runs, oldest first; ``history_checks``: each
    earlier run's gpu_check output (file name, text), or None, in the order of ``history``; ``history_tests``:
    earlier sessions' test records (transcribed)."""

    operators: dict
    trainer: dict | None = None
    check: str | None = None
    tests: str | None = None
    tests_notes: dict | None = None
    history: tuple[dict, ...] = ()
    history_checks: tuple[tuple[str, str] | None, ...] = ()
    history_tests: tuple[dict, ...] = ()


def _card(results: dict) -> str:
    return results["environment"].get("gpu", "GPU")


def _rows(results: dict) -> list[dict]:
    return with_host_ratios([r for r in results["rows"] if r["case"] != "script wall time"
                             and not r["case"].startswith(_CPU_ONLY_ON_GPU)])


def _check_summary(check: str) -> str:
    summary = [line for line in check.splitlines() if line.endswith("checks passed")]
    return summary[-1] if summary else "no summary line"


def _causes(run: SuiteRun, notes: dict | None, commit: str) -> dict[str, str]:
    """Each failed test's known cause from the notes (none without notes); notes of another session's commit, or
    naming a test that did not fail, are refused."""
    if notes is None:
        return {}
    if notes.get("commit") != commit:
        raise ValueError(f"GPU test notes: written for commit {notes.get('commit')}, the latest session's is {commit}: "
                         "update or remove results/bench-gpu-tests-notes.json")
    causes = {name: entry["cause"] for entry in notes.get("causes", ()) for name in entry["tests"]}
    if stray := [name for name in causes if name not in run.failed]:
        raise ValueError(f"GPU test notes: a cause for tests that did not fail in the log: {', '.join(stray)}")
    return causes


def _suite_lines(run: SuiteRun, torch: str, notes: dict | None = None, commit: str = "") -> list[str]:
    stopped = (f"; {run.unfinished} had not finished when the stage was stopped at its {run.limit_s} s limit "
               f"(exit {run.exit_code}), so pytest's summary, with the failures' tracebacks, was not printed"
               if run.exit_code == 124 else f"; exit {run.exit_code} after {run.seconds} s")
    lines = [f"The test suite on the same machine (`pytest -n {run.workers}`, {run.timeout_s:g} s per test; "
             f"`results/bench-gpu-tests.txt`): of {run.items} tests, {run.passed} passed, {len(run.failed)} failed"
             f"{stopped}.", ""]
    crash = " (the log shows a segmentation fault for each)" if run.segfaults == len(run.crashed) else ""
    causes = _causes(run, notes, commit)
    names = lambda found: ", ".join(f"`{name}`" for name in found)  # noqa: E731
    other = [name for name in run.failed if name not in run.crashed]
    if run.crashed:
        known = "".join(f" Cause: {cause}." for cause in dict.fromkeys(causes[n] for n in run.crashed if n in causes))
        lines.append(f"- Their worker process crashed{crash}; that machine runs torch {torch}: "
                     f"{names(run.crashed)}.{known}")
    for cause in dict.fromkeys(causes[name] for name in other if name in causes):
        lines.append(f"- {names(n for n in other if causes.get(n) == cause)}: {cause}.")
    if unknown := [name for name in other if name not in causes]:
        lines.append(f"- Failed, no traceback in the log: {names(unknown)}.")
    if notes is not None and notes.get("after"):
        lines.append(f"- {notes['after']}")
    return lines + [""]


def _history_lines(runs: GpuRuns) -> list[str]:
    """Each earlier run's line and rows, and the full-grid ratio of every run side by side, labelled."""
    every = (*runs.history, runs.operators)
    lines = ["**Earlier runs (history).** Each on its own card and commit; the ratios below are within each run, "
             "and runs on different cards differ in card as well as kernel.", ""]
    checks = runs.history_checks + (None,) * (len(runs.history) - len(runs.history_checks))
    for old, check in zip(runs.history, checks):
        line = f"- {run_line(old)}, on one {_card(old)}. {old.get('note', '')}".rstrip()
        if check is not None:
            line += f" Its session's gpu_check (`results/{check[0]}`): {_check_summary(check[1])}."
        lines.append(line)
    for record in runs.history_tests:
        failed = ", ".join(f"`{name}`" for name in record["failed"])
        count = (f"of {record['ran']} tests, {record['passed']} passed, "
                 f"{record['ran'] - record['passed'] - len(record['failed'])} had not finished, "
                 if "passed" in record else f"{record['ran']} tests ran, ")
        lines.append(f"- The test suite at {commit_text(record)} on one {record['gpu']}: {count}"
                     f"{len(record['failed'])} failed ({failed}; {record['note']}). Source: {record['source']}.")
    sizes = [row_case(r).removeprefix(_FULL_GRID).strip() for r in _rows(runs.operators)
             if r["case"].startswith(_FULL_GRID)]
    lines += ["", "Full-grid `chonn_fno` / `fno` training step, each run's own ratio:", "",
              "| run | " + " | ".join(sizes) + " |", "|---|" + "---|" * len(sizes)]
    for results in every:
        found = {row_case(r).removeprefix(_FULL_GRID).strip(): r["value"] for r in _rows(results)
                 if r["case"].startswith(_FULL_GRID)}
        lines.append(f"| {_card(results)}, {commit_text(results['environment'])} | "
                     + " | ".join(value_text(found.get(size)) for size in sizes) + " |")
    lines.append("")
    for old in runs.history[-1:]:
        lines += [f"The rows of the last earlier run ({_card(old)}, {commit_text(old['environment'])}):", "",
                  *table_rows(_rows(old)), ""]
    return lines


def gpu(runs: GpuRuns) -> list[str]:
    """The section: the latest session (bench_operators' rows and their targets' verdicts, gpu_check, the trainer's
    rows and verdicts, the test suite), then the earlier runs as history."""
    current = runs.operators
    rows = _rows(current)
    lines = [f"**Latest session.** {run_line(current)}, on one {_card(current)}. {current.get('note', '')}".rstrip(), ""]
    if runs.check is not None:
        lines += [f"The same session's `python -m bench.gpu_check --device cuda` (every model's forward, loss, "
                  f"gradients and bf16 autocast, the solvers, the metrics against float64 CPU references; "
                  f"`results/bench-gpu-check.txt`): {_check_summary(runs.check)}.", ""]
    lines += [v.line() for v in verdicts(rows) if v.measured or v.missing] + [""] + table_rows(rows) + [""]
    if runs.trainer is not None:
        trainer = [r for r in runs.trainer["rows"] if r["case"] != "script wall time"]
        lines += [f"Our trainer against neuraloperator's on the GPU (a run of its own): {run_line(runs.trainer)}, on one "
                  f"{_card(runs.trainer)}:", ""]
        lines += [v.line() for v in verdicts(trainer) if v.measured or v.missing] + [""] + table_rows(trainer) + [""]
    if runs.tests is not None:
        environment = current["environment"]
        lines += _suite_lines(suite_run(runs.tests), environment["torch"], runs.tests_notes,
                              environment.get("commit", ""))
    return lines + (_history_lines(runs) if runs.history else [])
