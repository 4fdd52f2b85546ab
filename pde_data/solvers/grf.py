"""Gaussian random fields on the periodic unit square, as the FNO Navier–Stokes generator draws them.

The initial vorticity of the FNO benchmark (CHONN, Eq. 69) is

    w0 ~ N(0, 7^(3/2) (−Δ + 49 I)^(−2.5)),

drawn spectrally: with integer wavenumbers k on the FFT grid,

    sqrt_eig(k) = n² · √2 · σ · (4π²|k|² + τ²)^(−α/2),   σ = τ^((2α − 2)/2),   sqrt_eig(0) = 0,
    w0 = Re(ifft2(sqrt_eig · ξ)),   ξ = a + i b,  a, b ~ N(0, 1) independent,

exactly as the FNO code does (``GaussianRF(2, n, alpha=2.5, tau=7)``; its σ is the square root of the
paper's prefactor 7^3). Hence ``E|fft2(w0)(k)|² = sqrt_eig(k)²`` for every mode k.

Each sample has its own random stream seeded from ``(seed, sample index)``, so sample i is the same
whatever batch or shard it is drawn in.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from pde_data.core.params import ParameterError

__all__ = ["gaussian_random_field_2d", "grf_sqrt_eig", "fft_wavenumbers", "sample_generator"]


def fft_wavenumbers(n: int, *, dtype=torch.float64, device=None) -> torch.Tensor:
    """Integer wavenumbers of an n-point FFT axis: ``0, 1, …, n/2 − 1, −n/2, …, −1``."""
    return torch.fft.fftfreq(n, d=1.0 / n, dtype=dtype, device=device)


def grf_sqrt_eig(n: int, *, alpha: float = 2.5, tau: float = 7.0, dtype=torch.float64, device=None) -> torch.Tensor:
    """Square-root eigenvalues ``sqrt_eig`` (n, n) of the FNO random field (module docstring), mean mode 0."""
    k = fft_wavenumbers(n, dtype=dtype, device=device)
    kx, ky = torch.meshgrid(k, k, indexing="ij")
    sigma = tau ** ((2.0 * alpha - 2.0) / 2.0)
    sqrt_eig = n**2 * math.sqrt(2.0) * sigma * (4.0 * math.pi**2 * (kx**2 + ky**2) + tau**2) ** (-alpha / 2.0)
    sqrt_eig[0, 0] = 0.0
    return sqrt_eig


def sample_generator(seed: int, index: int) -> torch.Generator:
    """A CPU ``torch.Generator`` for sample ``index`` of the set seeded ``seed`` (independent streams)."""
    state = np.random.SeedSequence([int(seed), int(index)]).generate_state(2, dtype=np.uint32)
    return torch.Generator().manual_seed(int(state[0]) << 32 | int(state[1]))


def gaussian_random_field_2d(n_samples: int, n: int, *, alpha: float = 2.5, tau: float = 7.0, seed: int = 0,
                             first_sample: int = 0, dtype: torch.dtype = torch.float64,
                             device: torch.device | str | None = None) -> torch.Tensor:
    """Draw ``n_samples`` periodic Gaussian random fields on an n×n grid (FNO statistics, CHONN Eq. 69).

    Args:
        n_samples: number of fields.
        n: grid points per side (grid ``x_i = i/n``, "ij" indexing).
        alpha, tau: smoothness and length-scale of the covariance ``(−Δ + τ² I)^(−α)`` (scaled as FNO).
        seed: seed of the set; sample ``first_sample + j`` uses the stream ``(seed, first_sample + j)``.
        first_sample: absolute index of the first field drawn (for shards).

    Returns:
        ``(n_samples, n, n)`` tensor of ``dtype`` on ``device``.

    Example:
        >>> w0 = gaussian_random_field_2d(4, 64, seed=0)   # (4, 64, 64), like FNO's GaussianRF(2, 64, 2.5, 7)
    """
    if n_samples < 1:
        raise ParameterError("n_samples", f"expected a positive integer, found {n_samples}")
    if n < 2:
        raise ParameterError("n", f"expected at least 2 grid points per side, found {n}")
    if alpha <= 1.0 or tau <= 0.0:
        raise ParameterError(("alpha", "tau"), f"expected alpha > 1 and tau > 0, found alpha={alpha}, tau={tau}")
    sqrt_eig = grf_sqrt_eig(n, alpha=alpha, tau=tau)
    # one inverse FFT per sample: a batched FFT may round differently depending on the batch size
    field = torch.stack([_draw(sqrt_eig, sample_generator(seed, first_sample + j)) for j in range(n_samples)])
    return field.to(dtype=dtype, device=device)


def _draw(sqrt_eig: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    noise = torch.randn(2, *sqrt_eig.shape, generator=generator, dtype=torch.float64)
    return torch.fft.ifft2(sqrt_eig * torch.complex(noise[0], noise[1])).real
