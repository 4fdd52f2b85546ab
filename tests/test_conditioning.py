"""Field models conditioned per sample on PDE parameters (``train --condition``): the FiLM embedding, the batches'
``params``, training, evaluating, resuming and the one-line errors."""

import json

import numpy as np
import pytest
import torch
import xarray as xr

import pde_data
from operators.cli import main
from operators.models import MODELS, build
from operators.models.conditioning import CONDITIONED, Conditioned, film_sites
from operators.training import load_checkpoint
from pde_data.core.model import PARAMETER, ROLE
from test_trainer import poisson_dataset

_SMALL = {"fno": {"n_modes": 4, "width": 8, "n_layers": 2}, "chonn_fno": {"n_modes": 4, "width": 8, "n_layers": 2},
          "nac_fno": {"n_modes": 4, "width": 8, "n_layers": 2}, "unet": {"channel_multiplier": 4, "n_layers": 2},
          "chonn_unet": {"channel_multiplier": 4, "n_layers": 2}, "nac_unet": {"channel_multiplier": 8, "n_layers": 2}}


def scaled_poisson(n_samples: int = 48, seed: int = 0) -> xr.Dataset:
    """Poisson pairs whose target is scaled per sample by a parameter ``c`` in [0.5, 2] the input does not show:
    ``u_c = c·u``; an unconditioned model can only predict its mean."""
    ds = poisson_dataset(n_samples=n_samples, seed=seed)
    c = np.random.default_rng(seed + 1).uniform(0.5, 2.0, n_samples)
    ds["u"] = ds["u"] * xr.DataArray(c.astype("f4"), dims="sample")
    ds["c"] = xr.DataArray(c, dims="sample", attrs={ROLE: PARAMETER})
    return ds


def decaying_frames(n_samples: int = 24, frames: int = 6, seed: int = 0) -> xr.Dataset:
    """1D fields decaying at a per-sample rate ``k``: ``u(t) = exp(-k t) u(0)``, ``k`` in [0.2, 2]."""
    rng = np.random.default_rng(seed)
    x, t = np.linspace(0, 1, 16, endpoint=False), np.arange(frames) * 0.5
    u0 = np.sin(2 * np.pi * (x[None] + rng.uniform(0, 1, (n_samples, 1))))
    k = rng.uniform(0.2, 2.0, n_samples)
    u = np.exp(-k[:, None, None] * t[None, :, None]) * u0[:, None, :]
    return xr.Dataset({"u": (("sample", "time", "x"), u.astype("f4")),
                       "k": ("sample", k, {ROLE: PARAMETER})}, coords={"x": x, "time": t})


@pytest.mark.parametrize("name", CONDITIONED)
def test_a_conditioned_model_starts_as_its_backbone_and_then_depends_on_each_samples_parameters(name):
    torch.manual_seed(0)
    plain = build(name, 2, 1, **_SMALL[name])
    torch.manual_seed(0)
    model = build(name, 2, 1, params=2, **_SMALL[name])
    x, p = torch.randn(3, 2, 16, 16), torch.rand(3, 2)
    assert torch.equal(model(x, p), plain(x))  # FiLM's zero start: the backbone's function, bit for bit
    with torch.no_grad():
        for film in model.films:
            film.weight.normal_(std=0.1)
    y = model(x, p)
    swapped = model(x, p.flip(0))
    assert not torch.allclose(y, swapped) and torch.allclose(model(x[:1], p[:1]), y[:1], atol=1e-5)
    y.square().mean().backward()
    assert model.embed.mlp[0].weight.grad.abs().sum() > 0


@pytest.mark.parametrize("name", ["chonn_fno", "chonn_unet"])
def test_the_parameters_scale_the_kirchhoff_cells_step_sizes_per_sample(name):
    """Δ ← Δ·exp(τ(e)) in every hosted CKB: with τ ≠ 0 the output changes, and τ learns (its gradient reaches it
    through the native scan)."""
    torch.manual_seed(0)
    model = build(name, 1, 1, params=1, **_SMALL[name])
    assert len(model.time_scales) == 2  # a CKB per Fourier layer (2) / in the deepest encoder and decoder stages
    x, p = torch.randn(2, 1, 16, 16), torch.rand(2, 1)
    before = model(x, p)
    with torch.no_grad():
        for scale in model.time_scales:
            scale.bias.fill_(0.7)
    after = model(x, p)
    assert not torch.allclose(before, after)
    after.square().mean().backward()
    assert all(scale.bias.grad.abs().item() > 0 for scale in model.time_scales)


def test_film_sites_are_every_layer_and_no_other_field_model_takes_parameters():
    fno = build("fno", 1, 1, **_SMALL["fno"])
    assert [calls for _, _, calls in film_sites(fno)] == [2]  # neuraloperator's FNOBlocks: both layers
    assert len(film_sites(build("unet", 1, 1, **_SMALL["unet"]))) == 2 + 1 + 2  # encoders, neck, decoders
    others = [n for n, e in MODELS.items() if e.domain == "fields" and n not in CONDITIONED]
    assert others and all(not film_sites(build(n, 1, 1)) for n in others)
    with pytest.raises(ValueError, match="expected a field model with layers to condition"):
        Conditioned(build("ckb_chain", 1, 1), 1)


def test_batches_carry_each_samples_parameters_for_pairs_and_windows():
    ds = scaled_poisson(12)
    batch = pde_data.PairDataset(ds, ["f"], ["u"], params=["c"]).read_batch([3, 0, 7])
    assert batch.params.shape == (3, 1) and np.allclose(batch.params[:, 0], ds["c"].values[[3, 0, 7]])
    assert pde_data.PairDataset(ds, ["f"], ["u"]).read_batch([0]).params is None
    frames = decaying_frames(4)
    windows = pde_data.WindowDataset(frames, ["u"], window=2, params=["k"])
    batch = windows.read_batch(list(range(len(windows))))
    assert np.allclose(batch.params[:, 0], frames["k"].values[windows.windows[:, 0]])
    with pytest.raises(ValueError, match=r"parameter 'nu': expected a number per sample.*among the parameters \['c'\]"):
        pde_data.PairDataset(ds, ["f"], ["u"], params=["nu"])


def _train(data, out, *extra, model="fno", epochs=2):
    config = [f"{k}={v}" for k, v in _SMALL.get(model, {}).items()]
    return main(["train", "--data", str(data), "--model", model, "--config", *config, "--out", str(out),
                 "--epochs", str(epochs), "--batch-size", "8", "--threads", "1", "--no-progress", "--device", "cpu",
                 *extra])


def test_conditioning_learns_what_the_inputs_do_not_show(tmp_path):
    """Targets scaled by a hidden per-sample ``c``: conditioned on ``c`` the validation error falls well below the
    unconditioned run's, which cannot tell the scale (same data, split, budget, seed)."""
    data = pde_data.save(scaled_poisson(80), tmp_path / "scaled.nc")
    common = ["--split", "64,16,0", "--lr", "3e-3"]
    assert _train(data, tmp_path / "plain", *common, epochs=60) == 0
    assert _train(data, tmp_path / "cond", *common, "--condition", "c", epochs=60) == 0
    plain, cond = (load_checkpoint(tmp_path / d / "best.pt") for d in ("plain", "cond"))
    err = {k: min(r["val_rel_l2"] for r in s["history"]) for k, s in (("plain", plain), ("cond", cond))}
    assert err["cond"] < 0.75 * err["plain"], err  # measured 0.27 against 0.45
    assert cond["spec"]["data"]["condition"] == ["c"] and cond["spec"]["model"]["params"] == 1
    assert "params" in cond["normalizers"] and "params" not in plain["normalizers"]


def test_a_conditioned_window_run_rolls_out_evaluates_and_resumes_bit_for_bit(tmp_path):
    data = pde_data.save(decaying_frames(24), tmp_path / "decay.nc")
    args = ["--window", "2", "--condition", "k", "--split", "16,4,4"]
    assert _train(data, tmp_path / "full", *args, epochs=3) == 0
    assert _train(data, tmp_path / "cut", *args, epochs=2) == 0
    assert _train(data, tmp_path / "cut", *args, "--resume", epochs=3) == 0
    a, b = (load_checkpoint(tmp_path / d / "last.pt") for d in ("full", "cut"))
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])
    assert main(["evaluate", "--run", str(tmp_path / "full"), "--data", str(data), "--out", str(tmp_path / "ev"),
                 "--threads", "1"]) == 0
    result = json.loads((tmp_path / "ev" / "metrics.json").read_text())
    assert result["rollout"]["steps"] == 4


def test_conditioning_mistakes_are_one_line_each(tmp_path, capsys):
    data = pde_data.save(scaled_poisson(24), tmp_path / "scaled.nc")

    def fails(*args, model="fno"):
        assert _train(data, tmp_path / "run", *args, model=model, epochs=1) != 0
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1, err
        return err

    assert "--condition: expected per-sample parameters" in fails("--condition", "nu")
    assert "among ['c']" in fails("--condition", "nu") and "'nu': no such variable" in fails("--condition", "nu")
    assert "--model: expected a model conditioned on parameters" in fails("--condition", "c", model="ckb_chain")
    constant = scaled_poisson(24)
    constant["c"][:] = 1.5
    flat = pde_data.save(constant, tmp_path / "flat.nc")
    assert main(["train", "--data", str(flat), "--model", "fno", "--config", "n_modes=4", "width=8", "--condition",
                 "c", "--out", str(tmp_path / "flat"), "--epochs", "1", "--threads", "1", "--no-progress"]) != 0
    assert "parameters that vary over the training samples, found c = 1.5" in capsys.readouterr().err
    assert _train(data, tmp_path / "ok", "--condition", "c", epochs=1) == 0
    capsys.readouterr()
    bare = pde_data.save(scaled_poisson(24).drop_vars("c"), tmp_path / "bare.nc")
    assert main(["evaluate", "--run", str(tmp_path / "ok"), "--data", str(bare), "--samples", "all",
                 "--threads", "1"]) != 0
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--data: expected the parameters ['c'] the run is conditioned on" in err, err
    assert "found no 'c' (its parameters: [])" in err


def _advection_file(path, beta: float, n: int, seed: int) -> None:
    """A PDEBench 1D advection file: ``tensor`` (sample, time, x) of ``u(t, x) = sin 2π(x − βt + φ)``."""
    import h5py

    x, t = (np.arange(32) + 0.5) / 32, np.linspace(0, 0.5, 7)
    phase = np.random.default_rng(seed).uniform(0, 1, n)
    u = np.sin(2 * np.pi * (x[None, None] - beta * t[None, :-1, None] + phase[:, None, None]))
    with h5py.File(path, "w") as f:
        f["tensor"], f["x-coordinate"], f["t-coordinate"] = u.astype("f4"), x.astype("f4"), t.astype("f4")


def test_a_pdebench_sweep_trains_conditioned_and_scores_a_held_out_beta(tmp_path):
    """The issue's acceptance: train on a glob of PDEBench advection files (three β), evaluate on a fourth β's
    file, whose β only its name tells (read once for all its samples), inside the training range."""
    (tmp_path / "train").mkdir()
    for k, beta in enumerate((0.1, 1.0, 2.0)):
        _advection_file(tmp_path / "train" / f"adv_beta{beta}.hdf5", beta, 8, seed=k)
    _advection_file(tmp_path / "adv_beta0.4.hdf5", 0.4, 6, seed=9)
    run = tmp_path / "R"
    assert _train(str(tmp_path / "train" / "adv_beta*.hdf5"), run, "--condition", "beta", "--window", "2") == 0
    assert load_checkpoint(run / "best.pt")["spec"]["data"]["condition"] == ["beta"]
    out = tmp_path / "held"
    assert main(["evaluate", "--run", str(run), "--data", str(tmp_path / "adv_beta0.4.hdf5"), "--samples", "all",
                 "--out", str(out), "--threads", "1"]) == 0
    result = json.loads((out / "metrics.json").read_text())
    part = result["per_parameter"]["beta"]
    assert part["train_range"] == pytest.approx([0.1, 2.0])
    assert [(g["value"], g["samples"], g["where"]) for g in part["groups"]] == [(pytest.approx(0.4), 6, "inside")]
    assert (out / "error_by_beta.png").stat().st_size > 0 and (out / "per_parameter.csv").exists()


@pytest.mark.slow
def test_a_conditioned_run_under_torchrun_matches_one_process(tmp_path):
    from cli_run import torchrun_beside_one_process

    data = pde_data.save(scaled_poisson(26), tmp_path / "scaled.nc")

    def args(out, *extra):
        return ["train", "--data", str(data), "--model", "unet", "--out", str(out), "--config", "n_layers=2", "n_res=1",
                "n_res_neck=1", "channel_multiplier=4", "norm=False", "--condition", "c", "--input", "f", "--target",
                "u", "--split", "22,4,0", "--epochs", "2", "--batch-size", "8", "--threads", "1", "--no-progress",
                *extra]

    one, _ = torchrun_beside_one_process(args, tmp_path, atol=1e-6)
    assert any(key.startswith("films.") for key in one["model"])


def test_a_generated_sweep_trains_conditioned(tmp_path):
    """``train --generate darcy --gen beta=0.5..2 --condition beta``: each epoch's new samples carry their β."""
    assert main(["train", "--generate", "darcy", "--gen", "beta=0.5..2", "n_grid=16", "--condition", "beta",
                 "--samples-per-epoch", "8", "--split", "0,4,4", "--model", "fno", "--config", "n_modes=4", "width=8",
                 "--epochs", "2", "--out", str(tmp_path / "G"), "--threads", "1", "--no-progress"]) == 0
    state = load_checkpoint(tmp_path / "G" / "last.pt")
    low, high = (state["normalizers"]["params"][k] for k in ("shift", "scale"))
    assert 0.5 <= low.item() < low.item() + high.item() <= 2.0 and state["spec"]["model"]["params"] == 1


def test_held_out_values_are_a_tenth_inside_the_range_and_drawn_from_the_seed():
    from operators.training.spec import SpecError
    from operators.training.tasks import held_out_values

    values = np.repeat(np.arange(25) * 0.1, 3)
    chosen = held_out_values(values, seed=0)
    assert len(chosen) == 2 and 0.0 < chosen.min() and chosen.max() < 2.4
    assert np.array_equal(chosen, held_out_values(values, seed=0))
    assert any(not np.array_equal(chosen, held_out_values(values, seed=s)) for s in range(1, 5))
    assert held_out_values(np.array([0.1, 0.4, 1.0, 0.4]), seed=3).tolist() == [0.4]
    with pytest.raises(SpecError, match="at least 3 distinct values"):
        held_out_values(np.array([0.1, 1.0, 1.0]), seed=0)


def test_split_by_tests_on_held_out_values_and_says_which(tmp_path, capsys):
    folder = tmp_path / "sweep"
    folder.mkdir()
    for k, beta in enumerate((0.1, 0.2, 0.4, 0.7, 1.0)):
        _advection_file(folder / f"adv_beta{beta}.hdf5", beta, 4, seed=k)
    pattern = str(folder / "adv_beta*.hdf5")
    assert _train(pattern, tmp_path / "R", "--condition", "beta", "--split-by", "beta", "--window", "2", epochs=1) == 0
    said = capsys.readouterr().err
    state = load_checkpoint(tmp_path / "R" / "best.pt")
    splits, betas = state["spec"]["data"]["splits"], pde_data.open_source(pattern).dataset["beta"].values
    held = sorted(set(betas[splits["test"]]))
    assert len(held) == 1 and 0.1 < held[0] < 1.0 and len(splits["test"]) == 4
    assert not set(betas[splits["train"] + splits["val"]]) & set(held)
    assert f"split by beta: testing on the held-out values [{held[0]}] (4 samples)" in said
    assert main(["info", str(tmp_path / "R")]) == 0
    shown = capsys.readouterr().out
    assert "conditioned on ['beta']" in shown and "the test holds out values of beta" in shown
    assert main(["evaluate", "--run", str(tmp_path / "R"), "--threads", "1"]) == 0  # its own glob, its test split
    result = json.loads((tmp_path / "R" / "evaluations" / "adv_beta_.hdf5-test" / "metrics.json").read_text())
    assert [g["value"] for g in result["per_parameter"]["beta"]["groups"]] == pytest.approx(held)
    assert _train(pattern, tmp_path / "S", "--split-by", "beta", "--split", "10,2,8", "--window", "2", epochs=1) != 0
    assert "--split: expected no split sizes beside --split-by" in capsys.readouterr().err


#: the training loss and validation rel. L2 of each epoch of unconditioned runs, recorded at commit 4eb0fb6, before
#: conditioning existed (identical to the bit there and now, on this machine; the tolerance, 1e-6, is for other
#: CPUs: scaling each host FNO layer by 1.001 fails it)
BEFORE_CONDITIONING = {
    "fno": [[0.9939311146736145, 0.9945937618613243], [0.9896826446056366, 0.9903178215026855]],
    "chonn_fno": [[0.9981062114238739, 0.9951555579900742], [0.9810527861118317, 0.9790400192141533]],
    "unet": [[1.2018902897834778, 1.1009728983044624], [1.0858845114707947, 1.0380728095769882]]}


@pytest.mark.parametrize("model", sorted(BEFORE_CONDITIONING))
def test_unconditioned_runs_train_as_before_conditioning_existed(tmp_path, model):
    # padding=0: the Fourier models as they were built then (padding a grid that is not periodic came later)
    config = {"fno": ["n_modes=4", "width=8", "n_layers=2", "padding=0"], "chonn_fno": ["n_modes=4", "width=8",
              "n_layers=2", "d_state=2", "padding=0"], "unet": ["channel_multiplier=4", "n_layers=2"]}[model]
    data = pde_data.save(poisson_dataset(n_samples=24), tmp_path / "p.nc")
    assert main(["train", "--data", str(data), "--model", model, "--config", *config, "--input", "f", "--target", "u",
                 "--split", "16,8,0", "--epochs", "2", "--batch-size", "8", "--threads", "1", "--no-progress",
                 "--device", "cpu", "--out", str(tmp_path / "run")]) == 0
    history = load_checkpoint(tmp_path / "run" / "last.pt")["history"]
    found = [[r["train_loss"], r["val_rel_l2"]] for r in history]
    assert np.allclose(found, BEFORE_CONDITIONING[model], rtol=1e-6, atol=0), found
