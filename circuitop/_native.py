"""circuitop's native (C++) CPU kernels, built by :mod:`pde_data.core.native` (the project's one builder).

Two extensions: ``kirchhoff.cpp`` (the Kirchhoff cell's fused ZOH scan, the block's convolution stage
and gate) and ``resample.cpp`` (the exact 2× pooling and upsampling on which ``operators`` hosts run
their blocks).

:func:`build_native_kernels` (``circuitop build``, ``make install``) compiles both with a progress line
each; a kernel used first is compiled at that call. Build cache, locks, compiler flags, the
one-warning-then-torch fallback and the ``CIRCUITOP_NATIVE=0`` switch are :mod:`pde_data.core.native`'s.
"""

from __future__ import annotations

from pathlib import Path

import torch

from pde_data.core.native import NativeKernel, NativeKernelWarning, build_kernels, compiler_family, native_enabled

__all__ = ["NativeKernelWarning", "KERNELS", "STEMS", "build_native_kernels", "compiler_family", "native_enabled",
           "kirchhoff_ops", "kirchhoff_for", "resample_for"]

_CSRC = Path(__file__).with_name("csrc")

#: the kernels, in build order. The ZOH kernel's clamp is only if-converted (hence vectorised) when
#: comparisons may be speculated; circuitop never enables floating-point traps, so -fno-trapping-math
#: changes no result.
KERNELS = {
    "kirchhoff": NativeKernel(_CSRC / "kirchhoff.cpp", extra_cflags=("-fno-trapping-math",)),
    "resample": NativeKernel(_CSRC / "resample.cpp"),
}
STEMS = tuple(KERNELS)


def kirchhoff_ops():
    """The compiled Kirchhoff kernels (``csrc/kirchhoff.cpp``: ``zoh_forward``/``zoh_backward``, the
    cell's fused scan; ``conv_forward``/``conv_backward`` and ``gate_forward``/``gate_backward``, the
    block's), or None when they are disabled or cannot be built (then a single warning says why)."""
    return KERNELS["kirchhoff"].load(stacklevel=2)


def kirchhoff_for(*tensors: torch.Tensor | None):
    """:func:`kirchhoff_ops` when the given tensors (None entries skipped) suit its kernels (see
    :func:`_suit`), else None (then the caller takes its torch path)."""
    return KERNELS["kirchhoff"].load(stacklevel=2) if _suit(tensors) else None


def resample_for(*tensors: torch.Tensor | None):
    """The compiled 2× resampling (``csrc/resample.cpp``: ``pool2x``, ``upsample2x`` and their
    ``*_adjoint``) when the given tensors suit its kernels (see :func:`_suit`), else None."""
    return KERNELS["resample"].load(stacklevel=2) if _suit(tensors) else None


def _suit(tensors) -> bool:
    """Whether every tensor (None skipped) is a CPU float32 or float64 tensor, all of one dtype:
    what the native kernels take. (The ``*_for`` functions load the kernel themselves, so that a
    build warning points at their caller's caller, as one from ``kirchhoff_ops`` does.)"""
    present = [t for t in tensors if t is not None]
    dtype = present[0].dtype
    return dtype in (torch.float32, torch.float64) and all(t.device.type == "cpu" and t.dtype == dtype for t in present)


def build_native_kernels(stems: tuple[str, ...] = STEMS) -> dict[str, str | None]:
    """Build (or load from the cache) every kernel in ``stems`` now, with a progress line each; returns
    ``{stem: None if built, else why not}``. What ``make install`` and ``circuitop build`` run."""
    return build_kernels([KERNELS[stem] for stem in stems])
