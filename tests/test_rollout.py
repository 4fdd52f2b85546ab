"""Autoregressive rollouts: exactness on a shift operator, batch vectorization, pushforward gradients,
and windowed (m → 1, unrolled) training + rollout evaluation on a travelling wave."""

import numpy as np
import pytest
import torch
import xarray as xr

import pde_data
from operators.rollout import rollout, step
from operators.training import DataSpec, ModelSpec, OptimSpec, RunSpec, TaskSpec, train_run
from operators.training.evaluate import evaluate_run


def travelling_waves(n_samples=12, n_time=12, size=16, seed=0) -> xr.Dataset:
    """u(t, x, y) = Σ_k a_k sin(2π(k_x x + k_y (y − t/size)) + φ_k): shifts one cell in y per frame."""
    rng = np.random.default_rng(seed)
    grid = np.arange(size) / size
    t = np.arange(n_time)
    x, y = np.meshgrid(grid, grid, indexing="ij")
    u = np.zeros((n_samples, n_time, size, size))
    for s in range(n_samples):
        for kx, ky in [(1, 1), (0, 2), (2, 1)]:
            a, phase = rng.uniform(0.5, 1.0), rng.uniform(0, 2 * np.pi)
            u[s] += a * np.sin(2 * np.pi * (kx * x[None] + ky * (y[None] - t[:, None, None] / size)) + phase)
    dims = ("sample", "time", "x", "y")
    return xr.Dataset({"u": (dims, u.astype("f4"))}, coords={"time": t.astype(float), "x": grid, "y": grid})


class _Shift(torch.nn.Module):
    """Exact one-step operator of :func:`travelling_waves`: the last frame shifted one cell along y."""

    def __init__(self, channels):
        super().__init__()
        self.channels = channels
        self.scale = torch.nn.Parameter(torch.ones(()))

    def forward(self, x):
        return self.scale * torch.roll(x[:, -self.channels:], shifts=1, dims=-1)


def test_rollout_of_the_exact_operator_reproduces_the_data():
    frames = pde_data.to_tensor(travelling_waves(n_samples=3))  # (3, 12, 1, 16, 16)
    pred = rollout(_Shift(1), frames[:, :3], 9)
    assert pred.shape == (3, 9, 1, 16, 16)
    torch.testing.assert_close(pred, frames[:, 3:], atol=1e-5, rtol=0)


def test_rollout_is_vectorized_over_the_batch():
    torch.manual_seed(0)
    model = torch.nn.Conv2d(2 * 2, 2, 3, padding=1)
    frames = torch.randn(4, 2, 2, 8, 8)
    together = rollout(model, frames, 5)
    alone = torch.cat([rollout(model, frames[i:i + 1], 5) for i in range(4)])
    torch.testing.assert_close(together, alone)


def test_pushforward_backpropagates_the_last_step_only():
    model = _Shift(1)
    frames = torch.randn(2, 2, 1, 8, 8)
    rollout(model, frames, 3, pushforward=True)[:, :-1].sum().backward()
    assert model.scale.grad is None or model.scale.grad == 0
    rollout(model, frames, 3, pushforward=True)[:, -1].sum().backward()
    assert model.scale.grad != 0


def test_step_checks_the_model_channels():
    with pytest.raises(ValueError, match="in_channels = window·channels"):
        step(torch.nn.Conv2d(4, 3, 1), torch.zeros(1, 2, 2, 8, 8))
    with pytest.raises(ValueError, match="steps: expected a positive"):
        rollout(torch.nn.Conv2d(4, 2, 1), torch.zeros(1, 2, 2, 8, 8), 0)


def test_windowed_training_and_rollout_evaluation(tmp_path):
    """m = 2 frames → next, trained on 2-step pushforward rollouts; evaluated by a 6-step rollout."""
    torch.set_num_threads(1)
    path = tmp_path / "waves.nc"
    pde_data.save(travelling_waves(), path)
    spec = RunSpec(data=DataSpec(str(path), split=(8, 2, 2)), task=TaskSpec(window=2, horizon=2, pushforward=True),
                   model=ModelSpec("fno", {"n_modes": 4, "width": 8, "n_layers": 2}),
                   optim=OptimSpec(epochs=4, batch_size=16, lr=5e-3))
    history = train_run(spec, tmp_path / "run", progress=False)
    assert history[-1]["train_loss"] < history[0]["train_loss"]
    result = evaluate_run(tmp_path / "run", path, steps=6)
    curve = result["rollout"]["per_step_rel_l2"]
    assert result["samples"] == "test" and result["n_samples"] == 2 and len(curve) == 6
    assert all(np.isfinite(curve)) and result["rollout"]["mean_rel_l2"] == pytest.approx(np.mean(curve))
    assert {"rel_l2", "nRMSE", "fRMSE_low"} <= set(result["metrics"])
    folder = tmp_path / "run" / "evaluations" / f"{path.name}-test"
    assert (folder / "rollout.csv").read_text().count("\n") == 7
    assert (folder / "rollout.png").is_file() and (folder / "metrics.json").is_file()
    from PIL import Image

    title = Image.open(folder / "rollout_spectra.png").text["Title"]  # the spectra at the first, middle, last step
    assert title.endswith("at rollout steps 1, 3, 6") and "power spectra of u, sample " in title
    with pytest.raises(ValueError, match="steps: expected 1..10 rollout steps"):
        evaluate_run(tmp_path / "run", path, steps=11, write=False)
