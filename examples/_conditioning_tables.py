"""The RESULTS.md section of ``examples/conditioned_sweep.py``: ``fno`` and ``chonn_fno`` trained with and without
``--condition beta`` on Darcy flow with β drawn per sample, from its JSON (``results/medium/conditioned_sweep.json``).

A model's verdict follows :mod:`_claims`: conditioning lowers the in-range error only when the conditioned runs' mean
is lower than the unconditioned runs' by more than their two standard deviations over the seeds added.
"""

from __future__ import annotations

from _bench_tables import commit_text
from _claims import NOT_MEASURED, SPREAD, compare, stat_of

__all__ = ["conditioned_sweep"]

_WHERE = {"in_range": "in range", "out_of_range": "out of range"}


def _pm(stat: dict, digits: int = 3) -> str:
    """``mean ± std`` of a seed statistic (the medium tables' format)."""
    return f"{stat['mean']:.{digits}g} ± {stat['std']:.{digits - 1}g}"


def _table(columns: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns),
            *("| " + " | ".join(row) + " |" for row in rows)]


def _runs(rows: list[dict], model: str, conditioned: bool) -> list[dict]:
    return sorted((r for r in rows if r["model"] == model and r["conditioned"] == conditioned), key=lambda r: r["seed"])


def _stat(rows: list[dict], model: str, conditioned: bool, key: str) -> dict:
    return stat_of([r[key] for r in _runs(rows, model, conditioned)])


def _label(model: str, conditioned: bool) -> str:
    return f"`{model}`" + (" + β" if conditioned else "")


def _config(config: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in config.items())


def _intro(results: dict, seeds: list[int]) -> str:
    s, env = results["settings"], results["environment"]
    (low, high), far, epochs = s["train_range"], s["out_of_range"], s["epochs"]
    smoke = "**Smoke run** (tiny data, one epoch): a check of the script, not evidence. " \
        if results["scale"] != "medium" else ""
    models = "; ".join(f"`{m}` {_config(c)}" for m, c in s["models"].items())
    load = " → ".join(map(str, env["load_average"]))
    return (f"{smoke}`OMP_NUM_THREADS=1 python examples/conditioned_sweep.py`: Darcy flow at {s['n_grid']}², β drawn "
            f"per sample. Trained on {s['split'][0]} samples of `generate darcy --gen beta={s['train']['beta']}` (data "
            f"seed {s['data_seeds'][0]}; training range β ∈ [{low:.3f}, {high:.3f}]); scored on its {s['split'][2]} "
            f"test samples (β new but inside the range) and on {far['n']} samples of `--gen beta={far['beta']}` (data "
            f"seed {s['data_seeds'][1]}). Every run: {epochs} epoch{'s' if epochs > 1 else ''}, batch "
            f"{s['batch_size']}, AdamW lr {s['lr']:g}, {s['scheduler']} schedule, no validation split, the last "
            f"epoch's model; {models} (`chonn_fno` small for CPU time). The two runs of a model differ only in "
            f"`--condition beta` (+ β: a FiLM embedding of β modulating every layer). Training seeds "
            f"{', '.join(map(str, seeds))}; mean ± sample standard deviation over them; {s['threads']} thread per "
            f"run, **{results['wall_s'] / 60:.0f} min** wall time on {env['cores']} cores (1-minute load {load} "
            f"from start to end). Code: {commit_text(env) or 'not recorded'}.")


def _main_table(results: dict, models: list[str]) -> list[str]:
    rows, keys = results["rows"], ("in_range_rel_l2", "out_of_range_rel_l2", "train_s")
    body = [[_label(m, c), *(_pm(_stat(rows, m, c, key)) for key in keys), f"{_runs(rows, m, c)[0]['params']:,}"]
            for m in models for c in (False, True)]
    body.append(["mean-field predictor", *(f"{results['mean_field_predictor'][w]:.3g}" for w in _WHERE), "", ""])
    body.append([f"β-blind reference (exact u scaled by c = {results['beta_blind_scale']:.3g})",
                 *(f"{results['beta_blind_reference'][w]:.3g}" for w in _WHERE), "", ""])
    columns = ["model", "rel. L2 in range (test split)", "rel. L2 out of range", "training (s)", "parameters"]
    return [*_table(columns, body), "",
            "The β-blind reference: the exact u scaled by the one c best for the training samples' β; as u is "
            "linear in β, a model that does not see β cannot do better on β drawn as in training. Training (s): the "
            "epochs' own time, without the process's start-up."]


def _groups_table(results: dict, models: list[str]) -> list[str]:
    """Rel. L2 per group of β (mean over seeds), one row per group; none when the runs' groups differ."""
    rows, body = results["rows"], []
    columns = [(m, c) for m in models for c in (False, True)]
    for where in _WHERE:
        per_run = {key: [r["per_parameter"][where]["groups"] for r in _runs(rows, *key)] for key in columns}
        first = per_run[columns[0]][0]
        if any([g["samples"] for g in groups] != [g["samples"] for g in first]
               for runs in per_run.values() for groups in runs):
            return [f"(The runs' groups by β differ {_WHERE[where]}: no table by β.)"]
        for k, g in enumerate(first):
            means = [sum(groups[k]["error"] for groups in per_run[key]) / len(per_run[key]) for key in columns]
            low, high = f"{g['low']:.2f}", f"{g['high']:.2f}"
            body.append([low if low == high else f"{low}–{high}", g["where"], str(g["samples"]),
                         *(f"{v:.3g}" for v in means)])
    return ["Rel. L2 by β, mean over the seeds (the test split's and the out-of-range file's samples grouped by β; "
            "where: against the training range):", "",
            *_table(["β", "where", "samples", *(_label(*key) for key in columns)], body)]


def _finding(rows: list[dict], model: str, seeds: int) -> str:
    """The verdict on "conditioning lowers the in-range error" for ``model`` by the seed-spread rule; and out of
    range, how the conditioned error compares."""
    stats = {w: (_stat(rows, model, True, f"{w}_rel_l2"), _stat(rows, model, False, f"{w}_rel_l2")) for w in _WHERE}
    found = {w: compare(*pair) for w, pair in stats.items()}
    verdict = {"lower": "yes", NOT_MEASURED: NOT_MEASURED}.get(found["in_range"], "no")
    why = {"lower": "lower beyond the seed spread", "higher": "higher beyond the seed spread", SPREAD: SPREAD,
           NOT_MEASURED: "a seed statistic is NaN"}
    far = why[found["out_of_range"]].replace(SPREAD, "the same within the seed spread")
    return (f"- Finding (`{model}`): conditioning on β lowers the in-range error: **{verdict}** (conditioned "
            f"{_pm(stats['in_range'][0])} against unconditioned {_pm(stats['in_range'][1])}: {why[found['in_range']]}; "
            f"n = {seeds} seeds). Out of range the conditioned error is {far} ({_pm(stats['out_of_range'][0])} against "
            f"{_pm(stats['out_of_range'][1])}).")


def conditioned_sweep(results: dict) -> list[str]:
    """Markdown lines: the settings, the errors per model and condition (mean ± std over seeds) beside the mean-field
    predictor's and the β-blind reference's (the exact u at the scale best for the training β: what a model without β
    can reach), the errors by β, and a finding per model, from the payload
    ``examples/conditioned_sweep.py`` writes."""
    rows = results["rows"]
    models = list(dict.fromkeys(r["model"] for r in rows))
    seeds = sorted({r["seed"] for r in rows})
    return [_intro(results, seeds), "", *_main_table(results, models), "", *_groups_table(results, models), "",
            *(_finding(rows, m, len(seeds)) for m in models)]
