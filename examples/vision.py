"""The CHONN vision backbone's routing ablation on an image set that ships offline, beside a convolutional
baseline (CHONN, Fig. 5h–j and Methods, "Large-scale visual recognition").

Claims under test (CHONN, Fig. 5i–j, on ImageNet-1K at 224², 300 epochs, 8 GPUs): the serial cascade
beats parallel expansion, which beats the original first-order routing; the circuit constraints improve
the serial cascade further; the final model is ahead at an early epoch (30 of 300). This script tests
the same orderings at a much smaller scale: scikit-learn's handwritten digits (1,797 grey 8×8 images, 10
classes; the only labelled image set that ships inside a package this project installs: torchvision's
and scipy's sets download), upsampled bicubically to 32² so that the four stages see 8², 4², 2² and 1²
feature maps. Nothing here speaks for ImageNet.

Models, all the ``cpu`` size of ``chonn_vision`` (width 32, depths [1, 1, 3, 1], d_state 8) and trained
alike (AdamW, weight decay 0.05, cosine schedule, label smoothing 0.1, random shifts of up to 2 pixels,
drop-path 0.2, batch 64): the four routings (``first_order``, ``parallel``, ``serial``,
``serial_constrained``) and ``conv_vision`` (the same backbone with a 7×7 depthwise convolutional mixer).
Every model is also trained on the first 100 training images alone (60 epochs): digits is nearly
saturated with the whole split, and a task the models do not all solve is the one that can separate
them. Reported: test top-1 and top-5 accuracy of the last epoch (mean ± std over training seeds), the
validation top-1 at the early epoch (a tenth of training, as 30 of 300), parameters, forward FLOPs of one
32² image (``operators.models.count_flops``: convolutions and matrix products by
``torch.utils.flop_counter``, plus the scans) and training images/s; and the parameters and FLOPs of the
paper's Tiny, Small and Base sizes at 224² (not trained here).

Scales (the data split, 1,257 / 180 / 360, is drawn with ``--seed``):

- full: 100 epochs, training seeds 0, 1, 2 (the paper's ImageNet protocol is not runnable offline).
- ``--medium``: 20 epochs, seeds 0, 1, 2 (the RESULTS.md table; 24 minutes on two cores).
- ``--quick``: 10 epochs, one seed.
- ``--smoke``: 40 images at 16², one epoch.

Outputs in ``--out`` (default ``runs/vision``): ``results.json``, ``data.nc``, the run folders
``runs/seed<k>/<model>`` and ``accuracy.png`` (validation top-1 per epoch, mean over seeds).

Example:
    python examples/vision.py --quick
"""

from __future__ import annotations

import numpy as np
import torch
import xarray as xr
from sklearn.datasets import load_digits
from torch.nn import functional as F

import _common
import pde_data
from circuitop import ROUTINGS
from evaluation import plots
from operators import models
from operators.training import DataSpec, OptimSpec, RunSpec, Splits, TaskSpec

SCRIPT = "vision"
COMMON = dict(size=32, sizes=(1257, 180, 360), batch_size=64, lr=2e-3, shift=2, few=100, few_epochs=60)
SCALES = {
    "full": dict(COMMON, epochs=100, seeds=(0, 1, 2), models=ROUTINGS + ("conv",)),
    "medium": dict(COMMON, epochs=20, seeds=(0, 1, 2), models=ROUTINGS + ("conv",)),
    "quick": dict(COMMON, epochs=10, models=ROUTINGS + ("conv",)),
    "smoke": dict(COMMON, size=16, sizes=(24, 8, 8), epochs=1, few=10, few_epochs=1, models=ROUTINGS + ("conv",)),
}
PAPER = ("ImageNet-1K, Fig. 5i: first-order < parallel < serial < serial + constraints in top-1; "
         "Fig. 5j: CHONN ahead of VMamba at 30 of 300 epochs")


def write_digits(cfg: dict, seed: int, out) -> tuple:
    """``data.nc``: the digits (``image`` (sample, x, y) upsampled to ``size``², ``label``), and the seeded split."""
    digits = load_digits()
    n = sum(cfg["sizes"])
    order = np.random.default_rng(seed).permutation(len(digits.target))[:n]
    images = torch.as_tensor(digits.images[order], dtype=torch.float32)[:, None] / 16.0
    images = F.interpolate(images, size=cfg["size"], mode="bicubic", align_corners=False)[:, 0]
    ds = xr.Dataset({"image": (("sample", "x", "y"), images.numpy()),
                     "label": (("sample",), digits.target[order].astype(np.int64))})
    ds["label"].attrs["n_classes"] = 10
    path = pde_data.save(ds, out / "data.nc")
    splits = _common.in_order(dict(zip(("train", "val", "test"), cfg["sizes"])))
    print(f"data: digits at {cfg['size']}², train/val/test = {'/'.join(map(str, cfg['sizes']))}", flush=True)
    return path, splits


def specs(cfg: dict) -> dict[str, tuple[str, dict]]:
    """``label -> (registry name, config)`` of the compared models."""
    return {name: ("conv_vision", {"size": "cpu"}) if name == "conv" else
            ("chonn_vision", {"size": "cpu", "routing": name}) for name in cfg["models"]}


def _spec(cfg: dict, splits: Splits, seed: int) -> RunSpec:
    """The settings every model shares (the full training split, ``cfg["epochs"]``)."""
    return RunSpec(data=DataSpec(inputs=("image",), targets=("label",), splits=splits),
                   task=TaskSpec(label_smoothing=0.1, shift=cfg["shift"]),
                   optim=OptimSpec(epochs=cfg["epochs"], batch_size=cfg["batch_size"], lr=cfg["lr"], weight_decay=0.05,
                                   optimizer="adamw", scheduler="cosine", seed=seed))


def one_seed(seed: int, cfg: dict, data, splits: Splits, args, out) -> tuple[dict, dict]:
    """Train every model with training seed ``seed`` on the whole training split, and again on its first
    ``cfg["few"]`` images: the metrics row (``*_few`` for the second) and the validation top-1 curve."""
    runs = out / "runs" / f"seed{seed}"
    spec = _spec(cfg, splits, seed)
    trained = _common.train_models(specs(cfg), data, runs, spec=spec, device=args.device)
    few = Splits(splits.train[:cfg["few"]], splits.val, splits.test)
    few_spec = spec.override({"data.splits": few, "optim.epochs": cfg["few_epochs"]})
    trained_few = _common.train_models(specs(cfg), data, runs / "few", spec=few_spec, device=args.device)
    early = max(1, cfg["epochs"] // 10)
    rows, curves = {}, {}
    for label, run in trained.items():
        metrics = _common.evaluate(run, data)["metrics"]
        curves[label] = [r["val_top1"] for r in run.history]
        rows[label] = {"top1": metrics["top1"], "top5": metrics["top5"], f"val_top1_epoch{early}": curves[label][early - 1],
                       "images_per_s": float(np.mean([r["samples_per_s"] for r in run.history])),
                       "params": run.n_params, "train_s": run.seconds,
                       "top1_few": _common.evaluate(trained_few[label], data)["metrics"]["top1"]}
    _common.print_table(rows, f"seed {seed}: digits test accuracy ({cfg['size']}²)")
    return rows, curves


def paper_sizes() -> dict[str, dict[str, float]]:
    """Parameters and forward GFLOPs (a multiply-add counted as 2, as ``count_flops`` does) of the paper's
    sizes with the final routing, for 3×224² ImageNet images and 1,000 classes."""
    sizes = {}
    for size in ("tiny", "small", "base"):
        model = models.build("chonn_vision", 3, 1000, size=size)
        flops = models.count_flops(model, (1, 3, 224, 224))
        sizes[size] = {"params_m": _common.n_params(model) / 1e6, "gflops": flops.total / 1e9,
                       "gflops_scan": flops.scan / 1e9}
    return sizes


def main() -> None:
    args, out, cfg, seeds = _common.start(__doc__, SCRIPT, SCALES)
    sizes = paper_sizes() if args.scale != "smoke" else {}
    data, splits = write_digits(cfg, args.seed, out)
    per_seed, curves = {}, {}
    for seed in seeds:
        per_seed[seed], curves[seed] = one_seed(seed, cfg, data, splits, args, out)
    summary = _common.seed_summary(per_seed)
    rows = _common.summary_means(summary)
    flops = {label: models.count_flops(models.build(name, 1, 10, **config), (1, 1, cfg["size"], cfg["size"])).total
             for label, (name, config) in specs(cfg).items()}
    for label in rows:
        rows[label]["gflops"] = flops[label] / 1e9
    _common.print_table(rows, f"digits test accuracy, mean over seeds {seeds}")
    print(f"paper ({PAPER})", flush=True)
    plots.plot_rollout(_common.mean_curves(curves), metric_name="validation top-1 (x: epoch)", log=False,
                       path=out / "accuracy.png")
    _common.write_results(out, SCRIPT, args, {
        "settings": cfg, "seeds": seeds, "metrics": summary, "per_seed": per_seed, "flops": flops,
        "val_top1_curves": _common.mean_curves(curves), "chance_top1": 0.1, "paper": PAPER,
        "early_epoch": max(1, cfg["epochs"] // 10), "paper_sizes": sizes,
    })


if __name__ == "__main__":
    main()
