"""Order benchmark (CHONN, Eqs. 39-43): differential form, exact modes, FD convergence, determinism."""

import numpy as np
import pytest

from pde_data.generate.order import generate_order_benchmark, generate_order_splits, transfer

TAU = 0.08


def _angular(n):
    return 2 * np.pi * np.fft.rfftfreq(n, d=1.0 / n)


@pytest.mark.parametrize("order", [1, 2, 3, 4])
def test_differential_form_spectral(order):
    """(I - tau^2 d_ss)^n y = x (Eq. 40) with d_ss applied spectrally.

    Applying (1 + tau^2 k^2)^n to the stored target amplifies its float64 round-off by up to ~4e3^n at
    the Nyquist mode, so Eq. (40) is checked to 1e-10 on every mode whose amplification is below 1e5
    (all modes for n = 1); on the remaining modes the target must equal H_n(k) x_hat(k) to round-off
    of the input, i.e. the damped modes are right in absolute terms.
    """
    ds = generate_order_benchmark(8, order, seed=5)
    x, y = ds["input"].values, ds["target"].values
    k = _angular(256)
    gain = (1 + TAU**2 * k**2) ** order
    x_hat, y_hat = np.fft.rfft(x, axis=-1), np.fft.rfft(y, axis=-1)
    resolved = gain < 1e5
    assert resolved[:9].all() and (order > 1 or resolved.all())  # 129, 36, 14, 9 modes for n = 1..4
    lhs = np.fft.irfft(np.where(resolved, gain * y_hat, 0), n=256, axis=-1)
    rhs = np.fft.irfft(np.where(resolved, x_hat, 0), n=256, axis=-1)
    assert np.max(np.abs(lhs - rhs)) < 1e-10 * max(1.0, np.max(np.abs(x)))
    assert np.max(np.abs(y_hat - x_hat / gain)) < 1e-13 * np.max(np.abs(x_hat))
    assert ds.sizes == {"sample": 8, "s": 256}
    np.testing.assert_array_equal(ds["s"].values, np.arange(256) / 256)
    assert ds.attrs["order"] == order and ds.attrs["tau"] == TAU


@pytest.mark.parametrize("order", [1, 3])
def test_single_mode_exact(order):
    s = np.arange(256) / 256
    x = np.cos(2 * np.pi * 3 * s) + np.sin(2 * np.pi * 7 * s)
    exact = (np.cos(2 * np.pi * 3 * s) / (1 + (TAU * 2 * np.pi * 3) ** 2) ** order
             + np.sin(2 * np.pi * 7 * s) / (1 + (TAU * 2 * np.pi * 7) ** 2) ** order)
    np.testing.assert_allclose(transfer(x, order, tau=TAU), exact, atol=1e-13)


def test_composition():
    """T_n = T_1^n (Eq. 43)."""
    x = generate_order_benchmark(4, 1, seed=1)["input"].values
    y = x
    for _ in range(3):
        y = transfer(y, 1, tau=TAU)
    np.testing.assert_allclose(y, transfer(x, 3, tau=TAU), atol=1e-12)


def test_finite_difference_converges_second_order():
    """An independent check of the angular-wavenumber convention: the 3-point d_ss residual of Eq. (40)
    falls as h^2 on a smooth input (log-log slope ~ 2)."""
    errors, sizes = [], [64, 128, 256, 512]
    for n in sizes:
        s = np.arange(n) / n
        x = np.exp(np.sin(2 * np.pi * s))
        y = transfer(x, 2, tau=TAU)
        for _ in range(2):  # (I - tau^2 D_h)^2 y
            y = y - TAU**2 * (np.roll(y, 1) - 2 * y + np.roll(y, -1)) * n**2
        errors.append(np.max(np.abs(y - x)))
    slope = np.polyfit(np.log(1 / np.array(sizes)), np.log(errors), 1)[0]
    assert 1.9 < slope < 2.1, (errors, slope)


def test_deterministic_and_shards():
    a = generate_order_benchmark(6, 2, seed=42)
    b = generate_order_benchmark(6, 2, seed=42)
    assert a["input"].values.tobytes() == b["input"].values.tobytes()
    assert a["target"].values.tobytes() == b["target"].values.tobytes()
    assert not np.array_equal(a["input"].values, generate_order_benchmark(6, 2, seed=43)["input"].values)
    shard = generate_order_benchmark(6, 2, seed=42, samples=range(3, 6))
    assert shard["target"].values.tobytes() == a["target"].isel(sample=slice(3, 6)).values.tobytes()
    np.testing.assert_array_equal(shard["sample"].values, [3, 4, 5])


def test_inputs_mix_smooth_broadband_and_pulses():
    x = generate_order_benchmark(64, 1, seed=0)["input"].values
    power = np.mean(np.abs(np.fft.rfft(x, axis=-1)) ** 2, axis=0)
    assert power[1:5].sum() > power[5:33].sum() > 0  # smooth part dominates, broadband present
    assert power[40:128].sum() > 1e-9 * power.sum()  # only pulses reach beyond mode 32 (round-off: ~1e-32)


def test_standard_splits_small():
    sets = generate_order_splits(orders=(1, 4), splits={"train": (5, 42), "val": (3, 43)})
    assert set(sets) == {("train", 1), ("train", 4), ("val", 1), ("val", 4)}
    np.testing.assert_array_equal(sets[("train", 1)]["input"].values, sets[("train", 4)]["input"].values)
    np.testing.assert_array_equal(sets[("val", 4)]["target"].values,
                                  generate_order_benchmark(3, 4, seed=43)["target"].values)


@pytest.mark.parametrize("kwargs, message", [
    ({"order": 0}, "order: expected an integer >= 1, found 0"),
    ({"order": 1, "tau": -0.1}, "tau: expected a positive number, found -0.1"),
    ({"order": 1, "n_points": 16}, "n_points: expected at least"),
])
def test_invalid_parameters(kwargs, message):
    with pytest.raises(ValueError, match=message):
        generate_order_benchmark(2, **kwargs)
