"""Classification through the run layer: labels in the data model, cross-entropy, top-1/top-5, the CLI."""

import json

import numpy as np
import pytest
import torch
import xarray as xr

import evaluation
import pde_data
from cli_run import run_cli, evaluation_dir
from operators.training import DataSpec, ModelSpec, OptimSpec, RunSpec, SpecError, TaskSpec, resolve
from operators.training.augment import random_shift
from operators.training.tasks.classify import label_metrics, majority_baseline

VISION = ["--model", "conv_vision", "--config", "size=cpu", "drop_path=0.0", "--threads", "1", "--no-progress"]


def bright_quadrant_images(n: int = 48, seed: int = 0) -> xr.Dataset:
    """Images whose class (0..3) is the quadrant holding a bright square, with noise: learnable in a few epochs."""
    rng = np.random.default_rng(seed)
    labels = np.arange(n) % 4
    images = rng.normal(0.0, 0.1, (n, 16, 16)).astype(np.float32)
    for k, c in enumerate(labels):
        r, q = divmod(int(c), 2)
        images[k, 8 * r + 2:8 * r + 6, 8 * q + 2:8 * q + 6] += 1.0
    ds = xr.Dataset({"image": (("sample", "x", "y"), images), "label": (("sample",), labels.astype(np.int64))})
    ds["label"].attrs["n_classes"] = 4
    return ds


def test_top_k_and_cross_entropy_by_hand():
    logits = torch.tensor([[3.0, 1.0, 2.0], [0.0, 5.0, 1.0]])
    labels = torch.tensor([2, 1])
    assert evaluation.top_k_accuracy(logits, labels, 1, reduce="none").tolist() == [0.0, 1.0]
    assert evaluation.top_k_accuracy(logits, labels, 2).item() == 1.0
    assert evaluation.top_k_accuracy(logits, labels, 5).item() == 1.0  # k capped at the classes
    expect = -(torch.log_softmax(logits, 1)[torch.arange(2), labels]).mean()
    assert evaluation.cross_entropy(logits, labels).item() == pytest.approx(expect.item())
    with pytest.raises(ValueError, match=r"labels: expected integers in \[0, 3\), found \[0, 3\]"):
        evaluation.top_k_accuracy(logits, torch.tensor([0, 3]))


def test_the_majority_class_baseline_is_the_labels_own_frequencies():
    labels = torch.tensor([2, 2, 2, 0, 0, 1, 3, 2])  # shares 2/8, 1/8, 4/8, 1/8 of 6 classes
    base = majority_baseline(labels, 6)
    assert base["top1"] == pytest.approx(0.5)  # always class 2
    assert base["top5"] == pytest.approx(1.0)  # the four classes present are among the five most frequent
    shares = torch.tensor([2, 1, 4, 1]) / 8
    assert base["cross_entropy"] == pytest.approx(float(-(shares * shares.log()).sum()))  # the labels' entropy
    assert majority_baseline(torch.tensor([1, 1, 1]), 4) == {"cross_entropy": 0.0, "top1": 1.0, "top5": 1.0}
    # the closed form is the metrics of the constant predictor whose logits are the log frequencies
    logits = (torch.bincount(labels, minlength=6).double() / 8).log().expand(8, 6)
    assert base == pytest.approx({k: float(v.mean()) for k, v in label_metrics(logits, labels).items()})
    with pytest.raises(ValueError, match="expected at least one label"):
        majority_baseline(torch.tensor([], dtype=torch.int64), 3)


def test_labels_in_the_data_model(tmp_path):
    ds = bright_quadrant_images(12)
    path = pde_data.save(ds, tmp_path / "img.nc")
    assert pde_data.n_classes(ds, "label") == 4 and pde_data.is_label(ds["label"]) and not pde_data.is_label(ds["image"])
    streamed = pde_data.LabelDataset(str(path), ["image"], ["label"], indices=[1, 4, 7, 9])
    cached = pde_data.LabelDataset(str(path), ["image"], ["label"], indices=[1, 4, 7, 9], cache=True)
    for x, y in ((b.inputs, b.targets) for b in (streamed.read_batch([3, 0, 0]), cached.read_batch([3, 0, 0]))):
        assert x.shape == (3, 1, 16, 16) and y.dtype == torch.int64 and y.tolist() == [1, 1, 1]
        assert torch.equal(x[0], torch.as_tensor(ds["image"].values[9])[None])
    floats = ds.assign(label=ds["label"].astype(np.float32))
    with pytest.raises(ValueError, match="expected integer class labels"):
        pde_data.read_labels(floats, "label")
    spec = RunSpec(data=DataSpec("in-memory", split=(8, 2, 2)), model=ModelSpec("conv_vision"))
    got = resolve(spec, ds)
    assert (got.task.kind, got.data.inputs, got.data.targets, got.task.classes) == ("classify", ("image",), ("label",), 4)
    assert (got.model.in_channels, got.model.out_channels) == (1, 4)
    unmarked = ds.assign(target=ds["image"] * 2, label=(("sample",), ds["label"].values))  # no n_classes
    fields = spec.override({"model.name": "fno"})
    assert resolve(fields, unmarked).task.kind == "steady"  # an integer per-sample setting is not a label
    assert resolve(spec.override({"data.targets": ["label"]}), unmarked).task.kind == "classify"


def test_random_shift_moves_each_image_by_its_own_offset():
    x = torch.arange(2 * 1 * 5 * 6, dtype=torch.float32).reshape(2, 1, 5, 6)
    assert random_shift(x, 0) is x
    torch.manual_seed(3)
    shifted = random_shift(x, 2)
    torch.manual_seed(3)
    start = torch.randint(0, 5, (2, 2))
    padded = torch.nn.functional.pad(x, (2, 2, 2, 2), mode="replicate")
    for b in range(2):
        r, c = int(start[0, b]), int(start[1, b])
        assert torch.equal(shifted[b], padded[b, :, r:r + 5, c:c + 6])


def test_train_and_evaluate_a_classifier_through_the_cli(tmp_path):
    data = pde_data.save(bright_quadrant_images(48), tmp_path / "img.nc")
    out = tmp_path / "run"
    train = run_cli("train", "--data", data, "--out", out, "--split", "32,8,8", "--epochs", "10", "--batch-size", "8",
                    "--lr", "1e-3", "--scheduler", "none", "--label-smoothing", "0.05", "--shift", "1", *VISION)
    assert train.returncode == 0, train.stderr
    history = json.loads((out / "history.json").read_text())
    assert {"val_top1", "val_top5", "val_cross_entropy"} <= set(history[-1])
    assert max(r["val_top1"] for r in history) >= 0.75 and history[-1]["train_loss"] < history[0]["train_loss"]
    run = json.loads((out / "run.json").read_text())
    assert run["task"]["kind"] == "classify" and run["model"]["out_channels"] == 4 and run["task"]["loss"] == "auto"
    evaluate = run_cli("evaluate", "--run", out, "--data", data)
    assert evaluate.returncode == 0, evaluate.stderr
    metrics = json.loads((evaluation_dir(out, data) / "metrics.json").read_text())
    pred = xr.open_dataset(evaluation_dir(out, data) / "pred.nc")
    true = bright_quadrant_images(48)["label"].values[pred["sample"].values]
    assert metrics["n_samples"] == 8 and metrics["metrics"]["top1"] == pytest.approx(np.mean(pred["label"].values == true))
    assert "top5" in evaluate.stdout and metrics["metrics"]["top5"] == 1.0  # 4 classes: always among the top 5
    assert metrics["baseline"]["majority_class"]["top1"] == pytest.approx(np.bincount(true, minlength=4).max() / 8)
    header = next(line for line in evaluate.stdout.splitlines() if line.startswith("metric"))
    assert header.split() == ["metric", "model", "majority", "class"]
    more = bright_quadrant_images(12).assign(label=lambda d: (d["label"] + 4).assign_attrs(n_classes=8))
    pde_data.save(more, tmp_path / "more.nc")
    refused = run_cli("evaluate", "--run", out, "--data", tmp_path / "more.nc", "--samples", "all")
    assert refused.returncode == 1 and "expected labels below the run's 4 classes, found 7" in refused.stderr


def test_a_field_loss_on_labels_is_one_line(tmp_path):
    data = pde_data.save(bright_quadrant_images(12), tmp_path / "img.nc")
    result = run_cli("train", "--data", data, "--out", tmp_path / "r", "--loss", "rel_l2", "--epochs", "1", *VISION)
    assert result.returncode == 1 and not (tmp_path / "r").exists()
    last = result.stderr.strip().splitlines()[-1]
    assert "--loss: expected one of ['auto', 'cross_entropy'] for a classify run, found 'rel_l2'" in last
    with pytest.raises(SpecError, match="task.label_smoothing: expected a number in"):
        RunSpec(task=TaskSpec(label_smoothing=1.0))
    with pytest.raises(SpecError, match="task.shift: expected an integer >= 0"):
        RunSpec(task=TaskSpec(shift=-1))


def test_a_resumed_classification_run_ends_with_the_same_weights(tmp_path):
    """Drop-path and the random shifts draw from torch's generator, which checkpoints store: 1 + 1 resumed
    epochs give the weights of 2 uninterrupted ones."""
    from operators.training import load_checkpoint, stored_spec, train_run

    data = pde_data.save(bright_quadrant_images(16), tmp_path / "img.nc")
    spec = RunSpec(data=DataSpec(str(data), split=(12, 4, 0)), task=TaskSpec(shift=1, label_smoothing=0.1),
                   model=ModelSpec("conv_vision", {"size": "cpu"}), optim=OptimSpec(epochs=2, batch_size=4))
    train_run(spec, tmp_path / "whole", progress=False)
    train_run(spec.override({"optim.epochs": 1}), tmp_path / "split", progress=False)
    train_run(stored_spec(tmp_path / "split").override({"optim.epochs": 2}), tmp_path / "split", resume=True,
              progress=False)
    whole, split = (load_checkpoint(tmp_path / name / "last.pt")["model"] for name in ("whole", "split"))
    assert all(torch.equal(whole[k], split[k]) for k in whole)


def test_a_model_or_flag_that_does_not_fit_the_task_is_one_line_before_anything_is_written(tmp_path, capsys):
    from operators.cli import main

    images = pde_data.save(bright_quadrant_images(12), tmp_path / "img.nc")
    fields = pde_data.save(xr.Dataset({"a": (("sample", "x", "y"), np.ones((6, 8, 8))),
                                       "u": (("sample", "x", "y"), np.ones((6, 8, 8)))}), tmp_path / "f.nc")
    cases = [(["--data", images, "--model", "fno"], "--model: expected a model for a classify run (one of"),
             (["--data", fields, "--model", "conv_vision"], "--model: expected a model for a steady run (one of"),
             (["--data", fields, "--model", "fno", "--shift", "2"], "--shift: expected only in classification runs")]
    for k, (args, message) in enumerate(cases):
        assert main(["train", *map(str, args), "--out", str(tmp_path / f"r{k}"), "--epochs", "1", "--no-progress"]) == 1
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0] and not (tmp_path / f"r{k}").exists()
