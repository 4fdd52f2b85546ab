"""The RESULTS.md section of ``python -m bench --json results/bench.json``: one table per benchmark and the
verdict of every speed and memory target, computed here from the stored rows.

A target names a benchmark, words of a row's case and a bound; it holds when every matching row (one per
thread count, or per file size) is within it. Every target is listed with its verdict, failing ones
included. A row whose value is NaN is a measurement that did not come back: a target whose rows are all
NaN is "not measured", one with some NaN rows "partly measured" (naming them) unless a measured row
already breaks the bound; neither is ever "met". A target without a matching row is "not measured in this
run".
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass

__all__ = ["bench", "commit_text", "run_line", "merged_rows", "verdict", "verdicts", "with_host_ratios", "table_rows",
           "value_text", "row_case", "Target", "Verdict", "TARGETS", "HOST"]

#: the CKB's own host in bench_operators' rows: the same FNO with no blocks
HOST = "chonn_fno order 0 (host)"


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
    Target("the CKB on a 2× coarsened grid ≤ 2× its own host (chonn_fno at order 0: what the blocks cost)",
           "operators train step", f"chonn_fno order 2, downsample 2 / {HOST}", "<=", 2.0),
    Target("selective scan fwd+bwd within 10× one elementwise pass into a preallocated output (torch.mul(out=))",
           "scan ", "fwd+bwd / mul(out=)", "<=", 10.0),
    Target("LTC ≥ 3× ncps's speed, forward and backward", "LTC AutoNCP(64,8)", "forward+backward", ">=", 3.0),
    Target("NAC-Exact/8k forward under 50 ms at T = 1024", "nac", "NAC-Exact/05s/8k T=1024", "<", 50.0),
    Target("Navier–Stokes step ≥ 2× a numpy port in float64", "navier_stokes", "16x64^2 float64: speed-up", ">=", 2.0),
    Target("Navier–Stokes step ≥ 5× a numpy port in float32", "navier_stokes", "16x64^2 float32: speed-up", ">=", 5.0),
    Target("Navier–Stokes step ≤ 1.5× its FFT floor (the step's five FFTs alone)", "navier_stokes", "step / FFT floor",
           "<=", 1.5),
    Target("fused shallow-water step ≥ 3× the eager step", "shallow_water", "128^2 batch 4 float32: speed-up", ">=", 3.0),
    Target("Darcy direct solve under 1 s per sample at 128²", "darcy", "direct FV solve", "<", 1.0),
    Target("streaming loader ≥ 0.8× the raw sequential h5py read rate (trivial model; issue #34)", "data",
           "disk speed: loader 0 workers / raw file order", ">=", 0.8),
    Target("streamed training of a file within 1536 MB PSS (the CLI's process tree; the full run's files are 1 and 4 GB)", "data",
           "CLI train peak PSS (tree)", "<=", 1536.0),
    Target("streaming a file over HTTP on loopback ≥ 0.5× from local disk, 2 loader workers (issue #45)", "data_remote",
           "loader http / local HDF5", ">=", 0.5),
    Target("streaming a Zarr store ≥ 0.8× the same data in HDF5, locally, 2 loader workers (issue #45)", "data_remote",
           "loader zarr / local HDF5", ">=", 0.8),
    Target("our trainer ≤ 1.0× neuraloperator's Trainer, whole processes, in memory and streamed (issue #34)",
           "trainer", "time ours / neuraloperator", "<=", 1.0),
    Target("equal accuracy with neuraloperator's Trainer (val rel. L2 within 5 %)", "trainer",
           "val rel L2 ours / neuraloperator", "<=", 1.05),
    Target("--threads auto on a busy machine (a second training beside) within 1.2× of the best fixed count "
           "(issue #43)", "threads", "busy (a second training beside): auto / best fixed", "<=", 1.2),
    Target("--threads auto on a quiet machine no slower than torch's default (5 % for noise; issue #43)", "threads",
           "quiet: auto / torch's default", "<=", 1.05),
    Target("Navier–Stokes generation on 2 Dask workers ≥ 1.7× on 1 (issue #33)", "generate",
           "Dask 2 workers vs 1 (speed-up)", ">=", 1.7),
    Target("Dask at 1 worker within 10 % of the plain loop", "generate", "Dask 1 worker / plain loop", "<=", 1.1),
    Target("peak memory of generate ns flat in --n (within 10 %), with a set large enough that holding it would "
           "break the bound", "generate", "peak RSS flat in --n", "<=", 1.1),
)
_OPS = {"<=": operator.le, "<": operator.lt, ">=": operator.ge}


@dataclass(frozen=True)
class Verdict:
    """What one run's rows say of a target: ``status`` is "met", "not met", "partly measured" or "not measured";
    ``measured`` the matching rows with a value, ``missing`` those that are NaN (a measurement that failed)."""

    target: Target
    status: str
    measured: tuple[dict, ...]
    missing: tuple[dict, ...]

    @property
    def failed_rows(self) -> bool:
        """Whether a matching row came back NaN (``--check`` fails on it: rerun the benchmark)."""
        return bool(self.missing)

    def line(self) -> str:
        t = self.target
        if not self.measured and not self.missing:
            return f"- Target ({t.claim}): **not measured** in this run."
        values = "; ".join(f"{row_case(r)}: {r['value']:.3g} {r['unit']}" for r in self.measured)
        lost = "; ".join(row_case(r) for r in self.missing)
        detail = "; ".join(part for part in (values, f"no value for: {lost}" if lost else "") if part)
        return f"- Target ({t.claim}, {t.op} {t.bound:g}): **{self.status}** ({detail})."


def _nan(value) -> bool:
    return value is None or math.isnan(value)


def verdict(target: Target, rows: list[dict]) -> Verdict:
    """The verdict of ``target`` on a run's ``rows``: "met" only when every matching row has a value within the
    bound; "not met" as soon as one measured row is outside it; otherwise "partly measured" (some rows NaN) or
    "not measured" (every row NaN, or none matches)."""
    found = [r for r in rows if r["benchmark"].startswith(target.benchmark) and target.case in r["case"]]
    measured = tuple(r for r in found if not _nan(r["value"]))
    missing = tuple(r for r in found if _nan(r["value"]))
    held = all(_OPS[target.op](r["value"], target.bound) for r in measured)
    if not measured:
        status = "not measured"
    elif not held:
        status = "not met"
    else:
        status = "partly measured" if missing else "met"
    return Verdict(target, status, measured, missing)


def verdicts(rows: list[dict], targets: tuple[Target, ...] = TARGETS) -> list[Verdict]:
    """The verdict of every target on ``rows``, in the order of ``targets``."""
    return [verdict(t, rows) for t in targets]


def value_text(value: float | None) -> str:
    return "n/a" if _nan(value) else f"{value:.4g}"


def row_case(row: dict) -> str:
    """A row's case with the thread count it ran under."""
    threads = row.get("threads")
    return row["case"] + ("" if threads is None else f", {threads} thread{'s' if threads != 1 else ''}")


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


def with_host_ratios(rows: list[dict]) -> list[dict]:
    """``rows`` with ``<chonn_fno ...> / chonn_fno order 0 (host)`` after each CKB-hosting row's ``/ fno`` ratio,
    computed from the run's two time rows where the run predates bench_operators writing that row itself."""
    times = {r["case"]: r for r in rows if r["benchmark"] == "operators train step" and r["unit"] == "s"}
    if HOST not in times:
        return rows
    have = {r["case"] for r in rows}
    out = []
    for row in rows:
        out.append(row)
        name = row["case"].removesuffix(" / fno")
        if (row["case"].endswith(" / fno") and name.startswith("chonn_fno") and name != HOST
                and name in times and f"{name} / {HOST}" not in have):
            out.append({**row, "case": f"{name} / {HOST}", "value": times[name]["value"] / times[HOST]["value"],
                        "detail": "time ratio: the blocks' cost over their own host (computed here from this run's "
                                  "two time rows: the run predates bench_operators writing it)"})
    return out


def merged_rows(results: dict, reruns: tuple[dict, ...] = ()) -> list[dict]:
    """The rows of a run, a benchmark's rows in ``reruns`` (``python -m bench --only ...`` run afterwards)
    replacing that benchmark's, the host ratios added (:func:`with_host_ratios`)."""
    rerun_names = {r["benchmark"] for again in reruns for r in again["rows"]}
    rows = [r for r in results["rows"] if _benchmark(r) not in rerun_names]
    return with_host_ratios(rows + [r for again in reruns for r in again["rows"]])


def bench(results: dict, reruns: tuple[dict, ...] = ()) -> list[str]:
    """The section: the command and conditions, every target's verdict, then one table per benchmark. The rows
    of a benchmark in ``reruns`` replace that benchmark's rows (:func:`merged_rows`)."""
    rows = merged_rows(results, reruns)
    lines = [f"{run_line(results)}. Every ratio is measured side by side in one run."]
    lines += [f"The rows of {', '.join(sorted({r['benchmark'] for r in again['rows'] if r['case'] != 'script wall time'}))} "
              f"come from a later run of that benchmark alone: {run_line(again)}." for again in reruns]
    lines.append("")
    busy = list(results["busy"]) + [line for again in reruns for line in again["busy"]]
    lines += [f"> {line}" for line in busy] + ([""] if busy else [])
    lines += [v.line() for v in verdicts(rows)] + [""]
    groups: dict[str, list[dict]] = {}
    for row in rows:
        if row["case"] != "script wall time":
            groups.setdefault(row["benchmark"], []).append(row)
    walls = {r["benchmark"].removeprefix("bench_"): r["value"] for r in rows if r["case"] == "script wall time"}
    for name, group in groups.items():
        lines += [f"**{name}**", ""]
        lines += table_rows(group) + [""]
    lines.append("Script wall times (s): " + ", ".join(f"{k} {v:.0f}" for k, v in walls.items()) + ".")
    return lines


def table_rows(rows: list[dict]) -> list[str]:
    """Benchmark rows as a Markdown table: case, value, unit, detail."""
    return ["| case | value | unit | detail |", "|---|---|---|---|"] + [
        f"| {row_case(r)} | {value_text(r['value'])} | {r['unit']} | {r['detail'].replace('|', '/')} |" for r in rows]
