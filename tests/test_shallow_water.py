"""Shallow-water finite-volume solver: still water, conservation, symmetry, Stoker dam break, bad input."""

import math

import numpy as np
import pytest
import torch
from scipy.optimize import brentq

from pde_data.solvers.shallow_water import cell_centres, simulate_shallow_water


def _radial(n, radius=0.5, length=5.0):
    x = cell_centres(n, length)
    xx, yy = torch.meshgrid(x, x, indexing="ij")
    return torch.where(xx**2 + yy**2 < radius**2, 2.0, 1.0).double()[None]


def stoker(x, t, h_left=2.0, h_right=1.0, g=1.0):
    """Exact dam break on a wet bed: left rarefaction, middle state, right shock (Stoker 1957).

    Middle state h_m from u_m = 2(c_l − c_m) (rarefaction) = (h_m − h_r)√(g(h_m + h_r)/(2 h_m h_r)) (shock).
    """
    c_left = math.sqrt(g * h_left)

    def mismatch(h):
        return 2 * (c_left - math.sqrt(g * h)) - (h - h_right) * math.sqrt(g * (h + h_right) / (2 * h * h_right))

    h_mid = brentq(mismatch, h_right, h_left, xtol=1e-15)
    u_mid = 2 * (c_left - math.sqrt(g * h_mid))
    shock = h_mid * u_mid / (h_mid - h_right)
    xi = np.asarray(x) / t
    fan = (2 * c_left - xi) ** 2 / (9 * g)
    h = np.where(xi < -c_left, h_left, np.where(xi < u_mid - math.sqrt(g * h_mid), fan, h_mid))
    return np.where(xi < shock, h, h_right)


def test_still_water_stays_still():
    h = torch.full((2, 16, 16), 1.5, dtype=torch.float64)
    out_h, out_hu, out_hv = simulate_shallow_water(h, None, None, length=5.0, t_final=0.5, n_frames=3)
    assert torch.equal(out_h, torch.full_like(out_h, 1.5))
    assert float(out_hu.abs().max()) == 0.0 and float(out_hv.abs().max()) == 0.0


def test_radial_dam_break_conserves_mass_and_keeps_its_symmetries():
    h, hu, hv = simulate_shallow_water(_radial(48), None, None, length=5.0, t_final=1.0, n_frames=5)
    mass = h.sum(dim=(-2, -1))
    assert float(((mass - mass[:, :1]) / mass[:, :1]).abs().max()) < 1e-12
    assert float((h[:, -1, 0] - 1).abs().max()) < 1e-12  # the waves have not reached the boundary
    assert torch.allclose(h, h.transpose(-1, -2), atol=1e-13) and torch.allclose(h, h.flip(-1), atol=1e-13)
    assert torch.allclose(hu, hv.transpose(-1, -2), atol=1e-13)
    assert float(h.min()) > 0


def _radial_spread(h0):
    """Mean over groups of cells at exactly equal radius (one octant) of max h − min h at t = 0.5.

    With cell centres at odd multiples of Δx/2, cells (a, b) and (c, d) lie at the same radius when
    a² + b² = c² + d² for odd a, b, c, d — no interpolation needed (e.g. 1² + 7² = 5² + 5²).
    """
    n = h0.shape[-1]
    h = simulate_shallow_water(h0, None, None, length=5.0, t_final=0.5, n_frames=2)[0][0, -1].numpy()
    a, b = np.meshgrid(2 * np.arange(n) - (n - 1), 2 * np.arange(n) - (n - 1), indexing="ij")
    octant = (a > 0) & (a <= b)
    r2, values = (a**2 + b**2)[octant], h[octant]
    order = np.argsort(r2, kind="stable")
    r2, values = r2[order], values[order]
    _, start, counts = np.unique(r2, return_index=True, return_counts=True)
    spread = np.maximum.reduceat(values, start) - np.minimum.reduceat(values, start)
    return float(spread[counts > 1].mean())


def _hump(n):
    x = cell_centres(n, 5.0)
    return (1 + 0.5 * torch.exp(-(x[:, None] ** 2 + x[None, :] ** 2) / 0.25))[None]


def test_radial_symmetry_within_discretisation_error():
    # smooth radial hump: the grid's anisotropy converges at about second order
    coarse, fine = _radial_spread(_hump(32)), _radial_spread(_hump(64))
    assert fine < coarse / 3 and fine < 5e-4
    # dam break: the shock is smeared over a cell or two whatever its direction
    assert _radial_spread(_radial(64)) < 5e-3


def _planar_l1_error(n, t_final=0.4, length=2.0):
    x = cell_centres(n, length)
    h0 = torch.where(x < 0, 2.0, 1.0).double()[None, :, None].expand(1, n, n).contiguous()
    h = simulate_shallow_water(h0, None, None, length=length, t_final=t_final, n_frames=2)[0][0, -1]
    assert float((h - h[:, :1]).abs().max()) < 1e-12  # stays one-dimensional
    return float(np.abs(h[:, 0].numpy() - stoker(x.numpy(), t_final)).mean())


def test_planar_dam_break_converges_to_stoker():
    ns = np.array([32, 64, 128])
    errors = np.array([_planar_l1_error(n) for n in ns])
    order = -np.polyfit(np.log(ns), np.log(errors), 1)[0]
    assert order > 0.8 and errors[-1] < 0.01, (errors, order)


def test_stoker_solution_satisfies_its_jump_conditions():
    h = stoker([-1.5, -0.01, 0.2, 1.5], 1.0)
    assert h[0] == 2.0 and h[-1] == 1.0 and 1.0 < h[2] < 2.0 and h[1] < 2.0


def test_float32_runs_and_momenta_can_be_dropped():
    h, hu, hv = simulate_shallow_water(_radial(16).float(), None, None, length=5.0, t_final=0.2, n_frames=3,
                                       store_momenta=False)
    assert h.dtype == torch.float32 and h.shape == (1, 3, 16, 16) and hu is None and hv is None
    ref = simulate_shallow_water(_radial(16), None, None, length=5.0, t_final=0.2, n_frames=3)[0]
    assert float((h.double() - ref).abs().max()) < 1e-4


def test_samples_do_not_depend_on_their_batch():
    both = simulate_shallow_water(torch.cat([_radial(16, 0.4), _radial(16, 0.7)]), None, None,
                                  length=5.0, t_final=0.3, n_frames=3)[0]
    alone = simulate_shallow_water(_radial(16, 0.7), None, None, length=5.0, t_final=0.3, n_frames=3)[0]
    assert torch.equal(both[1:], alone)


def test_bad_input_gives_clear_errors():
    h = torch.ones(1, 8, 8, dtype=torch.float64)
    run = dict(length=1.0, t_final=1.0, n_frames=2)
    with pytest.raises(ValueError, match="square grid"):
        simulate_shallow_water(torch.ones(1, 8, 6), None, None, **run)
    with pytest.raises(ValueError, match="positive depth"):
        simulate_shallow_water(-h, None, None, **run)
    with pytest.raises(ValueError, match="finite"):
        simulate_shallow_water(h, h * float("inf"), None, **run)
    with pytest.raises(ValueError, match="hv: expected the shape"):
        simulate_shallow_water(h, None, torch.zeros(1, 4, 4), **run)
    with pytest.raises(ValueError, match="t_final"):
        simulate_shallow_water(h, None, None, length=1.0, t_final=0.0, n_frames=2)
    with pytest.raises(ValueError, match="cfl"):
        simulate_shallow_water(h, None, None, cfl=0.9, **run)
    with pytest.raises(ValueError, match="n_frames"):
        simulate_shallow_water(h, None, None, length=1.0, t_final=1.0, n_frames=1)


def test_dam_break_dataset_round_trips_through_the_pdebench_layout(tmp_path):
    import pde_data

    ds = pde_data.generate_dam_break(3, n_grid=16, n_frames=6, seed=2, batch_size=2, momenta=True)
    assert ds.h.dims == ("sample", "time", "x", "y") and ds.h.shape == (3, 6, 16, 16)
    assert list(ds.time.values) == pytest.approx([0.0, 0.2, 0.4, 0.6, 0.8, 1.0])
    assert ds.x.values[0] == pytest.approx(-2.5 + 2.5 / 16) and ds.hu.shape == ds.h.shape
    radii = ds.dam_radius.values
    assert ((0.3 <= radii) & (radii <= 0.7)).all()
    inside = (ds.x**2 + ds.y**2 < ds.dam_radius**2).transpose("sample", "x", "y").values
    np.testing.assert_array_equal(ds.h.isel(time=0).values, np.where(inside, 2.0, 1.0))
    part = pde_data.generate_dam_break(1, n_grid=16, n_frames=6, seed=2, first_sample=2)
    np.testing.assert_array_equal(part.h.values, ds.h[2:].values)
    path = pde_data.write_pdebench(ds, tmp_path / "2D_rdb_NA_NA.h5", layout="rdb", variables=["h"])
    back = pde_data.open_source(path).dataset
    np.testing.assert_allclose(back.h.transpose("sample", "time", "x", "y").values, ds.h.values)
    np.testing.assert_allclose(back.x.values, ds.x.values, rtol=1e-6)
    import h5py

    with h5py.File(path) as f:
        assert f["0001/data"].shape == (6, 16, 16, 1)
        assert f"dam_radius: {radii[1]}"[:20] in f["0001"].attrs["config"]


def test_hll_flux_is_consistent_and_limited_faces_stay_between_neighbours():
    from pde_data.solvers._swe_flux import face_states, hll_flux

    gen = torch.Generator().manual_seed(0)
    q = torch.stack([1 + torch.rand(2, 6, 5, generator=gen, dtype=torch.float64),
                     torch.randn(2, 6, 5, generator=gen, dtype=torch.float64),
                     torch.randn(2, 6, 5, generator=gen, dtype=torch.float64)], dim=1)
    h, hu, hv = q[:, 0], q[:, 1], q[:, 2]
    exact = torch.stack([hu, hu * hu / h + 0.5 * 2.0 * h * h, hu * hv / h], dim=1)
    torch.testing.assert_close(hll_flux(q, q, normal=1, g=2.0), exact, rtol=1e-13, atol=1e-13)
    qp = torch.nn.functional.pad(q, (0, 0, 2, 2), mode="replicate")
    for limiter in ("mc", "minmod"):
        left, right = face_states(qp, 2, limiter)
        cells = qp[:, :, 1:-1]  # interior cells and one ghost each side: faces lie between neighbours
        low, high = torch.minimum(cells[:, :, :-1], cells[:, :, 1:]), torch.maximum(cells[:, :, :-1], cells[:, :, 1:])
        for face in (left, right):
            assert bool(((face >= low - 1e-14) & (face <= high + 1e-14)).all())


def test_a_non_finite_state_names_the_time_and_sample():
    from pde_data.solvers.shallow_water import _check_frame

    q = torch.ones(3, 3, 4, 4, dtype=torch.float64)
    q[2, 1, 0, 0] = float("nan")
    with pytest.raises(FloatingPointError, match=r"between t=0.1 and t=0.2 in sample 2"):
        _check_frame(q, t_prev=0.1, t=0.2)
