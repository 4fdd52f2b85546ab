"""LTC / CfC against ncps, and PDNA's overhead over CfC: time ratios measured side by side in one run.

Case: batch 8 x 256 steps x 16 features; LTC with ``AutoNCP(64, 8)`` (target: ours >= 3x faster than
``ncps.torch.LTC``), CfC with 64 units and the default backbone (128 units). Ratios are ``ncps / ours``
(speed-ups) and ``PDNA / CfC`` (overhead; the paper reports about 1.05 in wall time, Table 7).

Times are the best of ``repeat`` runs of this process's CPU time (``time.process_time``), alternating the two
sides, so that other jobs sharing the cores disturb the ratio less than wall time would; run single-threaded
(``--threads 1``, the default) so that CPU time equals compute time. ``--clock wall`` uses
:func:`bench._util.best_time` instead.

    python -m bench.bench_ltc [--quick] [--threads 1]
"""

from __future__ import annotations

import argparse
import time

import ncps.torch
import torch
from ncps.wirings import AutoNCP

from bench._util import Row, best_time, print_table
from circuitop import LTC, PDNA, CfC

BATCH, FEATURES = 8, 16
CLOCK = {"clock": "cpu"}


def _best_pair(fn_a, fn_b, repeat: int) -> tuple[float, float]:
    """Best times of ``fn_a`` and ``fn_b``, measured alternately (CPU or wall clock, see the docstring)."""
    if CLOCK["clock"] == "wall":
        return best_time(fn_a, repeat=repeat), best_time(fn_b, repeat=repeat)
    fn_a(), fn_b()
    best = [float("inf"), float("inf")]
    for _ in range(repeat):
        for j, fn in enumerate((fn_a, fn_b)):
            start = time.process_time()
            fn()
            best[j] = min(best[j], time.process_time() - start)
    return best[0], best[1]


def _forward(model, x, dt):
    with torch.no_grad():
        return model(x, dt) if dt is not None else model(x)


def _forward_backward(model, x, dt):
    out = model(x, dt) if dt is not None else model(x)
    out[0].square().mean().backward()


def _pair_rows(name: str, ours, ref, x, dt, repeat: int) -> list[Row]:
    """ncps needs batch-1 timespans, so both run on unit steps (ours: ``dt=None``, the same numbers)."""
    rows = []
    for case, fn in (("forward", _forward), ("forward+backward", _forward_backward)):
        t_ref, t_ours = _best_pair(lambda: fn(ref, x, None), lambda: fn(ours, x, dt), repeat)
        rows.append(Row(name, f"{case} ncps / ours", t_ref / t_ours, "x",
                        f"ncps {1e3 * t_ref:.1f} ms, ours {1e3 * t_ours:.1f} ms"))
    return rows


def run(quick: bool = False) -> list[Row]:
    """Rows of speed-up ratios (ncps / ours) and the PDNA / CfC overhead."""
    torch.manual_seed(0)
    steps, repeat = (64, 2) if quick else (256, 7)
    x = torch.randn(BATCH, steps, FEATURES)
    ref_ltc = ncps.torch.LTC(FEATURES, AutoNCP(64, 8))
    ref_cfc = ncps.torch.CfC(FEATURES, 64)
    rows = _pair_rows(f"LTC AutoNCP(64,8) {BATCH}x{steps}x{FEATURES}", LTC.from_ncps(ref_ltc), ref_ltc, x, None,
                      repeat)
    rows += _pair_rows(f"CfC 64 units {BATCH}x{steps}x{FEATURES}", CfC.from_ncps(ref_cfc), ref_cfc, x, None, repeat)
    pdna = PDNA(FEATURES, 64, variant="E")
    cfc = pdna.cfc  # the same backbone with the same weights: the difference is the pulse + self-attend
    dt = torch.rand(BATCH, steps) + 0.5
    for case, fn in (("forward", _forward), ("forward+backward", _forward_backward)):
        t_cfc, t_pdna = _best_pair(lambda: fn(cfc, x, dt), lambda: fn(pdna, x, dt), 3 * repeat)
        rows.append(Row("PDNA (E) over CfC", f"{case} PDNA / CfC", t_pdna / t_cfc, "x",
                        f"CfC {1e3 * t_cfc:.1f} ms, PDNA {1e3 * t_pdna:.1f} ms"))
    return rows


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="64 steps, 2 repeats")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads for both sides (default 1)")
    parser.add_argument("--clock", choices=("cpu", "wall"), default="cpu", help="process CPU time or wall time")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    CLOCK["clock"] = args.clock
    title = f"LTC / CfC vs ncps, PDNA overhead ({args.threads} thread(s), {args.clock} time)"
    print_table(run(quick=args.quick), title=title)
