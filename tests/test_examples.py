"""Smoke tests of the example scripts: each runs with ``--smoke`` (a few samples, one epoch, tiny grids)
in a subprocess and must write its results JSON and its plots; the field examples run with two training
seeds, and ``examples/results_tables.py`` must render their JSON. The shared seed statistics and the
mean-field predictor are checked against direct computations, and the committed RESULTS.md against
the committed medium results."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from cli_run import head_commit

pytestmark = pytest.mark.slow  # end-to-end: real subprocesses (CI runs them)

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"

#: script -> the plots it must write (besides results.json)
SCRIPTS = {
    "darcy.py": ["metrics.png", "gain.png", "fields_CHONN.png"],
    "poisson_order_ablation.py": ["orders.png", "fields_order1.png"],
    "nac_sequences.py": ["metrics.png"],
    "navier_stokes_rollout.py": ["rollout.png", "windows.png", "fields_CHONN.png"],
    "shallow_water.py": ["metrics.png", "gain.png", "rollout.png", "fields_CHONN.png"],
    "order_benchmark.py": ["target_T1.png", "target_T2.png", "derivative_ratio.png", "scaling.png"],
    "vision.py": ["accuracy.png"],
    "gapped_sequences.py": ["gaps.png"],
    "stable_rollouts.py": ["rollout.png"],
    "darcy_resolutions.py": [],
}


#: scripts whose medium results go into RESULTS.md through examples/results_tables.py
TABLED = {"darcy.py", "poisson_order_ablation.py", "navier_stokes_rollout.py", "shallow_water.py", "order_benchmark.py",
          "nac_sequences.py", "vision.py", "gapped_sequences.py", "darcy_resolutions.py", "stable_rollouts.py"}
#: the bar a tabled script's models must clear: chance for the classifiers, the mean predictor (the training
#: mean) for nac_sequences, else the mean-field predictor
CHANCE = {"vision.py", "gapped_sequences.py"}


def _common_module(name: str = "_common"):
    sys.path.insert(0, str(EXAMPLES))
    try:
        return __import__(name)
    finally:
        sys.path.remove(str(EXAMPLES))


def _run(script: str, *args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, str(EXAMPLES / script), *args]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_example_smoke(script: str, tmp_path: Path) -> None:
    out = tmp_path / "out"
    seeds = ["--seeds", "0", "1"] if script in TABLED else []
    proc = _run(script, "--smoke", "--threads", "1", "--out", str(out), *seeds)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads((out / "results.json").read_text())
    assert results["scale"] == "smoke"
    assert results["results"]
    head = head_commit()
    assert results["environment"]["commit"] == head and isinstance(results["environment"]["dirty"], bool)
    from operators.provenance import PACKAGES
    assert set(results["environment"]["sources"]) == set(PACKAGES)  # what --check compares with the current sources
    for name in SCRIPTS[script]:
        assert (out / name).stat().st_size > 0, f"{script} did not write {name}"
    if script in TABLED:
        assert results["results"]["seeds"] == [0, 1] and set(results["results"]["per_seed"]) == {"0", "1"}
        assert results["wall_s"] > 0
        tables = _common_module("results_tables")
        text = tables.render(script.removesuffix(".py"), results)
        bar = ("chance" if script in CHANCE else "mean predictor" if script == "nac_sequences.py"
               else "mean-field predictor")
        assert "± " in text and bar in text
        assert f"commit `{head[:10]}`" in text


def test_conditioned_sweep_smoke(tmp_path: Path) -> None:
    """examples/conditioned_sweep.py --smoke, one training seed: every model x condition x seed scored in and out
    of the training range of beta, grouped by beta; its JSON names the commit, its data are deleted, and it renders
    as RESULTS.md's section (with a verdict per model by the seed-spread rule) once the section's markers are there."""
    import copy
    import os

    out, work = tmp_path / "results" / "conditioned_sweep.json", tmp_path / "tmp"
    work.mkdir()
    proc = subprocess.run([sys.executable, str(EXAMPLES / "conditioned_sweep.py"), "--smoke", "--seeds", "0",
                           "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TMPDIR": str(work), "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not list(work.glob("conditioned_sweep.*")) and not list(tmp_path.rglob("*.nc"))  # the data are deleted
    results = json.loads(out.read_text())
    assert results["scale"] == "smoke" and results["wall_s"] > 0
    head = head_commit()
    assert results["environment"]["commit"] == head and isinstance(results["environment"]["dirty"], bool)
    from operators.provenance import PACKAGES
    assert set(results["environment"]["sources"]) == set(PACKAGES)
    rows = results["rows"]
    assert sorted((r["model"], r["conditioned"], r["seed"]) for r in rows) == sorted(
        (m, c, s) for m in ("fno", "chonn_fno") for c in (False, True) for s in (0,))
    n_test, n_far = results["settings"]["split"][2], results["settings"]["out_of_range"]["n"]
    for r in rows:
        assert 0 < r["in_range_rel_l2"] < 10 and 0 < r["out_of_range_rel_l2"] < 10 and r["train_s"] > 0
        inside, above = (r["per_parameter"][w]["groups"] for w in ("in_range", "out_of_range"))
        assert {g["where"] for g in inside} == {"inside"} and sum(g["samples"] for g in inside) == n_test
        assert {g["where"] for g in above} == {"above"} and sum(g["samples"] for g in above) == n_far
    tables = _common_module("results_tables")
    text = tables.render("conditioned_sweep", results)
    assert "± " in text and "mean-field predictor" in text and "β-blind reference" in text
    assert f"commit `{head[:10]}`" in text and "Finding (`fno`)" in text and "Finding (`chonn_fno`)" in text
    clear = copy.deepcopy(results)  # conditioned fno far below its unconditioned runs; chonn_fno within the spread
    clear["rows"] += [{**copy.deepcopy(r), "seed": 1} for r in clear["rows"]]  # a second seed: a spread to judge by
    for r in clear["rows"]:
        r["in_range_rel_l2"] = (0.1 if r["conditioned"] else 0.3) + 0.01 * r["seed"] if r["model"] == "fno" \
            else 0.2 + 0.1 * r["seed"] + 0.01 * r["conditioned"]
    findings = [line for line in tables.render("conditioned_sweep", clear).splitlines() if line.startswith("- Finding")]
    assert "lowers the in-range error: **yes**" in findings[0] and "lowers the in-range error: **no**" in findings[1]
    page = tmp_path / "RESULTS.md"
    page.write_text((ROOT / "RESULTS.md").read_text() + "\n## Conditioned on a PDE parameter (Darcy β sweep)\n\n"
                    "<!-- generated: conditioned_sweep -->\n<!-- end generated: conditioned_sweep -->\n")
    tables.main(["--results", str(out.parent), "--file", str(page)])  # 1 where the smoke's code is older: not asked
    section = page.read_text().split("<!-- generated: conditioned_sweep -->\n", 1)[1]
    assert section.split("<!-- end generated: conditioned_sweep -->")[0].endswith(text)


def test_seed_summary_is_the_mean_and_sample_std() -> None:
    common = _common_module()
    per_seed = {0: {"a": {"x": 1.0, "y": 4.0}}, 1: {"a": {"x": 2.0, "y": 4.0}}, 5: {"a": {"x": 6.0, "y": 4.0}}}
    summary = common.seed_summary(per_seed)
    assert summary["a"]["x"]["mean"] == pytest.approx(3.0)
    assert summary["a"]["x"]["std"] == pytest.approx(np.std([1.0, 2.0, 6.0], ddof=1))
    assert summary["a"]["x"]["values"] == [1.0, 2.0, 6.0] and summary["a"]["y"]["std"] == 0.0
    assert common.seed_summary({3: {"a": {"x": 2.5}}})["a"]["x"] == {"mean": 2.5, "std": 0.0, "values": [2.5]}
    assert common.summary_means(summary) == {"a": {"x": pytest.approx(3.0), "y": 4.0}}


def test_results_record_the_code_the_script_started_on(tmp_path: Path, monkeypatch) -> None:
    """A commit made while a long run goes is not the code it ran: results.json takes the commit and sources taken
    when the script started, not when it writes."""
    import argparse

    common = _common_module()
    started = common._CODE
    monkeypatch.setattr(common, "code_version", lambda: {"commit": "later", "dirty": False, "sources": {}})
    args = argparse.Namespace(scale="smoke", device="cpu", seed=0)
    written = json.loads(common.write_results(tmp_path, "probe", args, {"x": 1}).read_text())
    assert written["environment"]["commit"] == started["commit"] != "later"
    assert written["environment"]["sources"] == started["sources"]


def test_mean_field_predictor_scores_the_training_mean_field_on_the_test_split(tmp_path: Path) -> None:
    import xarray as xr

    import pde_data

    common = _common_module()
    rng = np.random.default_rng(0)
    u = rng.normal(size=(7, 3, 16))  # sample, time, s
    from pde_data.core.model import SAMPLE, TIME
    ds = xr.Dataset({"u": ((SAMPLE, TIME, "s"), u)},
                    coords={SAMPLE: np.arange(7), TIME: np.arange(3.0), "s": np.linspace(0, 1, 16, endpoint=False)})
    path = pde_data.save(ds, tmp_path / "d.nc")
    splits = common.in_order({"train": 4, "test": 3})
    got = common.mean_field_predictor(path, splits, "u", frames=2, derivative=True)
    mean, test = u[:4, 1:].mean(0), u[4:, 1:]
    expect = np.mean([np.linalg.norm(mean - t) / np.linalg.norm(t) for t in test])
    grad = lambda f: (np.roll(f, -1, -1) - np.roll(f, 1, -1)) / 2  # noqa: E731 - the periodic central difference
    expect_d = np.mean([np.linalg.norm(grad(mean - t)) / np.linalg.norm(grad(t)) for t in test])
    expect_l1 = np.median([np.abs(mean - t).sum() / np.abs(t).sum() for t in test])
    assert got["rel_l2"] == pytest.approx(expect, rel=1e-6)
    assert got["rel_l1_median"] == pytest.approx(expect_l1, rel=1e-6)
    assert got["rel_l2_derivative"] == pytest.approx(expect_d, rel=1e-6)


def test_results_md_matches_the_committed_medium_results(tmp_path: Path) -> None:
    """RESULTS.md's generated sections are what examples/results_tables.py makes of results/medium/*.json,
    and --check notices a number edited by hand."""
    tables = _common_module("results_tables")
    assert tables.main(["--check"]) == 0
    committed = sorted((ROOT / "results" / "medium").glob("*.json"))
    assert committed, "no medium results committed"
    copy = tmp_path / "RESULTS.md"
    text = (ROOT / "RESULTS.md").read_text()
    name = committed[0].stem
    begin = text.index(f"<!-- generated: {name} -->")
    digit = next(i for i in range(begin + 30, len(text)) if text[i].isdigit())
    copy.write_text(text[:digit] + str((int(text[digit]) + 1) % 10) + text[digit + 1:])
    assert tables.main(["--check", "--file", str(copy)]) == 1
    shutil.copyfile(ROOT / "RESULTS.md", copy)
    assert tables.main(["--check", "--file", str(copy)]) == 0
    copy.write_text(text + "\n| typed | by hand |\n|---|---|\n| 1 | 2 |\n")  # a table outside the generated sections
    assert tables.main(["--check", "--file", str(copy)]) == 1
    bench = text.split("<!-- generated: bench -->\n", 1)[1].split("<!-- end generated: bench -->")[0]
    assert "\n`OMP_NUM_THREADS=1 python -m bench`" in bench  # the benchmark tables come from results/bench.json


def test_example_options_reject_bad_values(capsys) -> None:
    """The shared parser (every example uses it) names the bad value; checked in-process, no subprocess."""
    sys.path.insert(0, str(EXAMPLES))
    try:
        import _common
    finally:
        sys.path.remove(str(EXAMPLES))
    parser = _common.parser("test")
    for bad in (["--epochs", "0"], ["--threads", "x"], ["--quick", "--smoke"]):
        with pytest.raises(SystemExit) as exc:
            parser.parse_args(bad)
        assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "expected a positive integer, found 0" in err and "found 'x'" in err and "not allowed with" in err


def test_an_example_runs_again_into_its_own_folder(tmp_path: Path) -> None:
    """A second run of an example replaces its earlier runs (only the files a run writes) instead of
    being refused by the run folders it left."""
    out = tmp_path / "out"
    for _ in range(2):
        proc = _run("darcy.py", "--smoke", "--threads", "1", "--out", str(out))
        assert proc.returncode == 0, proc.stderr[-3000:]
