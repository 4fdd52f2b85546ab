"""Everything on the GPU, compared with the CPU: ``python -m bench.gpu_check [--device cuda]``.

Every check compares float32 work on the device with an independent float64 reference on the CPU (the
same weights and data in double precision, where torch takes its plain formulations and our native
float32 kernels do not run), so a check fails on a wrong device path, not only on a device mismatch:

- every registered model (tiny sizes): forward, loss and every parameter's gradient (TF32 off); a
  bfloat16-autocast forward and backward on the device, finite and close to its float32 output;
- the Navier–Stokes and shallow-water solvers and the metrics on the same inputs.

One line per check with its largest relative difference; exit status 1 when any check fails. Written to
run the first time a GPU is available (this project's machines have had none so far); ``--device cpu``
runs the float32 CPU paths against the same references, which is what the tests run.
"""

from __future__ import annotations

import argparse
import copy
import sys
from dataclasses import dataclass

import torch

import evaluation
import operators
from pde_data import gaussian_random_field_2d, simulate_navier_stokes, simulate_shallow_water

__all__ = ["Check", "run_checks", "main"]

_TINY_FNO = dict(n_modes=4, width=8, n_layers=2)
_TINY_UNET = dict(n_layers=2, n_res=1, n_res_neck=1, channel_multiplier=8)
_TINY_ORDER = dict(d_model=8, d_state=4, expand=2)
#: name -> (config, spatial dims): one case per registered model
MODELS = {
    "fno": (_TINY_FNO, 2), "unet": (_TINY_UNET, 2),
    "chonn_fno": ({**_TINY_FNO, "order": 2, "d_state": 4}, 2),
    "chonn_unet": ({**_TINY_UNET, "order": 2, "d_state": 4}, 2),
    "nac_fno": ({**_TINY_FNO, "num_heads": 2, "topk": 4}, 2),
    "nac_unet": ({**_TINY_UNET, "num_heads": 2, "topk": 4}, 2),
    "ckb_chain": ({**_TINY_ORDER, "order": 3}, 1), "depth_stack": ({**_TINY_ORDER, "depth": 2}, 1),
    "ckb_stack": ({**_TINY_ORDER, "order": 2, "n_blocks": 2}, 1),
    # the image classifiers without drop-path (its random draws differ between devices)
    "chonn_vision": ({"size": "cpu", "drop_path": 0.0}, 2), "conv_vision": ({"size": "cpu", "drop_path": 0.0}, 2),
    # the sequence models on (batch, time, channels) with step sizes and a padding mask (no spatial dims)
    "ltc": ({"units": 6, "ode_unfolds": 2}, 0), "cfc": ({"units": 6, "backbone_units": 8}, 0),
    "pdna": ({"units": 6, "backbone_units": 8}, 0), "nac": ({"d_model": 8, "num_heads": 2, "topk": 4}, 0),
    "ckb_seq": ({**_TINY_ORDER, "order": 2}, 0), "gru": ({"units": 6}, 0),
    "attention": ({"d_model": 8, "num_heads": 2}, 0),
}

#: the largest relative difference a check accepts: float32 work against float64 references (models, metrics,
#: solvers), bf16 autocast against float32
TOLERANCE = {"float32": 1e-4, "solver": 1e-3, "bfloat16": 5e-2}


@dataclass(frozen=True)
class Check:
    """One comparison: ``difference`` is max |device − reference| / max |reference|."""

    name: str
    difference: float
    tolerance: float

    @property
    def passed(self) -> bool:
        return self.difference <= self.tolerance  # NaN fails


def _relative(value: torch.Tensor, reference: torch.Tensor) -> float:
    """max |value − reference| / max |reference| in double precision (complex weights too)."""
    wide = torch.complex128 if reference.is_complex() else torch.float64
    value, reference = value.detach().cpu().to(wide), reference.detach().cpu().to(wide)
    return float((value - reference).abs().max() / reference.abs().max().clamp_min(1e-30))


def _inputs(domain: str, n_dim: int) -> tuple[torch.Tensor, ...]:
    """A model's inputs: fields or images ``(2, 3, *[16] * n_dim)``; sequences ``(2, 16, 3)`` with step sizes
    ``(2, 16)`` and a padding mask ``(2, 16)`` (lengths 16 and 9)."""
    if domain != "sequences":
        return (torch.randn(2, 3, *([16] * n_dim)),)
    return torch.randn(2, 16, 3), torch.rand(2, 16) + 0.1, torch.arange(16) < torch.tensor([[16], [9]])


def _wide(t: torch.Tensor) -> torch.Tensor:
    """float64 (complex128 for complex tensors, e.g. spectral weights); integers and masks unchanged."""
    if t.is_complex():
        return t.to(torch.complex128)
    return t.double() if t.is_floating_point() else t


def _model_checks(name: str, config: dict, n_dim: int, device: str) -> list[Check]:
    torch.manual_seed(0)
    model = operators.build(name, 3, 2, **config)
    reference = copy.deepcopy(model)._apply(_wide)  # the float64 reference (Module.double() skips complex weights)
    model = model.to(device)
    inputs = _inputs(operators.MODELS[name].domain, n_dim)
    classify = operators.MODELS[name].domain == "images"  # logits (batch, classes): cross-entropy
    target = torch.tensor([0, 1]) if classify else torch.randn(2, 2, *([16] * n_dim))
    loss_fn = evaluation.cross_entropy if classify else evaluation.rel_l2
    outputs, losses = [], []
    for net, where, cast in ((reference, "cpu", _wide), (model, device, lambda t: t)):
        y = net(*(cast(v).to(where) for v in inputs))
        loss = loss_fn(y, cast(target).to(where))
        loss.backward()
        outputs.append(y)
        losses.append(loss)
    scale = max(float(q.grad.abs().max()) for q in reference.parameters() if q.grad is not None)
    grads = max(float((_wide(p.grad.detach().cpu()) - q.grad).abs().max()) / max(scale, 1e-30)
                for p, q in zip(model.parameters(), reference.parameters()) if q.grad is not None)
    checks = [Check(f"{name}: forward", _relative(outputs[1], outputs[0]), TOLERANCE["float32"]),
              Check(f"{name}: loss", _relative(losses[1], losses[0]), TOLERANCE["float32"]),
              Check(f"{name}: gradients (relative to the largest)", grads, TOLERANCE["float32"])]
    with torch.no_grad():
        full = model(*(v.to(device) for v in inputs))
    with torch.autocast(device_type=torch.device(device).type, dtype=torch.bfloat16):
        mixed = model(*(v.to(device) for v in inputs))
    mixed.float().square().mean().backward()
    finite = bool(torch.isfinite(mixed).all())
    checks.append(Check(f"{name}: bf16 autocast vs float32", _relative(mixed, full) if finite else float("nan"),
                        TOLERANCE["bfloat16"]))
    return checks


def _solver_checks(device: str) -> list[Check]:
    """float32 on the device against float64 on the CPU (the fused shallow-water kernel runs in both)."""
    w0 = gaussian_random_field_2d(2, 32, seed=0, dtype=torch.float64)
    ns = [simulate_navier_stokes(w.to(where), visc=1e-3, t_final=0.5, n_records=2, dt=1e-3)
          for w, where in ((w0, "cpu"), (w0.float(), device))]
    n, length = 32, 5.0
    x = (torch.arange(n, dtype=torch.float64) + 0.5) * (length / n) - length / 2
    h = torch.where(x[:, None] ** 2 + x[None, :] ** 2 < 0.5, 2.0, 1.0).expand(2, n, n).contiguous()
    swe = [simulate_shallow_water(d.to(where), None, None, length=length, t_final=0.2, n_frames=3)[0]
           for d, where in ((h, "cpu"), (h.float(), device))]
    return [Check("navier_stokes float32 (2x32^2, 500 steps)", _relative(ns[1], ns[0]), TOLERANCE["solver"]),
            Check("shallow_water float32 (2x32^2, t = 0.2)", _relative(swe[1], swe[0]), TOLERANCE["solver"])]


def _metric_checks(device: str) -> list[Check]:
    torch.manual_seed(0)
    fields, true_fields = torch.randn(4, 16, 16, dtype=torch.float64), torch.randn(4, 16, 16, dtype=torch.float64)
    checks = []
    for name in ("rel_l2", "rel_l2_spectral", "rel_l2_derivative", "rel_l1", "nrmse_range", "max_mse"):
        fn = getattr(evaluation, name)
        on_device = fn(fields.float().to(device), true_fields.float().to(device), reduce="none")
        checks.append(Check(f"metric {name}", _relative(on_device, fn(fields, true_fields, reduce="none")),
                            TOLERANCE["float32"]))
    pred, true = torch.randn(4, 2, 8, 16, 16, dtype=torch.float64), torch.randn(4, 2, 8, 16, 16, dtype=torch.float64)
    on_device = evaluation.pdebench_metrics(pred.float().to(device), true.float().to(device))
    on_cpu = evaluation.pdebench_metrics(pred, true)
    for key in evaluation.PDEBENCH_KEYS:
        if key in on_cpu and on_cpu[key] == on_cpu[key]:
            checks.append(Check(f"pdebench {key}", abs(float(on_device[key]) - float(on_cpu[key]))
                                / max(abs(float(on_cpu[key])), 1e-30), TOLERANCE["float32"]))
    return checks


def run_checks(device: str) -> list[Check]:
    """Every check of the module docstring on ``device``."""
    if device.startswith("cuda"):
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    checks = []
    for name, (config, n_dim) in MODELS.items():
        checks += _model_checks(name, config, n_dim, device)
    return checks + _solver_checks(device) + _metric_checks(device)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", help="the device to check against the CPU (default cuda)")
    args = parser.parse_args(argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print(f"gpu_check: --device {args.device}: expected a CUDA device, found none (torch {torch.__version__})",
              file=sys.stderr)
        return 1
    name = torch.cuda.get_device_name(0) if args.device.startswith("cuda") else "cpu"
    print(f"gpu_check on {args.device} ({name}), torch {torch.__version__}")
    checks = run_checks(args.device)
    width = max(len(c.name) for c in checks) + 2
    for c in checks:
        print(f"{c.name:<{width}} {c.difference:10.3g}  (tolerance {c.tolerance:g})  {'ok' if c.passed else 'FAIL'}")
    failed = [c.name for c in checks if not c.passed]
    print(f"{len(checks) - len(failed)} of {len(checks)} checks passed" + (f"; failed: {failed}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
