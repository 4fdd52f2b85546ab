"""The RESULTS.md section of ``python -m bench --json results/bench.json``: one table per benchmark and the
verdict of every speed and memory target, computed here from the stored rows.

A target names a benchmark, words of a row's case and a bound; it holds when every matching row (one per
thread count, or per file size) is within it. A target without a matching row is reported as not measured.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass

__all__ = ["bench", "commit_text", "TARGETS"]


@dataclass(frozen=True)
class Target:
    """``claim`` holds when every row of a benchmark named ``benchmark...`` (sizes follow the name, and differ
    between quick and full runs) whose case contains ``case`` is ``op`` ``bound``."""

    claim: str
    benchmark: str
    case: str
    op: str
    bound: float


TARGETS = (
    Target("a chonn_fno training step ≤ 2× an fno step, CKB on the full grid (issue #34)", "operators train step",
           "chonn_fno order 2, downsample 1 / fno", "<=", 2.0),
    Target("the same with the CKB on a 2× coarsened grid", "operators train step",
           "chonn_fno order 2, downsample 2 / fno", "<=", 2.0),
    Target("selective scan fwd+bwd within 10× one elementwise pass", "scan ", "fwd+bwd / mul", "<=", 10.0),
    Target("LTC ≥ 3× ncps's speed, forward and backward", "LTC AutoNCP(64,8)", "forward+backward", ">=", 3.0),
    Target("NAC-Exact/8k forward under 50 ms at T = 1024", "nac", "NAC-Exact/05s/8k T=1024", "<", 50.0),
    Target("Navier–Stokes step ≥ 2× a numpy port in float64", "navier_stokes", "16x64^2 float64: speed-up", ">=", 2.0),
    Target("Navier–Stokes step ≥ 5× a numpy port in float32", "navier_stokes", "16x64^2 float32: speed-up", ">=", 5.0),
    Target("fused shallow-water step ≥ 3× the eager step", "shallow_water", "128^2 batch 4 float32: speed-up", ">=", 3.0),
    Target("Darcy direct solve under 1 s per sample at 128²", "darcy", "direct FV solve", "<", 1.0),
    Target("streaming loader ≥ 0.8× the raw sequential h5py read rate (trivial model; issue #34)", "data",
           "disk speed: loader 0 workers / raw file order", ">=", 0.8),
    Target("our trainer ≤ 1.0× neuraloperator's Trainer, whole processes, in memory and streamed (issue #34)",
           "trainer", "time ours / neuraloperator", "<=", 1.0),
    Target("equal accuracy with neuraloperator's Trainer (val rel. L2 within 5 %)", "trainer",
           "val rel L2 ours / neuraloperator", "<=", 1.05),
    Target("Navier–Stokes generation on 2 Dask workers ≥ 1.7× on 1 (issue #33)", "generate",
           "Dask 2 workers vs 1 (speed-up)", ">=", 1.7),
    Target("Dask at 1 worker within 10 % of the plain loop", "generate", "Dask 1 worker / plain loop", "<=", 1.1),
    Target("peak memory of generate ns flat in --n (within 10 %)", "generate", "peak RSS --n", "<=", 1.1),
)
_OPS = {"<=": operator.le, "<": operator.lt, ">=": operator.ge}


def _case(row: dict) -> str:
    threads = row.get("threads")
    return row["case"] + ("" if threads is None else f", {threads} thread{'s' if threads != 1 else ''}")


def _matches(target: Target, rows: list[dict]) -> list[dict]:
    return [r for r in rows if r["benchmark"].startswith(target.benchmark) and target.case in r["case"]]


def _verdict(target: Target, rows: list[dict]) -> str:
    found = [r for r in _matches(target, rows) if not math.isnan(r["value"])]
    if not found:
        return f"- Target ({target.claim}): **not measured** in this run."
    held = all(_OPS[target.op](r["value"], target.bound) for r in found)
    values = "; ".join(f"{_case(r)}: {r['value']:.3g} {r['unit']}" for r in found)
    return f"- Target ({target.claim}, {target.op} {target.bound:g}): **{'met' if held else 'not met'}** ({values})."


def _value(value: float) -> str:
    return "n/a" if value is None or math.isnan(value) else f"{value:.4g}"


def commit_text(env: dict) -> str | None:
    """``commit `abc1234567` [with uncommitted changes]`` of a results file's environment, or None unrecorded."""
    if env.get("commit") is None:
        return None
    return f"commit `{env['commit'][:10]}`{' with uncommitted changes' if env['dirty'] else ''}"


def _benchmark(row: dict) -> str:
    """The benchmark a row belongs to (a script's wall-time row names its module, ``bench_<name>``)."""
    return row["benchmark"].removeprefix("bench_") if row["case"] == "script wall time" else row["benchmark"]


def run_line(results: dict) -> str:
    """The command and conditions of a results file: threads, command, scale, cores, torch and commit."""
    env = results["environment"]
    code = commit_text(env) or "commit not recorded"
    threads = f"OMP_NUM_THREADS={env['omp_num_threads']}" if env.get("omp_num_threads") else "torch's default threads"
    return (f"`{threads} {results['command']}` ({results['scale']} sizes; {env['cores']} cores, torch {env['torch']}; "
            f"{code})")


def bench(results: dict, reruns: tuple[dict, ...] = ()) -> list[str]:
    """The section: the command and conditions, the targets' verdicts, then one table per benchmark. The rows of
    a benchmark in ``reruns`` (``python -m bench --only ...`` run afterwards) replace that benchmark's rows."""
    rerun_names = {r["benchmark"] for again in reruns for r in again["rows"]}
    rows = [r for r in results["rows"] if _benchmark(r) not in rerun_names]
    rows += [r for again in reruns for r in again["rows"]]
    lines = [f"{run_line(results)}. Every ratio is measured side by side in one run."]
    lines += [f"The rows of {', '.join(sorted({r['benchmark'] for r in again['rows'] if r['case'] != 'script wall time'}))} "
              f"come from a later run of that benchmark alone: {run_line(again)}." for again in reruns]
    lines.append("")
    busy = list(results["busy"]) + [line for again in reruns for line in again["busy"]]
    lines += [f"> {line}" for line in busy] + ([""] if busy else [])
    lines += [_verdict(t, rows) for t in TARGETS] + [""]
    groups: dict[str, list[dict]] = {}
    for row in rows:
        if row["case"] != "script wall time":
            groups.setdefault(row["benchmark"], []).append(row)
    walls = {r["benchmark"].removeprefix("bench_"): r["value"] for r in rows if r["case"] == "script wall time"}
    for name, group in groups.items():
        lines += [f"**{name}**", ""]
        lines += _table(group) + [""]
    lines.append("Script wall times (s): " + ", ".join(f"{k} {v:.0f}" for k, v in walls.items()) + ".")
    return lines


#: rows a GPU run of bench_operators made before they were left out there (they timed the CPU's kernels)
_CPU_ONLY_ON_GPU = "scan kernels alone"


def gpu(results: dict, before: dict | None = None, check: str | None = None) -> list[str]:
    """The GPU section: the run's conditions and GPU, the last line of the same run's ``bench.gpu_check`` output
    (``check``), its rows (less those that timed the CPU), and, given the run ``before`` a change, the full-grid
    ``chonn_fno`` / ``fno`` ratios of both side by side."""
    env = results["environment"]
    rows = [r for r in results["rows"] if r["case"] != "script wall time" and not r["case"].startswith(_CPU_ONLY_ON_GPU)]
    lines = [f"{run_line(results)}, on one {env.get('gpu', 'GPU')}. {results.get('note', '')}", ""]
    if check is not None:
        summary = [line for line in check.splitlines() if line.endswith("checks passed")]
        lines += [f"The same run's `python -m bench.gpu_check --device cuda` (every model's forward, loss, gradients "
                  f"and bf16 autocast, the solvers, the metrics against float64 CPU references; "
                  f"`results/bench-gpu-check.txt`): {summary[-1] if summary else 'no summary line'}.", ""]
    if before is not None:
        ratio = "chonn_fno order 2, downsample 1 / fno, full grid"
        then = {_case(r): r["value"] for r in before["rows"] if r["case"].startswith(ratio)}
        lines += [f"Full-grid `chonn_fno` / `fno` training step, before ({commit_text(before['environment'])}: "
                  f"{before.get('note', '').split('.')[0].removeprefix('code: ')}) and after:", "",
                  "| grid | before | after |", "|---|---|---|"]
        lines += [f"| {_case(r).removeprefix(ratio).strip()} | {_value(then.get(_case(r), float('nan')))} | "
                  f"{_value(r['value'])} |" for r in rows if r["case"].startswith(ratio)]
        lines.append("")
    return lines + _table(rows)


def _table(rows: list[dict]) -> list[str]:
    """Benchmark rows as a Markdown table: case, value, unit, detail."""
    return ["| case | value | unit | detail |", "|---|---|---|---|"] + [
        f"| {_case(r)} | {_value(r['value'])} | {r['unit']} | {r['detail'].replace('|', '/')} |" for r in rows]
