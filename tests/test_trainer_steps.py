"""The trainer's step: gradient norms through real views, and checks of losses read from the device every
``CHECK_EVERY`` steps (naming the step that failed, changing nothing in what is trained)."""

import numpy as np
import pytest
import torch

import operators
from operators.training import (DataSpec, Loader, ModelSpec, OptimSpec, RunSpec, Trainer, make_task, resolve,
                                trainer as trainer_module)
from operators.training.loader import global_batches
from operators.training.optim import clip_gradients
from operators.training.trainer import NonFiniteLossError
from test_trainer import poisson_dataset


def _fno_with_gradients() -> list[torch.nn.Parameter]:
    """A tiny FNO's parameters (complex spectral weights among them) with seeded random gradients."""
    torch.manual_seed(0)
    params = list(operators.build("fno", 1, 1, n_modes=4, width=8, n_layers=2).parameters())
    for p in params:
        p.grad = torch.randn_like(p)
    assert any(p.is_complex() for p in params)
    return params


@pytest.mark.parametrize("max_norm", [None, 1.0])
@pytest.mark.parametrize("complex_only", [False, True])
def test_clip_gradients_matches_torch_on_complex_parameters(max_norm, complex_only):
    """Norm and clipped gradients as ``torch.nn.utils.clip_grad_norm_`` gives them (no clipping: ``inf``), of
    all parameters and of the spectral weights alone (whose imaginary parts count in the norm)."""
    ours, reference = ([p for p in params if p.is_complex() or not complex_only]
                       for params in (_fno_with_gradients(), _fno_with_gradients()))
    norm = clip_gradients(ours, max_norm)
    expected = torch.nn.utils.clip_grad_norm_(reference, float("inf") if max_norm is None else max_norm)
    torch.testing.assert_close(norm, expected, rtol=1e-5, atol=0)
    assert max_norm is None or float(norm) > 10 * max_norm  # the case clips
    for p, q in zip(ours, reference):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-12)


def _trainer(tmp_path, ds, epochs=2) -> Trainer:
    """A Trainer over in-memory data (16 training samples, batches of 4: 4 steps an epoch)."""
    spec = RunSpec(data=DataSpec("in-memory", inputs=("f",), targets=("u",), split=(16, 8, 0)),
                   model=ModelSpec("fno", {"n_modes": 4, "width": 8, "n_layers": 2}),
                   optim=OptimSpec(epochs=epochs, batch_size=4, seed=0))
    task = make_task(resolve(spec, ds))
    torch.manual_seed(0)
    model = operators.build("fno", 1, 1, n_modes=4, width=8, n_layers=2)
    train, val = (Loader(task.dataset(ds, idx, cache=False), batch_size=4, seed=0, shuffle=shuffle)
                  for idx, shuffle in ((task.spec.data.splits.train, True), (task.spec.data.splits.val, False)))
    return Trainer(model, task, train, val, tmp_path, progress=False)


def test_checks_every_step_or_every_twenty_train_the_same(tmp_path, monkeypatch):
    """Reading the losses at every step or once an epoch: the same weights and the same history."""
    ds = poisson_dataset(n_samples=24)
    runs = []
    for every in (1, trainer_module.CHECK_EVERY):
        monkeypatch.setattr(trainer_module, "CHECK_EVERY", every)
        trainer = _trainer(tmp_path / str(every), ds)
        history = trainer.fit()
        runs.append((trainer.state_dict()["model"], [(r["train_loss"], r["val_rel_l2"]) for r in history]))
    (weights, history), (weights_deferred, history_deferred) = runs
    assert history == history_deferred and all(torch.equal(weights[k], weights_deferred[k]) for k in weights)
    assert np.isfinite(history).all()


def test_a_nan_is_reported_at_its_step_when_read_later(tmp_path):
    """A NaN in the sample of the third batch stops the run naming epoch 1, step 3, though the epoch's four
    steps are read only at its end (``CHECK_EVERY`` > 4); nothing is written."""
    assert trainer_module.CHECK_EVERY > 4
    ds = poisson_dataset(n_samples=24)
    trainer = _trainer(tmp_path, ds)
    third = global_batches(16, 4, seed=0, epoch=0, shuffle=True)[2]
    sample = trainer.task.spec.data.splits.train[int(third[0])]
    ds["f"][sample, 5, 5] = np.nan
    with pytest.raises(NonFiniteLossError, match=r"non-finite loss \(nan\) at epoch 1, step 3; no checkpoint"):
        _trainer(tmp_path, ds).fit()
    assert not (tmp_path / "last.pt").exists()
