"""The benchmark entry point runs modules, prints one table and writes JSON (not a timed test)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_run import head_commit

ROOT = Path(__file__).resolve().parents[1]


def test_bench_entry_point_runs_selected_modules(tmp_path):
    """Progress on stderr as each benchmark starts and ends; rows labelled with their thread count; no
    profiler log lines (bench_scan measures memory with torch's profiler)."""
    out = tmp_path / "rows.json"
    result = subprocess.run([sys.executable, "-m", "bench", "--quick", "--only", "bench_metrics", "bench_scan",
                             "--json", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=300,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stderr[-2000:]
    written = json.loads(out.read_text())
    assert written["command"] == "python -m bench --quick --only bench_metrics bench_scan" and written["scale"] == "quick"
    head = head_commit()
    assert written["environment"]["commit"] == head and isinstance(written["busy"], list)
    rows = written["rows"]
    assert {r["benchmark"] for r in rows} >= {"metrics", "bench_metrics", "bench_scan"}
    assert all(r["value"] > 0 for r in rows)
    assert "circuitop benchmarks (quick)" in result.stdout
    progress = [line for line in result.stderr.splitlines() if line.startswith("bench: [")]
    assert [line.split(" in ")[0] for line in progress] == [
        "bench: [1/2] bench_metrics ...", "bench: [1/2] bench_metrics done",
        "bench: [2/2] bench_scan ...", "bench: [2/2] bench_scan done"]
    assert float(progress[1].split(" in ")[1].removesuffix(" s")) > 0
    assert "USDT" not in result.stdout + result.stderr and "profiler_start" not in result.stdout + result.stderr
    timed = [r for r in rows if r["case"] != "script wall time"]
    assert all(r["threads"] == 1 for r in timed)  # OMP_NUM_THREADS=1: torch ran them on one thread
    assert "pdebench_metrics torch float32 20x40x64x64, 1 thread " in result.stdout


def test_a_busy_machine_is_flagged(monkeypatch):
    """A load average above the core count gives one warning line (printed at the start and under the table);
    a row's label says how many threads it ran on."""
    from bench._util import Row, busy_warning

    assert busy_warning(load=1.5, cores=2) is None
    warning = busy_warning(load=3.2, cores=2)
    assert warning.startswith("warning: the machine is busy (load average 3.20") and "unreliable" in warning
    monkeypatch.setattr(os, "getloadavg", lambda: (64.0, 1.0, 1.0))
    assert busy_warning() is not None
    assert Row("ns", "step", 1.0, "s", threads=2).label == "ns | step, 2 threads"
    assert Row("ns", "step", 1.0, "s").label == "ns | step"


def test_busy_warning_in_the_table(monkeypatch, capsys):
    import bench.__main__ as entry

    monkeypatch.setattr(os, "getloadavg", lambda: (64.0, 1.0, 1.0))
    assert entry.main(["--quick", "--only", "bench_darcy"]) == 0
    out, err = capsys.readouterr()
    assert "busy machine" in out.splitlines()[1] and out.count("warning: the machine is busy") == 2
    assert "warning: the machine is busy" in err.splitlines()[0]
    assert "darcy | direct FV solve 128^2 (splu), 1 thread " in out


def test_bench_entry_point_refuses_unknown_names():
    result = subprocess.run([sys.executable, "-m", "bench", "--only", "bench_nope"], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode != 0 and "unknown benchmarks ['bench_nope']" in result.stderr


def test_gpu_check_covers_every_model_against_float64_references(capsys, monkeypatch):
    """bench/gpu_check.py is ready for the first GPU: it covers every registered model, and compares float32
    work with float64 references, so on the CPU its checks measure real differences (the native float32
    kernels against torch's float64 formulations), pass, and catch a float32 path that is wrong by 1e-3.
    Without CUDA, ``--device cuda`` says so in one line and exits 1."""
    import torch

    import operators
    from bench import gpu_check

    assert set(gpu_check.MODELS) == set(operators.MODELS)
    assert gpu_check.main(["--device", "cpu"]) == 0
    assert "checks passed" in capsys.readouterr().out
    checks = gpu_check._model_checks("chonn_fno", *gpu_check.MODELS["chonn_fno"], "cpu")
    assert all(0 < c.difference <= c.tolerance for c in checks)  # not a copy compared with itself

    class Float32Bug(torch.nn.Module):  # right in float64, 0.1 % off in float32
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.ones(2, 3, 1, 1))

        def forward(self, x):
            y = (self.w * x.sum(1, keepdim=True)).sum(1, keepdim=True).expand(-1, 2, -1, -1)
            return y * (1.001 if y.dtype == torch.float32 else 1.0)

    monkeypatch.setattr(gpu_check.operators, "build", lambda *args, **kwargs: Float32Bug())
    failed = [c.name for c in gpu_check._model_checks("fno", {}, 2, "cpu") if not c.passed]
    assert "fno: forward" in failed  # (and the loss and gradients it feeds)
    import torch

    if not torch.cuda.is_available():
        assert gpu_check.main(["--device", "cuda"]) == 1
        assert "expected a CUDA device, found none" in capsys.readouterr().err


@pytest.mark.slow
def test_circuitop_bench_models_writes_the_model_table(tmp_path):
    """``circuitop bench models --json F`` runs bench/bench_models.py: every measure of one model, eager and
    compiled, with the environment ``python -m bench --json`` writes; examples/_model_tables.py renders it."""
    from cli_run import run_cli

    out = tmp_path / "models.json"
    result = run_cli("bench", "models", "--quick", "--only", "fno", "--json", out, timeout=400)
    assert result.returncode == 0, result.stderr[-2000:]
    written = json.loads(out.read_text())
    assert written["command"] == "python -m bench.bench_models --quick --only fno" and written["scale"] == "quick"
    assert {"commit", "dirty", "torch", "cores"} <= set(written["environment"])
    rows = {r["case"]: r for r in written["rows"]}
    for measure in ("parameters", "fwd eager", "fwd+bwd eager", "peak MB eager", "compile s", "fwd compiled",
                    "fwd+bwd compiled", "peak MB compiled", "speed-up fwd+bwd (eager / compiled)"):
        assert rows[f"fno: {measure}"]["value"] > 0 and rows[f"fno: {measure}"]["threads"] == 1, measure
    import operators

    model = operators.build("fno", 3, 1, n_modes=4, width=8, n_layers=2)
    assert rows["fno: parameters"]["value"] == sum(p.numel() for p in model.parameters())
    assert "fno: CKB share" not in rows  # no Kirchhoff blocks
    speed_up = rows["fno: speed-up fwd+bwd (eager / compiled)"]["value"]
    assert speed_up == pytest.approx(rows["fno: fwd+bwd eager"]["value"] / rows["fno: fwd+bwd compiled"]["value"])
    lines = _model_tables().models(written)
    assert lines[0].startswith("`OMP_NUM_THREADS=1 python -m bench.bench_models --quick --only fno`")
    assert [line for line in lines if line.startswith("| `fno` |")][0].count("|") == 8


def _model_tables():
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        import _model_tables
    finally:
        sys.path.remove(str(ROOT / "examples"))
    return _model_tables


def test_the_model_table_names_the_winner_of_each_training_step():
    """A side wins the training step when it is more than 10 % faster; a model whose compile was stopped keeps
    its eager numbers and says why; the CKB share only for models with Kirchhoff blocks."""
    def rows(model, speed_up=None, share=None, stopped=None):
        found = [{"benchmark": "models", "case": f"{model}: parameters", "value": 1234.0, "unit": "",
                  "detail": "8x3x64^2, config {}"},
                 {"benchmark": "models", "case": f"{model}: fwd+bwd eager", "value": 10.0, "unit": "ms", "detail": ""}]
        if speed_up is not None:
            found += [{"benchmark": "models", "case": f"{model}: speed-up fwd+bwd (eager / compiled)", "value": speed_up},
                      {"benchmark": "models", "case": f"{model}: compile s", "value": 42.0},
                      {"benchmark": "models", "case": f"{model}: fwd+bwd compiled", "value": 10.0 / speed_up}]
        if share is not None:
            found.append({"benchmark": "models", "case": f"{model}: CKB share", "value": share})
        if stopped:
            found.append({"benchmark": "models", "case": f"{model}: not finished", "value": float("nan"),
                          "detail": stopped})
        return found

    results = {"command": "python -m bench.bench_models", "scale": "full", "busy": [],
               "environment": {"omp_num_threads": "1", "cores": 2, "torch": "2", "commit": None},
               "rows": rows("a", 1.5, share=0.25) + rows("b", 0.5) + rows("c", 1.05) + rows("d", stopped="stopped after 9 s")}
    table = {line.split(" | ")[0].removeprefix("| "): line.split(" | ") for line in _model_tables().models(results)
             if line.startswith("| `")}
    assert table["`a`"][5] == "compiled 1.5× (compile 42 s)" and table["`a`"][6] == "25 % |"
    assert table["`b`"][5] == "eager 2×" and table["`b`"][6] == "— |" and table["`b`"][1] == "1.23 k"
    assert table["`c`"][5] == "even (1.05×)" and table["`c`"][4] == "10 / 9.52"
    assert table["`d`"][5] == "not compiled (stopped after 9 s)" and table["`d`"][4] == "10 / —"
    assert _model_tables().models(results)[-1] == "torch.compile speeds up the training step of: `a`."


def test_kirchhoff_share_and_compile_budget(monkeypatch):
    """The CKB share is a fraction, large for the one-block chain and absent without blocks; a model's process
    that outlasts the budget is stopped, and its table row says so."""
    import torch

    from bench import bench_models

    case = bench_models.cases(quick=True)["ckb_chain"]
    model = bench_models._build("ckb_chain", case)
    share = bench_models.ckb_share(model, bench_models._step(model, case.inputs()))
    assert 0.3 < share < 1.0
    assert [type(b).__name__ for b in bench_models._blocks(model)] == ["CascadedKirchhoffBlock1d"]
    plain = bench_models._build("fno", bench_models.cases(quick=True)["fno"])
    assert bench_models.ckb_share(plain, lambda: None) != bench_models.ckb_share(plain, lambda: None)  # NaN
    assert not any(p.grad is None for p in model.parameters()) and torch.is_grad_enabled()
    monkeypatch.setitem(bench_models.BUDGET_S, True, 1.0)
    rows = bench_models._run_model("fno", quick=True, device="cpu", compile=True)
    assert rows[-1].case == "fno: not finished" and rows[-1].detail == "stopped after 1 s"


def test_gpu_session_failures_are_written_as_they_happen(tmp_path):
    """The plugin of bench/gpu_session.sh writes each failure's traceback once (under xdist: by the controller),
    before pytest's own summary."""
    (tmp_path / "test_two.py").write_text("def test_passes():\n    pass\n\n\ndef test_fails():\n"
                                          "    assert 1 == 2, 'the reason'\n")
    failures = tmp_path / "failures.txt"
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "2", "-p", "no:cacheprovider", "-p",
                           "bench.pytest_failures", "-o", "addopts=", str(tmp_path / "test_two.py")], cwd=ROOT,
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "CIRCUITOP_FAILURES": str(failures), "PYTHONPATH": str(ROOT)})
    assert done.returncode == 1, done.stdout[-2000:]
    text = failures.read_text()
    (header,) = [line for line in text.splitlines() if line.startswith("== ")]  # the node id: relative to a rootdir
    assert header.endswith("test_two.py::test_fails (call)")
    assert "the reason" in text


def test_gpu_session_refuses_a_short_commit(tmp_path):
    done = subprocess.run(["bash", str(ROOT / "bench" / "gpu_session.sh"), str(tmp_path / "out")], cwd=ROOT,
                          capture_output=True, text=True, timeout=30, env={**os.environ, "CIRCUITOP_COMMIT": "9d3f663"})
    assert done.returncode == 2 and "expected the full 40-character commit, found '9d3f663'" in done.stderr
    assert not (tmp_path / "out").exists()
