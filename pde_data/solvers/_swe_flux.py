"""Finite-volume pieces of the shallow-water solver: limited reconstruction and the HLL flux.

State ``q`` = (h, hu, hv) on axis 1 of a (batch, 3, nx, ny) tensor. Equations (CHONN, Eqs. 62–64, flat
bottom b = 0):

    ∂t h + ∂x(hu) + ∂y(hv) = 0,
    ∂t(hu) + ∂x(hu² + g h²/2) + ∂y(huv) = 0,
    ∂t(hv) + ∂x(huv) + ∂y(hv² + g h²/2) = 0.
"""

from __future__ import annotations

import torch

__all__ = ["LIMITERS", "face_states", "hll_flux", "max_rate"]


def _minmod(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """minmod(a, b): the smaller magnitude when a and b share a sign, else 0."""
    return 0.5 * (torch.sign(a) + torch.sign(b)) * torch.minimum(a.abs(), b.abs())


def _mc(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Monotonized-central slope minmod(2a, (a + b)/2, 2b) (van Leer 1977; PyClaw's MC limiter)."""
    mag = torch.minimum(2.0 * torch.minimum(a.abs(), b.abs()), 0.5 * (a + b).abs())
    return 0.5 * (torch.sign(a) + torch.sign(b)) * mag  # ½(sign a + sign b) is 0 unless the signs agree


#: slope limiters by name; both keep face values between neighbouring cell averages (so h stays > 0)
LIMITERS = {"mc": _mc, "minmod": _minmod}


def face_states(qp: torch.Tensor, axis: int, limiter: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Left/right states at the n + 1 faces along ``axis`` from limited linear reconstruction (MUSCL).

    Args:
        qp: states padded by two ghost cells on both ends of ``axis`` (length n + 4 there).

    Returns:
        ``(q_left, q_right)``, each with length n + 1 along ``axis``: face j lies between interior cells
        j − 1 and j (face 0 is the low boundary).
    """
    m = qp.shape[axis] - 4
    diff = qp.diff(dim=axis)
    slope = LIMITERS[limiter](diff.narrow(axis, 0, m + 2), diff.narrow(axis, 1, m + 2))
    cells = qp.narrow(axis, 1, m + 2)
    half = 0.5 * slope
    return (cells + half).narrow(axis, 0, m + 1), (cells - half).narrow(axis, 1, m + 1)


def _physical_flux(q: torch.Tensor, normal: int, g: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    h = q[:, 0]
    un = q[:, normal] / h.clamp_min(torch.finfo(q.dtype).tiny)
    flux = q * un[:, None]
    flux[:, normal] += 0.5 * g * h * h
    return flux, un, torch.sqrt(g * h.clamp_min(0.0))


def hll_flux(q_left: torch.Tensor, q_right: torch.Tensor, normal: int, g: float) -> torch.Tensor:
    """HLL numerical flux (Harten, Lax & van Leer 1983) with Davis/Einfeldt wave-speed bounds.

        F = (S_R⁺ F(q_L) − S_L⁻ F(q_R) + S_L⁻ S_R⁺ (q_R − q_L)) / (S_R⁺ − S_L⁻),
        S_L⁻ = min(u_L − c_L, u_R − c_R, 0),  S_R⁺ = max(u_L + c_L, u_R + c_R, 0),  c = √(g h).

    Args:
        q_left, q_right: face states (batch, 3, ...); ``normal`` is 1 for x-faces (hu normal), 2 for y.
    """
    f_left, u_left, c_left = _physical_flux(q_left, normal, g)
    f_right, u_right, c_right = _physical_flux(q_right, normal, g)
    s_left = torch.minimum(u_left - c_left, u_right - c_right).clamp_max(0.0)[:, None]
    s_right = torch.maximum(u_left + c_left, u_right + c_right).clamp_min(0.0)[:, None]
    width = s_right - s_left
    flux = s_right * f_left - s_left * f_right + s_left * s_right * (q_right - q_left)
    return flux / torch.where(width > 0, width, torch.ones_like(width))


def max_rate(q: torch.Tensor, dx: float, g: float) -> torch.Tensor:
    """Per-sample max over cells of (|u| + c)/Δx + (|v| + c)/Δy (Δy = Δx): dt·rate is the CFL number."""
    h = q[:, 0]
    inv_h = 1.0 / h.clamp_min(torch.finfo(q.dtype).tiny)
    c = torch.sqrt(g * h.clamp_min(0.0))
    rate = ((q[:, 1] * inv_h).abs() + (q[:, 2] * inv_h).abs() + 2.0 * c) / dx
    return rate.flatten(1).amax(dim=1)
