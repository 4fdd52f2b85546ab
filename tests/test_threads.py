"""``--threads auto``, every command's default (issue 43): the environment's OMP_NUM_THREADS kept, else for train
whichever of 1 thread and the cores runs a training step faster (timed under the load of the moment), else the
cores the load leaves, said in one line; the timed step leaves the run as it would be without it."""

import argparse
import time

import pytest
import torch

import pde_data
from cli_run import ENV, ROOT
from operators import threads
from operators.training import DataSpec, ModelSpec, OptimSpec, RunSpec, load_checkpoint, train_run


def test_the_option_takes_auto_or_a_positive_count():
    assert threads.threads_value("auto") == "auto" and threads.threads_value("3") == 3
    for bad in ("0", "-2", "many"):
        with pytest.raises(argparse.ArgumentTypeError, match="expected 'auto' or a positive number of threads"):
            threads.threads_value(bad)


def _probe_faster_at(fast: int):
    def probe():
        time.sleep(0.002 if torch.get_num_threads() == fast else 0.02)
    return probe


@pytest.mark.parametrize("fast", [1, 2])
def test_auto_keeps_the_thread_count_that_runs_the_step_faster(monkeypatch, fast):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(threads, "usable_cores", lambda: 2)
    monkeypatch.setattr(threads, "idle_cores", lambda: 1)  # the load average says busy: the timed step decides
    before = torch.get_num_threads()
    try:
        line = threads.choose_threads("auto", probe=_probe_faster_at(fast))
        assert torch.get_num_threads() == fast and line.startswith(f"threads: auto chose {fast} (a step: ")
        assert "at 1 thread, " in line and "at 2 threads" in line
        # nothing to time (evaluate, predict, generate): the cores the load leaves
        assert threads.choose_threads("auto") == "threads: auto chose 1 (the idle cores; --threads N sets it)"
        assert torch.get_num_threads() == 1
        monkeypatch.setenv("OMP_NUM_THREADS", "2")  # the environment's choice wins, silently
        assert threads.choose_threads("auto", probe=_probe_faster_at(1)) is None and torch.get_num_threads() == 2
        assert threads.choose_threads(1) is None and torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_the_timed_step_leaves_the_run_as_it_was(tmp_path, monkeypatch):
    """Timing a step runs the model's forward and backward on a copy, under a forked random state: the weights
    after training equal a run told the same thread count. The run draws random numbers as it trains (random
    shifts of its images), so a step that took one from the run's stream would change them."""
    from operators.training import TaskSpec
    from test_classification import bright_quadrant_images

    data = pde_data.save(bright_quadrant_images(16), tmp_path / "images.nc")
    spec = RunSpec(data=DataSpec(str(data), split=(12, 2, 2)), task=TaskSpec(shift=2),
                   model=ModelSpec("conv_vision", {"size": "cpu", "drop_path": 0.0}),
                   optim=OptimSpec(epochs=2, batch_size=4))
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(threads, "usable_cores", lambda: 2)
    probed = []
    real = threads._median_seconds
    monkeypatch.setattr(threads, "_median_seconds", lambda probe, n: probed.append(n) or real(probe, n))
    before = torch.get_num_threads()
    try:
        train_run(spec, tmp_path / "auto", device="cpu", progress=False, threads="auto")
        chosen = torch.get_num_threads()
        train_run(spec, tmp_path / "fixed", device="cpu", progress=False, threads=chosen)
    finally:
        torch.set_num_threads(before)
    assert probed == [1, 2]
    a, b = (load_checkpoint(tmp_path / run / "last.pt")["model"] for run in ("auto", "fixed"))
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_the_command_line_says_its_auto_choice_in_one_line(tmp_path):
    import subprocess
    import sys

    data = pde_data.save(pde_data.generate_darcy(12, n_grid=8, seed=0), tmp_path / "d.nc")
    env = {k: v for k, v in ENV.items() if k != "OMP_NUM_THREADS"}
    done = subprocess.run([sys.executable, "-m", "operators.cli", "train", "--data", str(data), "--model", "fno",
                           "--epochs", "1", "--config", "width=4", "--out", str(tmp_path / "r")], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert sum(line.startswith("threads: auto chose ") for line in done.stderr.splitlines()) == 1
