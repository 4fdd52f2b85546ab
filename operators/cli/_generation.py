"""Shared pieces of ``circuitop generate <problem>``: the options of a generator's parameters, made from their
fields (:func:`add_parameter_options`, read back by :func:`parameters`), the output's checks (writable,
room on the disk) with the set's size, a progress bar that estimates the time, and :func:`run_generation`:
one file streamed chunk by chunk, or ``--shards S`` files made on Dask with a manifest.

Library errors name the generator's parameters (``n_out: expected a divisor of n_sim=256``, a
:class:`~pde_data.core.params.ParameterError`); :func:`report_options` gives a problem's command the table that
names them by its options instead (``--n-out: ... --n-sim=256``).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import math
import sys
import typing
from pathlib import Path
from typing import Callable

from tqdm import tqdm

import pde_data
import pde_data.generate.registry
import pde_data.formats.manifest
import pde_data.generate.sharded
from operators.cli._remote import add_storage_option, use_storage_options
from operators.cli.train import parse_config, with_value
from operators.threads import add_threads_option, choose_threads, say
from pde_data.core import remote
from pde_data.core.params import BARE, library_name
from pde_data.core.room import check_room, format_bytes as _size
from pde_data.core.sweep import Sweep
from pde_data.formats import zarr_store
from pde_data.generate.defaults import PARAMS

__all__ = ["positive_int", "non_negative_int", "add_common_options", "add_parameter_options", "generation_spec",
           "add_pdebench_option", "report_options", "check_out", "announce", "progress_bar", "run_generation"]


def _number(number: type, accept: Callable[[float], bool], expected: str) -> Callable[[str], float]:
    """An argparse ``type``: ``number(text)`` if finite and accepted, else "expected ..., found ..." (argparse
    prints it after the option's name and exits 2); ``accept`` is its ``check``."""
    def parse(text: str):
        try:
            value = number(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {expected}, found {text!r}") from None
        if not (math.isfinite(value) and accept(value)):
            raise argparse.ArgumentTypeError(f"expected {expected}, found {text}")
        return value

    parse.__name__, parse.check = expected, accept
    return parse


def _number_or_range(number: type, accept: Callable[[float], bool], expected: str) -> Callable[[str], object]:
    """:func:`_number`, or a range ``LOW..HIGH[:log]`` of accepted numbers (a :class:`~pde_data.core.sweep.Sweep`:
    one value drawn per sample)."""
    plain = _number(number, accept, expected)

    def parse(text: str):
        sweep = Sweep.parse(text)
        if sweep is None:
            return plain(text)
        problem = sweep.problem()
        if problem is not None or not all(accept(v) for v in sweep.ends()):
            raise argparse.ArgumentTypeError(f"expected a range LOW..HIGH[:log] with {problem or 'each end ' + expected}"
                                             f", found {text}")
        return sweep

    parse.__name__ = f"{expected} or a range LOW..HIGH[:log]"
    return parse


positive_int = _number(int, lambda v: v > 0, "a positive integer")
non_negative_int = _number(int, lambda v: v >= 0, "an integer >= 0")


def add_common_options(p: argparse.ArgumentParser, *, n_default: int, seed_default: int = 0) -> None:
    """``--out PATH --n N --seed S --overwrite`` and the sharding options ``--shards --workers --scheduler``."""
    p.add_argument("--out", type=_out, required=True,
                   help="output file (NetCDF), or with --shards the set's folder (shards and manifest.json); with "
                        "--format zarr the store, a folder or a URL (s3://bucket/set.zarr; see --storage-option)")
    p.add_argument("--n", type=positive_int, default=n_default, help=f"number of samples (default {n_default})")
    p.add_argument("--seed", type=non_negative_int, default=seed_default, help=f"random seed (default {seed_default})")
    p.add_argument("--gen", nargs="+", action="extend", default=[], metavar="KEY=VALUE",
                   help="a generator parameter by its name, as `train --generate` takes it (repeatable; wins over its "
                        "own option), e.g. --gen n_grid=64")
    p.add_argument("--overwrite", action="store_true",
                   help="replace an existing --out file, or a set made with other parameters (default: refuse)")
    p.add_argument("--format", choices=("netcdf", "zarr"), default="netcdf", dest="out_format",
                   help="netcdf: one NetCDF-4 file; zarr: one Zarr v3 store (a folder or a URL), one sample per "
                        "chunk, blosc lz4, readable over HTTP (default netcdf)")
    add_threads_option(p)
    add_storage_option(p)
    g = p.add_argument_group("sharded generation on Dask (the same samples bit for bit, resumable)")
    g.add_argument("--shards", type=positive_int, default=None, metavar="S",
                   help="write the set as S shard files and a manifest into the folder --out (with --format zarr: S "
                        "regions of the one store), one Dask task each; re-running the command completes an "
                        "interrupted set")
    g.add_argument("--workers", type=positive_int, default=None, metavar="W",
                   help="worker processes of the local Dask cluster (default: one per core, at most S)")
    g.add_argument("--scheduler", default=None, metavar="ADDRESS",
                   help="submit to a running Dask scheduler (tcp://host:8786) instead of a local cluster")


#: the options (dests) named otherwise than the library's parameters they set (the others share their name)
_LIBRARY_NAMES = {"n_samples": "n", "n_records": "records", "n_frames": "frames", "folder": "out"}


def add_parameter_options(p: argparse.ArgumentParser, generator: str, help: dict[str, str]) -> None:
    """An option for each parameter of the ``generator`` named in ``help`` (in its order), made from its
    field in :data:`~pde_data.generate.defaults.PARAMS`: ``n_grid`` is ``--n-grid`` (unless :data:`_LIBRARY_NAMES`
    renames it), with the field's default and choices; a bool is a flag; a number is converted and checked against
    the field's range (:func:`_number`). ``help`` gives the texts; ``(default X)`` ends those that do not say it."""
    p.set_defaults(generator=generator)
    fields, hints = {f.name: f for f in dataclasses.fields(PARAMS[generator])}, typing.get_type_hints(PARAMS[generator])
    for name, text in help.items():
        option, meta = "--" + _LIBRARY_NAMES.get(name, name).replace("_", "-"), fields[name].metadata
        if hints[name] is bool:
            p.add_argument(option, action="store_true", default=fields[name].default, help=text)
            continue
        if "choices" in meta:
            check = {"choices": meta["choices"]}
        else:  # int, float, int | None or float | Sweep: converted as the number (or a range), checked by its range
            kinds = typing.get_args(hints[name]) or (hints[name],)
            number = next(t for t in kinds if t is not type(None))
            make = _number_or_range if Sweep in kinds else _number
            check = {"type": make(number, meta["check"], meta["expected"]) if "check" in meta else number}
            text += "; or a range LOW..HIGH[:log], one value drawn per sample" if Sweep in kinds else ""
        text = text if "default" in text else text + " (default %(default)s)"
        p.add_argument(option, default=fields[name].default, help=text, **check)


def generation_spec(args: argparse.Namespace) -> pde_data.GenerationSpec:
    """The set a problem's options describe: its generator's parameters as its options
    (:func:`add_parameter_options`) and ``--gen KEY=VALUE`` set them, ``--n`` and ``--seed``."""
    fields = dataclasses.fields(PARAMS[args.generator])
    params = {f.name: getattr(args, _LIBRARY_NAMES.get(f.name, f.name)) for f in fields}
    return pde_data.GenerationSpec(args.generator, args.n, args.seed, {**params, **parse_config(args.gen, "--gen")})


def report_options(p: argparse.ArgumentParser, **aliases: str) -> None:
    """Give ``p`` the table that names the library's parameters by its options in its errors (``option_names``,
    which :func:`operators.cli.message` uses): a parameter is its option's ``dest``, one of
    :data:`_LIBRARY_NAMES`, or one of ``aliases`` (parameter -> dest); others keep the library's name."""
    options = {a.dest: a.option_strings[0] for a in p._actions if a.option_strings}
    library = {**_LIBRARY_NAMES, **aliases}
    names = {**options, **{name: options[dest] for name, dest in library.items() if dest in options}}
    p.set_defaults(option_names=functools.partial(option_name, names))


def option_name(names: dict[str, str], path: str, value: object = BARE) -> str:
    """Parameter ``path`` (given ``value``) as its option in ``names``, else as the library names it."""
    return with_value(names[path], value) if path in names else library_name(path, value)


def check_out(path: Path, *, overwrite: bool) -> Path:
    """:func:`pde_data.check_output` (nothing there without ``--overwrite``; a file can be created in the
    folder), its errors naming ``--out``."""
    from operators.cli import message

    try:
        return pde_data.check_output(path, overwrite=overwrite)
    except (OSError, ValueError) as exc:
        raise ValueError(f"--out: {message(exc)}") from exc


def _check_folder(folder: Path) -> Path:
    """The shards' folder: created, and a file can be written there (else one line naming ``--out``)."""
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"--out: expected a folder for the shards with --shards, found a file {folder}")
    check_out(folder / pde_data.formats.manifest.MANIFEST, overwrite=True)
    return folder


#: bytes of a sample's index (the int64 ``sample`` coordinate)
_SAMPLE_INDEX = 8


def announce(path: Path | str, n_samples: int, *, sample_bytes: int) -> None:
    """Say on stderr how many samples and bytes (before compression) go to ``path``: ``sample_bytes`` of
    variables and the index per sample; refuse a set larger than the free space of ``path``'s folder (a URL's
    server reports no free space: its write fails where it fails)."""
    nbytes = n_samples * (sample_bytes + _SAMPLE_INDEX)
    if not remote.is_url(path):
        check_room(path.parent, nbytes, what=f"{n_samples} samples ({_size(nbytes)} before compression)",
                   advice="lower --n or choose another folder", name="--out")
    print(f"{remote.display(str(path))}: {n_samples} samples, {_size(nbytes)} before compression", file=sys.stderr)


def _duration(seconds: float) -> str:
    """``90`` -> ``"1.5 min"``."""
    if seconds < 60:
        return f"{seconds:.2g} s"
    return f"{seconds / 60:.3g} min" if seconds < 3600 else f"{seconds / 3600:.3g} h"


def add_pdebench_option(p: argparse.ArgumentParser, layout: str, variables: list[str] | None = None) -> None:
    """``--pdebench``: write PDEBench's HDF5 group ``layout`` (``variables`` as its channels, default every
    variable with a time dim) instead of NetCDF."""
    p.add_argument("--pdebench", action="store_true",
                   help=f"write PDEBench's HDF5 layout ('{layout}': groups '0000'.., data (T, X, Y, C)) instead of NetCDF")
    p.set_defaults(pdebench_layout=layout, pdebench_variables=variables)


def run_generation(args: argparse.Namespace, *, device: str | None = None) -> int:
    """Make the set the options describe (:func:`generation_spec`) as they say: with ``--shards``, the set's folder
    on Dask (:func:`pde_data.generate_sharded`), or with ``--format zarr`` one store written by Dask tasks
    (:func:`pde_data.generate_zarr_sharded`); else one file streamed chunk by chunk (NetCDF, the PDEBench layout
    with ``--pdebench``, or a Zarr store). The output is checked (writable, room on a local disk) before anything is
    computed."""
    say(choose_threads(args.threads))
    use_storage_options(args)
    spec, layout = generation_spec(args), args.pdebench_layout if getattr(args, "pdebench", False) else None
    zarr = args.out_format == "zarr"
    if zarr and layout is not None:
        raise ValueError("--format zarr: expected the data model's variables; --pdebench writes PDEBench's HDF5 "
                         "layout (leave out one of them)")
    if remote.is_url(args.out) and not zarr:
        raise ValueError(f"--out: a URL takes --format zarr (a Zarr store written by range of samples), found "
                         f"{remote.display(args.out)} with --format {args.out_format}")
    if args.workers is not None and args.scheduler is not None:
        raise ValueError("--workers: expected either --workers (a local cluster) or --scheduler, found both")
    if args.shards is None:
        for option in ("workers", "scheduler"):
            if getattr(args, option) is not None:
                raise ValueError(f"--{option}: expected with --shards (the Dask options shard the set), found it alone")
        check = _check_store if zarr else check_out
        path = check(args.out, overwrite=args.overwrite)
        announce(path, spec.n, sample_bytes=pde_data.generate.registry.sample_bytes(spec))
        with progress_bar(spec.n, unit="sample", desc=spec.name) as bar:
            pde_data.write_samples(spec, range(spec.n), path, pdebench_layout=layout,
                                   pdebench_variables=getattr(args, "pdebench_variables", None), zarr=zarr,
                                   device=device, progress=lambda done: bar.update(done - bar.n))
        written_as = f"PDEBench {layout} layout" if layout else "a Zarr v3 store" if zarr else "NetCDF"
        print(f"wrote {remote.display(str(path))}: {spec.n} samples ({written_as})")
        return 0
    if layout is not None:
        raise ValueError("--pdebench: expected one output file; shards are NetCDF (leave out --shards, or --pdebench)")
    pde_data.generate.sharded.plan_shards(spec, args.shards)  # the shard count checked before the folder is made
    if zarr:
        out, make = _check_sharded_store(args.out), pde_data.generate_zarr_sharded
    else:
        out, make = _check_folder(args.out), pde_data.generate_sharded
    announce(out / "shard-*.nc" if not zarr else out, spec.n,
             sample_bytes=pde_data.generate.registry.sample_bytes(spec))
    with progress_bar(spec.n, unit="sample", desc=f"{spec.name} on Dask") as bar:
        def show(info) -> None:
            bar.update(info["done"] - bar.n)
            bar.set_postfix_str(f"{info['workers']} workers, {info['retries']} retries", refresh=False)

        manifest = make(spec, out, shards=args.shards, workers=args.workers, scheduler=args.scheduler,
                        overwrite=args.overwrite, device=device, progress=show)
    where = ("one Zarr v3 store, manifest in its attributes" if zarr else
             f"manifest {out / pde_data.formats.manifest.MANIFEST}")
    print(f"wrote {remote.display(str(out))}: {spec.n} samples in {len(manifest.shards)} shards "
          f"({_size(manifest.bytes)}), {where}")
    return 0


def _out(text: str) -> Path | str:
    """``--out``: a URL as it is, else a local path."""
    return text if remote.is_url(text) else Path(text)


def _check_sharded_store(out: Path | str) -> Path | str:
    """``out`` as a sharded Zarr store: a URL as it is (the library refuses what is there but no store); a local
    path whose folder is writable."""
    if not remote.is_url(out):
        check_out(out.with_name(f".{out.name}.probe"), overwrite=True)  # writable (nothing is left there)
    return out


def _check_store(out: Path | str, *, overwrite: bool) -> Path | str:
    """``out`` as a Zarr store to write: nothing there, or with ``--overwrite`` a Zarr store (never another folder or a
    file); a local one's folder writable."""
    found, shown = zarr_store.state(str(out)), remote.display(str(out))
    if found == "other":
        raise ValueError(f"--out: expected a new Zarr store, found an existing file or folder {shown} that is no "
                         "Zarr store; it is left as it is")
    if found == "store" and not overwrite:
        raise ValueError(f"--out: expected a new Zarr store, found the store {shown}; pass --overwrite to replace it")
    return _check_sharded_store(out)


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
                       f"{_duration(now)} of it done", file=sys.stderr)
            self._estimated = True
        return shown


#: seconds of progress, after the first update, that the time estimate is extrapolated from
_PROBE = 2.0


def progress_bar(total: float, *, unit: str, desc: str) -> tqdm:
    """A progress bar on stderr over ``total`` ``unit``s that estimates the whole time at its first update; in a
    log (stderr not a terminal) redrawn once a minute, not many times a second."""
    return _EstimatingBar(total=total, unit=unit, file=sys.stderr, desc=desc, dynamic_ncols=True,
                          mininterval=0.1 if sys.stderr.isatty() else 60.0)
