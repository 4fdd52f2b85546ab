"""Shared pieces of ``circuitop generate <problem>``: checked numeric options, the output's checks (writable,
room on the disk) with the set's size, a progress bar that estimates the time, shards, atomic output.

Library errors name the generator's parameters (``n_out: expected a divisor of n_sim=256``);
:func:`report_options` makes a problem's command name its options instead (``--n-out: ... --n-sim=256``).
"""

from __future__ import annotations

import argparse
import functools
import math
import re
import shutil
import sys
from pathlib import Path
from typing import Callable

import xarray as xr
from tqdm import tqdm

import pde_data

__all__ = ["positive_int", "non_negative_int", "positive_float", "non_negative_float", "add_common_options",
           "add_pdebench_option", "report_options", "selected_samples", "check_out", "announce", "output_path",
           "write", "progress_bar", "generate_chunked"]


def _number(kind: type, accept: Callable[[float], bool], expected: str) -> Callable[[str], float]:
    """An argparse ``type``: ``kind(text)`` if finite and accepted, else "expected ..., found ..." (argparse
    prints it after the option's name and exits 2)."""
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {expected}, found {text!r}") from None
        if not (math.isfinite(value) and accept(value)):
            raise argparse.ArgumentTypeError(f"expected {expected}, found {text}")
        return value

    parse.__name__ = expected
    return parse


positive_int = _number(int, lambda v: v > 0, "a positive integer")
non_negative_int = _number(int, lambda v: v >= 0, "an integer >= 0")
positive_float = _number(float, lambda v: v > 0, "a positive number")
non_negative_float = _number(float, lambda v: v >= 0, "a number >= 0")


def add_common_options(p: argparse.ArgumentParser, *, n_default: int, seed_default: int = 0) -> None:
    """``--out PATH --n N --seed S --shard i/n --overwrite``."""
    p.add_argument("--out", type=Path, required=True, help="output NetCDF file (shards get -00003 suffixes)")
    p.add_argument("--n", type=positive_int, default=n_default, help=f"number of samples (default {n_default})")
    p.add_argument("--seed", type=non_negative_int, default=seed_default, help=f"random seed (default {seed_default})")
    p.add_argument("--shard", type=_shard, default=None, metavar="i/n",
                   help="write only shard i of n (samples split contiguously; same bytes as the full set)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --out file (default: refuse)")


def _shard(text: str) -> tuple[int, int]:
    """argparse type: :func:`pde_data.parse_shard` with its own message, naming ``shard`` (argparse would
    print "invalid parse_shard value")."""
    try:
        return pde_data.parse_shard(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


#: the library's names for what the common options set (the others share their option's name)
_LIBRARY_NAMES = {"n_samples": "n", "n_records": "records", "n_frames": "frames"}


def report_options(p: argparse.ArgumentParser, **aliases: str) -> None:
    """Make ``p``'s ``func`` report the library's parameter errors under option names.

    A ``ValueError`` whose message starts with parameter names (``n_out: expected a divisor of n_sim=256,
    found 6``) is raised again as ``--n-out: expected a divisor of --n-sim=256, found 6``. A parameter is
    its option's ``dest``, one of :data:`_LIBRARY_NAMES`, or one of ``aliases`` (parameter -> dest).
    """
    options = {a.dest: a.option_strings[0] for a in p._actions if a.option_strings}
    library = {**_LIBRARY_NAMES, **aliases}
    names = {**options, **{name: options[dest] for name, dest in library.items() if dest in options}}
    run = p.get_default("func")

    @functools.wraps(run)
    def run_naming_options(args: argparse.Namespace) -> int:
        try:
            return run(args)
        except ValueError as exc:
            text = _named_options(str(exc), names)
            if text == str(exc):
                raise
            raise ValueError(text) from exc

    p.set_defaults(func=run_naming_options)


def _named_options(text: str, names: dict[str, str]) -> str:
    """``text`` with its leading parameter names, and the parameters with an ``_`` after them, as options;
    ``text`` itself unless all its leading names are known."""
    head, sep, rest = text.partition(": ")
    params = head.split(", ")
    if not sep or not all(p in names for p in params):
        return text
    rest = re.sub(r"\b\w*_\w*\b", lambda m: names.get(m.group(), m.group()), rest)
    return ", ".join(names[p] for p in params) + sep + rest


def check_out(path: Path, *, overwrite: bool) -> Path:
    """:func:`pde_data.check_output` (nothing there without ``--overwrite``; a file can be created in the
    folder), its errors naming ``--out``."""
    try:
        return pde_data.check_output(path, overwrite=overwrite)
    except (OSError, ValueError) as exc:
        raise type(exc)(f"--out: {exc}") from exc


def selected_samples(args: argparse.Namespace, *, sample_bytes: int) -> range:
    """The sample indices this invocation generates (all, or the shard's slice), after checking the output
    path (:func:`check_out`) and the room for ``sample_bytes`` per sample (:func:`announce`), so nothing is
    computed for an output that could not be written."""
    path = check_out(output_path(args), overwrite=args.overwrite)
    samples = range(args.n) if args.shard is None else pde_data.shard_range(args.n, *args.shard)
    announce(path, len(samples), sample_bytes=sample_bytes)
    return samples


#: bytes of a sample's index (the int64 ``sample`` coordinate)
_SAMPLE_INDEX = 8


def announce(path: Path, n_samples: int, *, sample_bytes: int) -> None:
    """Say on stderr how many samples and bytes (before compression) go to ``path``: ``sample_bytes`` of
    variables and the index per sample; refuse a set larger than the free space of ``path``'s folder."""
    nbytes = n_samples * (sample_bytes + _SAMPLE_INDEX)
    free = shutil.disk_usage(path.parent).free
    if nbytes > free:
        raise ValueError(f"--out: expected room for {n_samples} samples ({_size(nbytes)} before compression), "
                         f"found {_size(free)} free in {path.parent}; lower --n or choose another folder")
    print(f"{path}: {n_samples} samples, {_size(nbytes)} before compression", file=sys.stderr)


def _size(nbytes: float) -> str:
    """``1234567`` -> ``"1.23 MB"``."""
    for unit in ("B", "kB", "MB", "GB"):
        if nbytes < 1000:
            break
        nbytes /= 1000
    else:
        unit = "TB"
    return f"{nbytes:.3g} {unit}"


def _duration(seconds: float) -> str:
    """``90`` -> ``"1.5 min"``."""
    if seconds < 60:
        return f"{seconds:.2g} s"
    return f"{seconds / 60:.3g} min" if seconds < 3600 else f"{seconds / 3600:.3g} h"


def output_path(args: argparse.Namespace) -> Path:
    """``--out`` itself, or its shard name ``name-0000i.nc``."""
    return args.out if args.shard is None else pde_data.shard_path(args.out, args.shard[0])


def add_pdebench_option(p: argparse.ArgumentParser, layout: str) -> None:
    """``--pdebench``: write PDEBench's HDF5 ``layout`` instead of NetCDF (see :func:`write`)."""
    p.add_argument("--pdebench", action="store_true",
                   help=f"write PDEBench's HDF5 layout ('{layout}': groups '0000'.., data (T, X, Y, C)) instead of NetCDF")
    p.set_defaults(pdebench_layout=layout)


def write(ds: xr.Dataset, args: argparse.Namespace, *, variables: list[str] | None = None) -> Path:
    """Save atomically to the output path (NetCDF, or with ``--pdebench`` the problem's PDEBench layout,
    ``variables`` only) and print where it went."""
    if getattr(args, "pdebench", False):
        path = pde_data.write_pdebench(ds, output_path(args), layout=args.pdebench_layout, variables=variables)
        print(f"wrote {path}: {dict(ds.sizes)} (PDEBench {args.pdebench_layout} layout)")
        return path
    path = pde_data.save(ds, output_path(args))
    print(f"wrote {path}: {dict(ds.sizes)}")
    return path


class _EstimatingBar(tqdm):
    """A tqdm bar that prints one line with the estimated time of the whole computation once it is known:
    the rate measured from the first update (start-up costs excluded) over at least :data:`_PROBE` seconds."""

    _probe_start: tuple[float, float] | None = None  # (elapsed seconds, progress) at the first update
    _estimated = False

    def update(self, n: float = 1) -> bool | None:
        shown = super().update(min(n, self.total - self.n))  # sums of float time steps overshoot by round-off
        now = self.format_dict["elapsed"]
        if self._probe_start is None:
            self._probe_start = (now, self.n)
            return shown
        (then, before), done = self._probe_start, self.n
        if not self._estimated and now - then >= _PROBE and before < done < self.total:
            rate = (done - before) / (now - then)
            self.write(f"{self.desc}: estimated {_duration(now + (self.total - done) / rate)} to compute, "
                       f"{_duration(now)} of it done (writing the file comes after)", file=sys.stderr)
            self._estimated = True
        return shown


#: seconds of progress, after the first update, that the time estimate is extrapolated from
_PROBE = 2.0


def progress_bar(total: float, *, unit: str, desc: str) -> tqdm:
    """A progress bar on stderr over ``total`` ``unit``s that estimates the whole time at its first update."""
    return _EstimatingBar(total=total, unit=unit, file=sys.stderr, desc=desc, dynamic_ncols=True)


def generate_chunked(make: Callable[[range], xr.Dataset], samples: range, *, desc: str,
                     chunk_size: int = 64) -> xr.Dataset:
    """``make(sub_range)`` chunk by chunk under a :func:`progress_bar`, concatenated along ``sample``.

    For generators that seed each sample on its own, the result does not depend on ``chunk_size``.
    """
    parts = []
    with progress_bar(len(samples), unit="sample", desc=desc) as bar:
        for start in range(samples.start, samples.stop, chunk_size):
            parts.append(make(range(start, min(start + chunk_size, samples.stop))))
            bar.update(parts[-1].sizes["sample"])
    if len(parts) == 1:
        return parts[0]
    return xr.concat(parts, dim="sample", data_vars="minimal", coords="minimal", compat="override", join="exact")
