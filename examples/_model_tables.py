"""The RESULTS.md section of ``python -m bench.bench_models --json results/bench-models.json``: one table of
what every registry model costs, eager and under ``torch.compile``, computed here from the stored rows.

A row's case is ``"<model>: <measure>"`` (the measures of ``bench/bench_models.py``). The winner is read
from the training step's speed-up (eager / compiled, minima over interleaved rounds): a side wins when it
is more than :data:`EVEN` faster, otherwise the two are even.
"""

from __future__ import annotations

import math

from _bench_tables import run_line

__all__ = ["models", "EVEN"]

#: speed-ups within this factor of 1 count as even (noise of a shared machine)
EVEN = 1.1
_COLUMNS = ["model", "params", "peak MB eager / compiled", "fwd ms eager / compiled", "fwd+bwd ms eager / compiled",
            "winner (fwd+bwd)", "CKB share"]


def _by_model(rows: list[dict]) -> dict[str, dict[str, dict]]:
    """``{model: {measure: row}}`` in the order the models were measured."""
    found: dict[str, dict[str, dict]] = {}
    for row in rows:
        model, sep, measure = row["case"].partition(": ")
        if sep and row["benchmark"] == "models":
            found.setdefault(model, {})[measure] = row
    return found


def _number(row: dict | None, digits: int = 3) -> str:
    """``digits`` significant digits, whole numbers from 10^digits on (no exponents); ``—`` when not measured."""
    if row is None or row["value"] is None or math.isnan(row["value"]):
        return "—"
    value = row["value"]
    return f"{value:.0f}" if abs(value) >= 10**digits else f"{value:.{digits}g}"


def _params(row: dict) -> str:
    n = row["value"]
    return f"{n / 1e6:.3g} M" if n >= 1e6 else f"{n / 1e3:.3g} k" if n >= 1e3 else f"{n:.0f}"


def _pair(measures: dict[str, dict], what: str) -> str:
    return f"{_number(measures.get(f'{what} eager'))} / {_number(measures.get(f'{what} compiled'))}"


def _winner(measures: dict[str, dict]) -> str:
    speed_up = measures.get("speed-up fwd+bwd (eager / compiled)")
    if speed_up is None:
        stopped = measures.get("not finished")
        return f"not compiled ({stopped['detail']})" if stopped else "—"
    value, compile_s = speed_up["value"], _number(measures.get("compile s"), 2)
    if value > EVEN:
        return f"compiled {value:.3g}× (compile {compile_s} s)"
    if value < 1 / EVEN:
        return f"eager {1 / value:.3g}×"
    return f"even ({value:.3g}×)"


def _share(measures: dict[str, dict]) -> str:
    row = measures.get("CKB share")
    return "—" if row is None else f"{100 * row['value']:.0f} %"


def _line(model: str, measures: dict[str, dict]) -> str:
    cells = [f"`{model}`", _params(measures["parameters"]), _pair(measures, "peak MB"), _pair(measures, "fwd"),
             _pair(measures, "fwd+bwd"), _winner(measures), _share(measures)]
    return "| " + " | ".join(cells) + " |"


def _inputs(found: dict[str, dict[str, dict]]) -> list[str]:
    """One line per input shape, naming the models that ran on it."""
    shapes: dict[str, list[str]] = {}
    for model, measures in found.items():
        shape = measures["parameters"]["detail"].split(", config")[0]
        shapes.setdefault(shape, []).append(f"`{model}`")
    return [f"- {shape}: {', '.join(names)}" for shape, names in shapes.items()]


def models(results: dict, rerun: dict | None = None) -> list[str]:
    """The section: the command and conditions, the table, the inputs and what compile wins. The models of
    ``rerun`` (``--only`` some models, run afterwards) take its rows in place of theirs."""
    found = _by_model(results["rows"])
    again = {} if rerun is None else _by_model(rerun["rows"])
    found = {m: again.get(m, v) for m, v in found.items()}
    found = {m: v for m, v in found.items() if "parameters" in v}
    lines = [f"{run_line(results)}. Times are the minimum over interleaved rounds (eager, compiled, "
             "...); peak MB is the rise of live tensor memory over one training step (torch.profiler), not RSS; "
             "fwd is a forward under `no_grad`, fwd+bwd a forward, mean-square loss and backward (no optimizer "
             "step); the CKB share is the time inside the Kirchhoff blocks over the eager step."]
    if again:
        lines.append(f"The rows of {', '.join(f'`{m}`' for m in again)} come from a later run of those models alone: "
                     f"{run_line(rerun)}.")
    busy = list(results["busy"]) + ([] if rerun is None else list(rerun["busy"]))
    lines += [""] + [f"> {line}" for line in busy] + ([""] if busy else [])
    lines += ["| " + " | ".join(_COLUMNS) + " |", "|" + "---|" * len(_COLUMNS)]
    lines += [_line(model, measures) for model, measures in found.items()]
    wins = [f"`{m}`" for m, v in found.items() if _winner(v).startswith("compiled")]
    lines += ["", "Inputs (batch first):", *_inputs(found), "",
              f"torch.compile speeds up the training step of: {', '.join(wins) if wins else 'none of the models'}."]
    return lines
