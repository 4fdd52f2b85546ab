"""Training options: the relative H1 loss (``--loss h1``), the linear warm-up (``--warmup``), the ``plateau``
schedule and early stopping (``--patience``). The metric against exact derivatives; the schedules epoch by
epoch; every option resumed bit-exactly (one go equals two halves); and the command lines a user types."""

import json
import math

import numpy as np
import pytest
import torch

import pde_data
from cli_run import run_cli
from evaluation import rel_h1
from evaluation._grid import spectral_gradient
from operators.cli import main
from operators.training import (DataSpec, Loader, ModelSpec, OptimSpec, RunSpec, SpecError, TaskSpec, Trainer,
                                load_checkpoint, make_task, resolve)
from operators.training.optim import EpochSchedule
from operators.training.spec import conflicts, resumed
from test_rollout import travelling_waves
from test_trainer import poisson_dataset, write_poisson

TINY = ["--config", "n_modes=4", "width=8", "n_layers=2", "--threads", "1", "--no-progress"]
TIMING = ("samples_per_s", "epoch_s")


# -- the relative H1 error -----------------------------------------------------------------------
def _periodic(n: int) -> torch.Tensor:
    return torch.arange(n, dtype=torch.float64) / n


def test_rel_h1_of_a_field_with_itself_is_zero_with_a_finite_gradient():
    true = torch.randn(3, 2, 12, 10, dtype=torch.float64)
    for periodic in (True, False):
        pred = true.clone().requires_grad_()
        loss = rel_h1(pred, true, periodic=periodic, reduce="none")
        assert torch.equal(loss, torch.zeros(3, dtype=torch.float64))
        loss.sum().backward()
        assert torch.isfinite(pred.grad).all()


def test_the_spectral_gradient_of_sines_is_exact():
    x = _periodic(32)
    u = torch.sin(2 * math.pi * 3 * x)[:, None] * torch.cos(2 * math.pi * 5 * x)[None, :]
    grad = spectral_gradient(u[None, None], 2)[0, :, 0]
    dx = 2 * math.pi * 3 * torch.cos(2 * math.pi * 3 * x)[:, None] * torch.cos(2 * math.pi * 5 * x)[None, :]
    dy = -2 * math.pi * 5 * torch.sin(2 * math.pi * 3 * x)[:, None] * torch.sin(2 * math.pi * 5 * x)[None, :]
    torch.testing.assert_close(grad, torch.stack([dx, dy]), rtol=0, atol=1e-11)


def test_periodic_rel_h1_of_sines_is_the_h1_norm_ratio():
    """Error ``ε sin(2πmx)`` on ``sin(2πkx)``: the modes are orthogonal on the grid, so the ratio is
    ``ε ((1 + (2πm)²) / (1 + (2πk)²))^½``; with the seminorm or index units it would be another number."""
    x, eps, k, m = _periodic(64), 0.1, 3, 7
    true = torch.sin(2 * math.pi * k * x)[None, None]
    pred = true + eps * torch.sin(2 * math.pi * m * x)[None, None]
    expected = eps * math.sqrt((1 + (2 * math.pi * m) ** 2) / (1 + (2 * math.pi * k) ** 2))
    assert rel_h1(pred, true, periodic=True) == pytest.approx(expected, rel=1e-12)


def _exact_ratio(e, de, u, du) -> float:
    """``(Σ e² + |∇e|²)^½ / (Σ u² + |∇u|²)^½`` with the exact gradients, on the same grid."""
    return math.sqrt(sum(np.sum(a**2) for a in (e, *de)) / sum(np.sum(a**2) for a in (u, *du)))


def test_finite_differences_are_exact_for_quadratics_on_the_unit_square():
    x, y = np.meshgrid(np.linspace(0, 1, 9), np.linspace(0, 1, 13), indexing="ij")
    u, du = 1 + x**2 - x * y, (2 * x - y, -x)
    e, de = 0.1 * (3 * y**2 + x), (0.1 * np.ones_like(x), 0.6 * y)
    found = rel_h1(torch.from_numpy(u + e)[None, None], torch.from_numpy(u)[None, None])
    assert float(found) == pytest.approx(_exact_ratio(e, de, u, du), rel=1e-12)


def test_finite_differences_converge_at_second_order():
    """Against the exact gradients on the same non-periodic grid: the log-log slope of the error is 2."""
    sizes, errors = [16, 32, 64, 128], []
    for n in sizes:
        x = np.linspace(0, 1, n)
        u, du = np.exp(x) * np.sin(3 * x), np.exp(x) * (np.sin(3 * x) + 3 * np.cos(3 * x))
        e, de = 0.2 * np.cos(5 * x), -np.sin(5 * x)
        found = float(rel_h1(torch.from_numpy(u + e)[None, None], torch.from_numpy(u)[None, None]))
        errors.append(abs(found - _exact_ratio(e, (de,), u, (du,))))
    slope = np.polyfit(np.log(sizes), np.log(errors), 1)[0]
    assert -2.3 < slope < -1.8, errors


def test_rel_h1_takes_a_window_layout_with_n_spatial():
    pred, true = torch.randn(2, 3, 2, 16, 8), torch.randn(2, 3, 2, 16, 8)
    windowed = rel_h1(pred, true, periodic=True, n_spatial=2, reduce="none")
    flat = rel_h1(pred.flatten(1, 2), true.flatten(1, 2), periodic=True, reduce="none")
    torch.testing.assert_close(windowed, flat)
    with pytest.raises(ValueError, match=r"expected \(batch, channels, \*spatial\).*found shape \(2, 16\)"):
        rel_h1(torch.ones(2, 16), torch.ones(2, 16))


# -- the schedules ---------------------------------------------------------------------------------
def _rates(config: OptimSpec, scores) -> list[float]:
    """The learning rate of each epoch when epoch ``e`` ends with ``scores[e]``."""
    optimizer = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=config.lr)
    schedule, rates = EpochSchedule(optimizer, config), []
    for score in scores:
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        schedule.step(score)
    return rates


def test_warm_up_rises_linearly_then_hands_the_step_schedule_exactly_the_lr():
    config = OptimSpec(lr=0.8, warmup=3, scheduler="step", step_size=2, gamma=0.5)
    rates = _rates(config, [1.0] * 8)
    assert rates == pytest.approx([0.2, 0.4, 0.6, 0.8, 0.8, 0.4, 0.4, 0.2], rel=1e-15)
    assert rates[3] == 0.8  # exactly lr: the schedule after the warm-up starts from it
    assert _rates(OptimSpec(lr=0.8, scheduler="none"), [1.0] * 3) == [0.8] * 3


def test_plateau_decays_by_gamma_after_its_patience_counting_from_the_end_of_the_warm_up():
    config = OptimSpec(lr=1.0, warmup=1, scheduler="plateau", gamma=0.5, plateau_patience=1)
    # the warm-up epoch's low score does not count: else epochs 2 and 3 would be bad ones already
    assert _rates(config, [1.0, 5.0, 5.0, 5.0, 4.0, 4.0]) == [0.5, 1.0, 1.0, 1.0, 0.5, 0.5]


def test_option_values_and_combinations_are_checked():
    cases = [({"optim.scheduler": "plateau", "optim.gamma": 1.0}, "optim.gamma: expected a factor in (0, 1)"),
             ({"optim.warmup": -1}, "optim.warmup: expected a number of epochs >= 0"),
             ({"optim.patience": 0}, "optim.patience: expected a positive number of epochs"),
             ({"optim.scheduler": "linear"}, "optim.scheduler: expected one of")]
    for values, message in cases:
        with pytest.raises(SpecError, match=message.replace("(", r"\(").replace(")", r"\)")):
            RunSpec().override(values)


def test_a_resumed_run_may_change_its_patience_but_not_its_warm_up_or_plateau():
    stored = RunSpec(optim=OptimSpec(warmup=2, scheduler="plateau", patience=3))
    given = stored.override({"optim.patience": None, "optim.epochs": 20})
    assert conflicts(stored, given) == []
    assert resumed(stored, given).optim == given.optim
    changed = given.override({"optim.warmup": 1, "optim.plateau_patience": 4})
    assert conflicts(stored, changed) == [("optim.warmup", 2, 1), ("optim.plateau_patience", 10, 4)]


# -- one go equals two halves ------------------------------------------------------------------------
def _trainer(out, epochs: int, *, scores: dict | None = None, **optim) -> Trainer:
    """A Trainer over in-memory Poisson data; ``scores`` (epoch → score) stand in for the task's."""
    ds = poisson_dataset(n_samples=12)
    spec = RunSpec(data=DataSpec("in-memory", inputs=("f",), targets=("u",), split=(8, 4, 0)),
                   model=ModelSpec("fno", {"n_modes": 4, "width": 8, "n_layers": 2}),
                   optim=OptimSpec(epochs=epochs, batch_size=4, **optim))
    task = make_task(resolve(spec, ds))
    if scores is not None:
        task.score = lambda record: scores[record["epoch"]]
    torch.manual_seed(0)
    model = task.spec.model.build()
    train, val = (Loader(task.dataset(ds, idx, cache=False), batch_size=4, seed=0, shuffle=shuffle)
                  for idx, shuffle in ((task.spec.data.splits.train, True), (task.spec.data.splits.val, False)))
    return Trainer(model, task, train, val, out, progress=False)


def _whole_and_halves(tmp_path, epochs: int, cut: int, **options) -> tuple[dict, dict]:
    """``last.pt`` of a run trained ``epochs`` in one go, and of one cut after ``cut`` epochs and resumed."""
    _trainer(tmp_path / "whole", epochs, **options).fit()
    _trainer(tmp_path / "cut", cut, **options).fit()
    resumed_trainer = _trainer(tmp_path / "cut", epochs, **options)
    resumed_trainer.load(load_checkpoint(tmp_path / "cut" / "last.pt"))
    resumed_trainer.fit()
    return load_checkpoint(tmp_path / "whole" / "last.pt"), load_checkpoint(tmp_path / "cut" / "last.pt")


def _assert_identical(a: dict, b: dict) -> None:
    assert a["epoch"] == b["epoch"] and a["best_epoch"] == b["best_epoch"]
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])
    assert all(torch.equal(a["optimizer"]["state"][i][k], b["optimizer"]["state"][i][k])
               for i in a["optimizer"]["state"] for k in a["optimizer"]["state"][i])
    assert a["scheduler"] == b["scheduler"]
    drop = lambda history: [{k: v for k, v in r.items() if k not in TIMING} for r in history]  # noqa: E731
    assert drop(a["history"]) == drop(b["history"])


def test_warm_up_resumed_mid_warm_up_is_bit_exact(tmp_path):
    whole, halves = _whole_and_halves(tmp_path, 4, 2, lr=0.004, warmup=3, scheduler="step", step_size=1)
    _assert_identical(whole, halves)
    assert [r["lr"] for r in whole["history"]] == pytest.approx([0.001, 0.002, 0.003, 0.004])


def test_plateau_resumed_is_bit_exact_and_keeps_its_count(tmp_path):
    """The scores stall at epochs 3 and 4: a plateau resumed after epoch 3 without its state would see
    epoch 4 as an improvement on a fresh ``inf`` and keep the rate."""
    scores = {1: 9.0, 2: 4.0, 3: 4.0, 4: 4.0, 5: 3.0}
    whole, halves = _whole_and_halves(tmp_path, 5, 3, scores=scores, lr=0.004, warmup=1, scheduler="plateau",
                                      gamma=0.5, plateau_patience=0)
    _assert_identical(whole, halves)
    assert [r["lr"] for r in whole["history"]] == pytest.approx([0.002, 0.004, 0.004, 0.002, 0.001])


def test_patience_stops_resumed_runs_at_the_same_epoch_and_they_stay_stopped(tmp_path, capsys):
    scores = {1: 3.0, 2: 2.0, 3: 2.5, 4: 2.0, 5: 1.0, 6: 1.0}
    whole, halves = _whole_and_halves(tmp_path, 6, 3, scores=scores, patience=2)
    _assert_identical(whole, halves)
    assert [r["epoch"] for r in whole["history"]] == [1, 2, 3, 4] and whole["best_epoch"] == 2
    assert [r.get("stopped_early") for r in whole["history"]] == [None, None, None, True]
    assert "stopping early after epoch 4: the score that picks best.pt has not improved for 2 epochs" in \
        capsys.readouterr().err
    again = _trainer(tmp_path / "whole", 8, scores=scores, patience=2)
    again.load(whole)
    assert len(again.fit()) == 4 and "not training on after epoch 4" in capsys.readouterr().err
    longer = _trainer(tmp_path / "whole", 6, scores=scores, patience=None)  # a resume may drop the patience
    longer.load(whole)
    assert [r["epoch"] for r in longer.fit()] == [1, 2, 3, 4, 5, 6]


# -- the command line --------------------------------------------------------------------------------
def test_cli_h1_loss_with_warm_up_and_plateau(tmp_path):
    data = write_poisson(tmp_path / "p.nc", n_samples=20)
    out = tmp_path / "run"
    args = ["train", "--data", data, "--model", "fno", "--out", out, "--input", "f", "--target", "u", "--split",
            "16,4,0", "--batch-size", "8", *TINY]
    done = run_cli(*args, "--epochs", "3", "--lr", "0.002", "--loss", "h1", "--warmup", "1", "--scheduler",
                   "plateau", "--gamma", "0.5", "--plateau-patience", "0")
    assert done.returncode == 0, done.stderr
    run = json.loads((out / "run.json").read_text())
    assert run["task"]["loss"] == "h1" and not run["task"]["periodic"]
    assert (run["optim"]["warmup"], run["optim"]["scheduler"], run["optim"]["plateau_patience"]) == (1, "plateau", 0)
    history = json.loads((out / "history.json").read_text())
    assert [r["lr"] for r in history[:2]] == [0.001, 0.002] and all(math.isfinite(r["train_loss"]) for r in history)
    refused = run_cli(*args, "--resume", "--epochs", "4", "--warmup", "2")
    assert refused.returncode == 1
    assert f"--warmup: resuming {out} keeps the stored value 1; found 2" in refused.stderr.strip()


def test_cli_h1_loss_on_a_periodic_window_run(tmp_path, capsys):
    pde_data.save(travelling_waves(n_samples=6, n_time=5), tmp_path / "waves.nc")
    out = tmp_path / "waves"
    assert main(["train", "--data", str(tmp_path / "waves.nc"), "--model", "fno", "--out", str(out), "--window", "2",
                 "--horizon", "2", "--loss", "h1", "--periodic", "--epochs", "1", "--batch-size", "2", "--split",
                 "4,2,0", *TINY]) == 0, capsys.readouterr().err
    stored = json.loads((out / "run.json").read_text())
    assert stored["task"]["periodic"] is True and "padding" not in stored["model"]["derived"]  # a periodic grid: none


def test_cli_patience_stops_early_and_a_resumed_run_stays_stopped(tmp_path):
    """At an lr of 1e-30 no float32 weight moves, so the score never improves after epoch 1."""
    data = write_poisson(tmp_path / "p.nc", n_samples=12)
    out = tmp_path / "run"
    args = ["train", "--data", data, "--model", "fno", "--out", out, "--input", "f", "--target", "u", "--split",
            "8,4,0", "--batch-size", "4", *TINY]
    done = run_cli(*args, "--epochs", "4", "--lr", "1e-30", "--weight-decay", "0", "--patience", "1")
    assert done.returncode == 0, done.stderr
    assert "stopping early after epoch 2" in done.stderr and "optim.patience 1" in done.stderr
    history = json.loads((out / "history.json").read_text())
    assert len(history) == 2 and history[-1]["stopped_early"] is True
    again = run_cli(*args, "--resume", "--epochs", "6")
    assert again.returncode == 0 and "not training on after epoch 2" in again.stderr, again.stderr
    assert len(json.loads((out / "history.json").read_text())) == 2
    more = run_cli(*args, "--resume", "--epochs", "3", "--patience", "5")
    assert more.returncode == 0 and "resuming after epoch 2 of 3" in more.stderr, more.stderr
    assert len(json.loads((out / "history.json").read_text())) == 3


def test_periodic_is_refused_outside_field_runs(tmp_path, capsys):
    seq = pde_data.save(pde_data.generate_degradation(12, min_length=4, max_length=8, seed=0), tmp_path / "seq.nc")
    assert main(["train", "--data", str(seq), "--model", "cfc", "--target", "rul", "--periodic", "--out",
                 str(tmp_path / "run")]) == 1
    assert ("--periodic: expected only in field runs (a grid that wraps around), found it in a sequence run"
            in capsys.readouterr().err)
    assert not (tmp_path / "run").exists()
