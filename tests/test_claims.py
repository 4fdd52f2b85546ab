"""Claims worded by what the data can show (examples/_claims.py and the renderers that use it): a difference only
beyond the seed spread, a "best" only when lower than every other beyond it, and "reproduced" for a claim of no
difference only within the margin its definition states. Each rule has a case where it must fail."""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))
try:
    import _claims as claims
    import _medium_tables as medium
    import _online_tables as online
finally:
    sys.path.remove(str(ROOT / "examples"))


def _stat(mean: float, std: float, n: int = 3) -> dict:
    return {"mean": mean, "std": std, "values": [mean] * n}


def _medium(name: str) -> dict:
    return json.loads((ROOT / "results" / "medium" / f"{name}.json").read_text())


def test_compare_counts_a_difference_only_beyond_the_seed_spread() -> None:
    assert claims.compare(_stat(1.0, 0.1), _stat(1.3, 0.1)) == "lower"
    assert claims.compare(_stat(1.3, 0.1), _stat(1.0, 0.1)) == "higher"
    assert claims.compare(_stat(1.0, 0.25), _stat(1.5, 0.25)) == claims.SPREAD  # the gap equals the spread
    assert claims.compare(_stat(1.0, 0.0), _stat(1.01, 0.0)) == "lower"


def test_stat_of_is_the_mean_and_sample_std() -> None:
    stat = claims.stat_of([1.0, 2.0, 6.0])
    assert stat["mean"] == 3.0 and abs(stat["std"] - 2.6457513) < 1e-6 and claims.stat_of([2.0])["std"] == 0.0


def test_a_best_must_be_lower_than_every_other_beyond_the_spread() -> None:
    spread = {"order 3": _stat(16.5, 5.2), "order 4": _stat(19.9, 10.0), "order 0": _stat(17.5, 8.1)}
    assert claims.lowest_beyond(spread) is None
    assert "not beyond the seed spread of order 4, order 0" in claims.lowest_line(spread, "error")
    clear = {"order 4": _stat(1.0, 0.1), "order 0": _stat(2.0, 0.1), "order 1": _stat(1.3, 0.1)}
    assert claims.lowest_beyond(clear) == "order 4"
    assert "lower than every other beyond the seed spread" in claims.lowest_line(clear, "error")


def test_no_difference_is_reproduced_only_within_the_stated_margin() -> None:
    same = claims.Equivalence("the same", 1.0, "pp")
    assert claims.no_difference(same, [(_stat(98.0, 0.2), _stat(97.9, 0.3))]) == claims.REPRODUCED
    wide = claims.no_difference(same, [(_stat(98.0, 0.8), _stat(98.0, 0.8))])  # equal means, spread too wide
    assert wide.startswith("no difference detected (n = 3 seeds, spread up to ±0.8 pp")
    assert claims.no_difference(same, [(_stat(98.0, 0.1), _stat(95.0, 0.1))]) == claims.NOT_REPRODUCED
    no_gain = claims.Equivalence("b does not beat a", 1.0, "pp", one_sided=True)
    assert claims.no_difference(no_gain, [(_stat(50.0, 0.1), _stat(60.0, 0.1))]) == claims.REPRODUCED  # b far lower
    assert claims.no_difference(no_gain, [(_stat(60.0, 0.1), _stat(50.0, 0.1))]) == claims.NOT_REPRODUCED
    assert claims.no_difference(no_gain, [(_stat(57.4, 9.3), _stat(55.7, 12.0))]).startswith("no difference detected")


def test_the_pdna_claims_of_no_difference_need_their_margin() -> None:
    """On the committed run (3 seeds, spreads of 0.4-12 points) neither claim of no difference is "reproduced";
    with the spreads inside the margin the clean-accuracy claim is."""
    results = _medium("gapped_sequences")
    lines = [line for line in medium.render("gapped_sequences", results).splitlines() if "- Claim" in line]
    assert all("**reproduced**" not in line for line in lines[:2])
    assert "**no difference detected (n = 3 seeds" in lines[0] and "within 1 pp" in lines[0]
    tight = copy.deepcopy(results)
    for stat in tight["results"]["metrics"].values():
        stat["gap_0"] = _stat(98.0, 0.1)
    assert "**reproduced**" in medium.render("gapped_sequences", tight).splitlines()[-3]


def test_claim_3b_order_4_best_uses_the_seed_spread() -> None:
    """Order 4 with the lowest mean but inside the others' spread is not "best"; beyond it, it is."""
    results = copy.deepcopy(_medium("poisson_order_ablation"))
    metrics = results["results"]["metrics"]
    metrics["order 4"]["rel_l1_median_pct_id"] = _stat(1.0, 10.0)
    claim = [line for line in medium.render("poisson_order_ablation", results).splitlines() if "Claim 3b" in line][0]
    assert "**not reproduced at this scale**" in claim
    for label, m in metrics.items():
        m["rel_l1_median_pct_id"] = _stat(1.0, 0.01) if label == "order 4" else _stat(5.0, 0.01)
    claim = [line for line in medium.render("poisson_order_ablation", results).splitlines() if "Claim 3b" in line][0]
    assert "**reproduced**" in claim and "lowest beyond the spread: order 4" in claim


def test_online_vs_file_bolds_no_winner_inside_the_seed_spread() -> None:
    results = _medium("online_vs_file")
    finding = online.online_vs_file(results)[-1]
    assert "neither arm's one-step error is lower beyond the seed spread" in finding and "**" not in finding
    clear = copy.deepcopy(results)
    for row in clear["rows"]:
        row["test_step_rel_l2"] = 0.10 if row["arm"] == "file" else 0.20
    assert "the **file** arm has the lower one-step error beyond the seed spread" in online.online_vs_file(clear)[-1]


def test_an_at_most_claim_is_met_only_beyond_the_spread() -> None:
    results = copy.deepcopy(_medium("darcy16_equal_time"))
    lines = medium.render("darcy16_equal_time", results).splitlines()
    assert "**not met**" in lines[-2] and "**no difference detected (n = 3 seeds, within the seed spread)**" in lines[-1]
    for seed in results["runs"].values():
        seed["chonn_fno"]["test_rel_l2"] = 0.05
    assert "**met**" in medium.render("darcy16_equal_time", results).splitlines()[-2]


def test_a_nan_statistic_gives_no_verdict() -> None:
    nan = _stat(float("nan"), 0.1)
    assert claims.compare(_stat(1.0, 0.1), nan) == claims.NOT_MEASURED
    assert claims.compare(nan, _stat(1.0, 0.1)) == claims.NOT_MEASURED
    assert claims.lowest_beyond({"a": _stat(1.0, 0.0), "b": nan}) is None
    assert "not measured" in claims.lowest_line({"a": _stat(1.0, 0.0), "b": nan}, "error")
    margin = claims.Equivalence("no difference", 1.0, "pp")
    assert claims.no_difference(margin, [(_stat(1.0, 0.1), nan)]) == claims.NOT_MEASURED
