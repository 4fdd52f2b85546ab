"""The RESULTS.md section of ``examples/online_vs_file.py``: online against file-based training at equal wall
clock, from its JSON (``results/medium/online_vs_file.json``)."""

from __future__ import annotations

import numpy as np
from _bench_tables import commit_text
from _claims import SPREAD, compare, stat_of

__all__ = ["online_vs_file"]

_COLUMNS = (("epochs", "epochs", "{:.0f}"), ("samples_seen", "samples seen", "{:.0f}"),
            ("distinct_samples", "distinct samples", "{:.0f}"), ("test_step_rel_l2", "test rel. L2, one step", "{:.4f}"),
            ("test_rollout_rel_l2", "test rel. L2, rollout", "{:.4f}"))


def _cell(values: list[float], fmt: str) -> str:
    """``mean ± std`` over seeds (sample std), or the value alone for one seed."""
    if len(values) == 1:
        return fmt.format(values[0])
    stat = stat_of(values)
    return f"{fmt.format(stat['mean'])} ± {fmt.format(stat['std'])}"


def online_vs_file(results: dict) -> list[str]:
    """Markdown lines: the settings, one row per arm (means ± std over seeds) and the background-generation
    timing, from the payload ``examples/online_vs_file.py`` writes."""
    s, rows = results["settings"], results["rows"]
    seeds = sorted({r["seed"] for r in rows})
    gen = s["gen"]
    lines = [f"Navier–Stokes {gen['n_sim']}², t = {gen['t_final']:g}, {gen['n_records']} records; FNO "
             f"{', '.join(f'{k}={v}' for k, v in s['model'].items())}, window 1; budget {s['budget']:g} s of wall "
             f"clock per arm ({s['budget_counts']}); file: {s['n_file']} samples; online: {s['n_epoch']} new samples "
             f"per epoch; test: {s['n_test']} samples of seed {s['test_seed']}, one step from the first frame and "
             f"rolled out {rows[0]['rollout_steps']} steps (rel. L2 over the rollout); seeds {seeds}; "
             f"{results['environment']['threads']} thread(s), {results['environment']['note']}.", "",
             "| arm | " + " | ".join(title for _, title, _ in _COLUMNS) + " |",
             "|---|" + "---|" * len(_COLUMNS)]
    for arm in dict.fromkeys(r["arm"] for r in rows):
        mine = [r for r in rows if r["arm"] == arm]
        lines.append(f"| {arm} | " + " | ".join(_cell([r[key] for r in mine], fmt) for key, _, fmt in _COLUMNS) + " |")
    overlap = results["overlap"]
    ratio = overlap["in_turn_over_background"]
    seconds = {mode: float(np.mean(v)) for mode, v in overlap["epoch_s"].items()}
    lines += ["", f"Making the next epoch's samples in a background thread: {seconds['background']:.2f} s per online "
                  f"epoch against {seconds['in_turn']:.2f} s made in turn (in turn / background "
                  f"{ratio['min']:.2f}–{ratio['max']:.2f}, interleaved repeats)."]
    errors = {arm: stat_of([r["test_step_rel_l2"] for r in rows if r["arm"] == arm]) for arm in ("file", "online")}
    steps = {arm: float(np.mean([r["samples_seen"] for r in rows if r["arm"] == arm])) for arm in ("file", "online")}
    found = compare(errors["file"], errors["online"])
    which = (f"neither arm's one-step error is lower beyond the seed spread (n = {len(seeds)} seeds)" if found == SPREAD
             else f"the **{'file' if found == 'lower' else 'online'}** arm has the lower one-step error beyond the "
                  "seed spread")
    lines += ["", f"- Finding: at this scale {which} ({_cell(errors['file']['values'], '{:.3f}')} file, "
                  f"{_cell(errors['online']['values'], '{:.3f}')} online); in the same wall clock the online arm trained "
                  f"on {steps['online'] / steps['file']:.2f}× the samples the file arm did (its solver runs on the same "
                  f"CPU as training). Code: {commit_text(results['environment']) or 'not recorded'}."]
    return lines
