"""An evaluation's numbers as a person reads them: the metric table (the model, each baseline, each variable; a
window run's rollout mean), its headline rows, and ``metrics.md``."""

from __future__ import annotations

__all__ = ["metric_rows", "parameter_lines", "rollout_lines", "markdown", "HEADLINE"]


#: the rows ``circuitop evaluate`` prints (those a result has): the field losses and the rollout's mean, PDEBench's
#: RMSE, nRMSE and frequency bands, The Well's VRMSE; a classifier's and a sequence model's own (all of theirs)
HEADLINE = ("rel_l2", "rel_l1", "rollout_mean_rel_l2", "RMSE", "nRMSE", "VRMSE", "fRMSE_low", "fRMSE_mid",
            "fRMSE_high", "top1", "top5", "cross_entropy", "mse", "rmse", "phm", "phm_sum")


def metric_rows(result: dict, *, headline: bool = False) -> list[list[str]]:
    """The table of an evaluation ``result``: ``["metric", "model", <each baseline>, <"model [v]" per variable>]``,
    then one row of values per metric (``headline``: the :data:`HEADLINE` ones alone); a window run's rollout mean
    is a row ``rollout_mean_rel_l2 (<steps> steps)``."""
    columns = {"model": dict(result["metrics"])}
    if "rollout" in result:
        columns["model"][f"rollout_mean_rel_l2 ({result['rollout']['steps']} steps)"] = result["rollout"]["mean_rel_l2"]
    columns.update({name.replace("_", " "): values for name, values in result.get("baseline", {}).items()})
    columns.update({f"model [{v}]": values for v, values in result.get("per_variable", {}).items()})
    names = [n for n in columns["model"] if not headline or n.split(" ")[0] in HEADLINE]
    intervals = result.get("intervals", {})
    head = ["metric", *columns]
    if intervals:
        head[1] = f"model ({round(100 * result['bootstrap']['level'])}% interval)"
    return [head] + [[name, *(_cell(col, name, intervals if k == 0 else {}) for k, col in enumerate(columns.values()))]
                     for name in names]


def _cell(column: dict, name: str, intervals: dict) -> str:
    """A value (``nan`` where the JSON has None) with its interval where there is one, or nothing where the column
    lacks the metric."""
    if name not in column:
        return ""
    if column[name] is None:
        return "nan"
    low, high = intervals.get(name) or (None, None)
    return f"{column[name]:.6g}" + ("" if low is None or high is None else f" ({low:.3g}-{high:.3g})")


def rollout_lines(result: dict) -> list[str]:
    """A window run's long-rollout scores (``result["rollout"]``): The Well's windows of VRMSE (with intervals), the
    correlation times and each variable's drift at the last step."""
    rollout = result.get("rollout", {})
    lines = []
    for metric, windows in rollout.get("windows", {}).items():
        parts = [f"{name}: {w['value']:.4g}" + (f" ({w['interval'][0]:.3g}-{w['interval'][1]:.3g})"
                                                 if w.get("interval") and None not in w["interval"] else "")
                 for name, w in windows.items()]
        lines.append(f"rollout {metric} by steps  " + "; ".join(parts))
    for threshold, c in rollout.get("correlation_time", {}).items():
        median = "never (all steps)" if c["median"] is None else f"step {c['median']:.0f}"
        lines.append(f"correlation < {threshold}: median {median}, quartiles {_step(c['q25'])}-{_step(c['q75'])}, "
                     f"{c['never']} of the trajectories never in {c['steps']} steps")
    for name, d in rollout.get("drift", {}).items():
        lines.append(f"drift of {name} at step {len(d['mass'])}: mass {_signed(d['mass'][-1])}, "
                     f"energy {_signed(d['energy'][-1])} (against the truth's)")
    return lines


def _step(value) -> str:
    return "never" if value is None else f"{value:.0f}"


def _signed(value) -> str:
    return "nan" if value is None else f"{value:+.3g}"


def parameter_lines(result: dict) -> list[str]:
    """A conditioned run's errors by each parameter's value (``result["per_parameter"]``), a line per group: its
    values, where they lie against the training range, its samples and mean relative L2 error."""
    lines = []
    for name, part in result.get("per_parameter", {}).items():
        low, high = part["train_range"]
        lines.append(f"rel_l2 by {name} (where: inside, below or above the training range {low:.4g}..{high:.4g}):")
        for g in part["groups"]:
            values = f"{g['low']:.4g}" if g["low"] == g["high"] else f"{g['low']:.4g}..{g['high']:.4g}"
            lines.append(f"  {name} {values:<17} {g['where']:<6} {g['samples']:>5} samples  {g['error']:.4g}")
    return lines


def markdown(result: dict, run: str) -> str:
    """``metrics.md``: every metric of ``result`` as a Markdown table, under what was scored."""
    rows = metric_rows(result)
    head = f"# {run} on {result['data']}: {result['scored']}, {result['n_samples']} samples (epoch {result['epoch']})"
    lines = [head, "", *(f"({result[k]})" for k in ("warning", "note") if k in result), "",
             "| " + " | ".join(rows[0]) + " |", "|" + "---|" * len(rows[0])]
    by_parameter = parameter_lines(result) + rollout_lines(result)
    by_parameter = ["", "```", *by_parameter, "```"] if by_parameter else []
    return "\n".join([*lines, *("| " + " | ".join(row) + " |" for row in rows[1:]), *by_parameter]) + "\n"
