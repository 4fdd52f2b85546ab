"""Plots: each returns a Figure, writes a PNG atomically, and shows the data it was given."""

import numpy as np
import pytest
import torch
import xarray as xr
from matplotlib.figure import Figure

from evaluation import plots

PNG = b"\x89PNG\r\n\x1a\n"


def _fields(shape=(3, 32, 32), seed=0):
    rng = np.random.default_rng(seed)
    true = rng.normal(size=shape)
    return true + 0.1 * rng.normal(size=shape), true


def _written(path):
    assert path.read_bytes()[:8] == PNG
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary file left behind


def test_plot_fields_2d_and_1d(tmp_path):
    pred, true = _fields()
    fig = plots.plot_fields(torch.tensor(pred[0]), xr.DataArray(true[0], dims=("x", "y")),
                            path=tmp_path / "f.png")
    assert isinstance(fig, Figure) and len(fig.axes) == 6  # three panels and three colour bars
    _written(tmp_path / "f.png")
    error_image = np.asarray(fig.axes[2].collections[0].get_array()).reshape(pred[0].shape)
    np.testing.assert_allclose(error_image, pred[0] - true[0])
    assert "max |e|" in fig.axes[2].get_title() and fig.axes[0].get_xlabel() == "y index"
    x, y = np.linspace(0.5, 1.5, pred.shape[1]), np.linspace(-1, 1, pred.shape[2])
    placed = plots.plot_fields(pred[0], true[0], coords={"x": x, "y": y})  # axes in the file's coordinates
    assert placed.axes[0].get_xlabel() == "y" and placed.axes[0].get_ylabel() == "x"
    assert placed.axes[0].get_ylim()[0] < 0.5 < 1.5 < placed.axes[0].get_ylim()[1]
    line = plots.plot_fields(pred[0, :, 0], true[0, :, 0]).axes[2].lines[0].get_ydata()
    np.testing.assert_allclose(line, pred[0, :, 0] - true[0, :, 0])


def test_plot_rollout_one_line_per_model(tmp_path):
    curves = {"FNO": np.linspace(0.01, 0.2, 40), "CHONN": torch.linspace(0.01, 0.1, 40)}
    fig = plots.plot_rollout(curves, path=tmp_path / "r.png")
    _written(tmp_path / "r.png")
    lines = fig.axes[0].lines
    assert [ln.get_label().split(" ")[0] for ln in lines] == ["FNO", "CHONN"]
    np.testing.assert_allclose(lines[0].get_xdata(), np.arange(1, 41))
    assert fig.axes[0].get_yscale() == "log"


def test_plot_spectra_peaks_at_the_mode_radius(tmp_path):
    n = 32
    x = np.arange(n) / n
    true = np.cos(2 * np.pi * 6 * x)[None, :, None] * np.ones((2, 1, n))
    pred = true + 0.01 * np.random.default_rng(0).normal(size=true.shape)
    fig = plots.plot_spectra(pred, true, path=tmp_path / "s.png")
    _written(tmp_path / "s.png")
    true_line = fig.axes[0].lines[0]
    assert true_line.get_xdata()[np.argmax(true_line.get_ydata())] == 6


def test_plot_metric_bars(tmp_path):
    results = {"FNO": {"RMSE": 0.1, "Max": 0.5, "bRMSE": 0.2}, "CHONN": {"RMSE": 0.05, "Max": 0.3, "bRMSE": 0.1}}
    fig = plots.plot_metric_bars(results, path=tmp_path / "b.png")
    _written(tmp_path / "b.png")
    visible = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title() for ax in visible] == ["RMSE", "Max", "bRMSE"]
    assert [p.get_height() for p in visible[1].patches] == [0.5, 0.3]


def test_bad_input():
    pred, true = _fields()
    with pytest.raises(ValueError, match=r"pred shape \(3, 32, 32\) and true shape"):
        plots.plot_fields(pred, true)
    with pytest.raises(ValueError, match=r"missing \{'CHONN': \['Max'\]\}"):
        plots.plot_metric_bars({"FNO": {"RMSE": 1, "Max": 2}, "CHONN": {"RMSE": 1}})
    with pytest.raises(ValueError, match="curves"):
        plots.plot_rollout({})
    with pytest.raises(ValueError, match=r"\(batch, x\) or \(batch, x, y\)"):
        plots.plot_spectra(pred[0, 0], true[0, 0])


def test_training_curves_separate_the_loss_from_the_validation_metrics(tmp_path):
    history = [{"epoch": k, "train_loss": 1.0 / k, "val_rel_l2": 0.5 / k, "val_top1": 0.1 * k} for k in (1, 2, 3)]
    fig = plots.plot_training_curves(history, title="runs/a", path=tmp_path / "c.png")
    loss, val = fig.axes
    assert loss.get_ylabel().startswith("training loss") and val.get_ylabel() == "validation metric"
    assert list(loss.lines[0].get_ydata()) == [1.0, 0.5, 1.0 / 3]
    assert [line.get_label() for line in val.lines] == ["rel_l2", "top1"] and fig._suptitle.get_text() == "runs/a"
    _written(tmp_path / "c.png")
    alone = plots.plot_training_curves([{"epoch": 1, "train_loss": 0.3}])
    assert alone.axes[1].get_ylabel() == "no validation split" and not alone.axes[1].lines


def test_rollout_and_spectra_plots_carry_their_title_into_the_png(tmp_path):
    from PIL import Image

    plots.plot_rollout({"fno": [0.1, 0.2]}, title="run on ns.nc: rollout", path=tmp_path / "r.png")
    plots.plot_spectra(np.ones((1, 8, 8)), np.ones((1, 8, 8)), title="run on ns.nc: spectra", path=tmp_path / "s.png")
    assert Image.open(tmp_path / "r.png").text["Title"] == "run on ns.nc: rollout"
    assert Image.open(tmp_path / "s.png").text["Title"] == "run on ns.nc: spectra"
    fig = plots.plot_rollout_spectra(np.ones((4, 8, 8)), np.ones((4, 8, 8)), [1, 4], title="run: rollout spectra",
                                     path=tmp_path / "rs.png")
    assert [line.get_label() for line in fig.axes[0].lines] == ["step 1, true", "step 1, predicted", "step 4, true",
                                                                 "step 4, predicted"]
    assert Image.open(tmp_path / "rs.png").text["Title"] == "run: rollout spectra"
    with pytest.raises(ValueError, match=r"steps: expected rollout steps in 1\.\.4, found \[5\]"):
        plots.plot_rollout_spectra(np.ones((4, 8, 8)), np.ones((4, 8, 8)), [5])
