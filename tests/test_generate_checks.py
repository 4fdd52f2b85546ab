"""``circuitop generate``: every option's bad value named, the output proven writable and the set's size
announced (and refused past the free disk) before anything is computed, the time estimated, laptop defaults."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

import pde_data
from pde_data.core.params import param
from pde_data.generate.defaults import PARAMS
from pde_data.generate.registry import sample_bytes
from cli_run import run_cli
from operators.cli import _generation, build_parser, main

#: the checks of the numeric options that set no generator parameter (--n, --seed, --shards, --workers, --sizes)
COMMON = {_generation.positive_int, _generation.non_negative_int}
#: numeric options whose range the library checks (its message is reported under the option's name)
LIBRARY_CHECKED = {("digits", "--gap")}


def _commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices


PROBLEMS = _commands(_commands(build_parser())["generate"])  # every generator: name -> its parser


def _numeric_options(problems=PROBLEMS):
    """``(problem, option, type, nargs, dest)`` of each option taking numbers (a checked type has a ``check``)."""
    for problem, parser in problems.items():
        for action in parser._actions:
            if action.option_strings and (action.type in (int, float) or hasattr(action.type, "check")):
                yield problem, action.option_strings[0], action.type, action.nargs or 1, action.dest


def _unchecked(problems) -> set[tuple[str, str]]:
    """The numeric options not checked by the command line as they should be: one setting a generator parameter
    by its field's range (its type made from the field's ``check`` and ``expected``), another by :data:`COMMON`."""
    unchecked = set()
    for problem, option, kind, _, dest in _numeric_options(problems):
        fields = {_generation._LIBRARY_NAMES.get(f.name, f.name): f for f in dataclasses.fields(PARAMS[problem])}
        if dest not in fields:
            checked = kind in COMMON
        else:
            ranged = fields[dest].metadata
            checked = (getattr(kind, "check", None), kind.__name__) == (ranged.get("check", 0), ranged.get("expected"))
        if not checked:
            unchecked.add((problem, option))
    return unchecked


def test_every_numeric_option_is_checked_by_its_field():
    assert _unchecked(PROBLEMS) == LIBRARY_CHECKED


def test_an_option_without_its_field_s_check_is_found(monkeypatch):
    """The check above fails for a parameter's option typed by hand (even with the same range) and for one whose
    field has no range."""
    by_hand = argparse.ArgumentParser()
    by_hand.add_argument("--n-grid", type=_generation.positive_int)
    _generation.add_parameter_options(by_hand, "darcy", {"beta": "forcing"})
    assert _unchecked({"darcy": by_hand}) == {("darcy", "--n-grid")}
    monkeypatch.setitem(PARAMS, "darcy", dataclasses.make_dataclass("DarcyParams", [
        ("n_grid", int, 128), ("beta", float, param(1.0, "a positive number", lambda v: v > 0))], frozen=True))
    unranged = argparse.ArgumentParser()
    _generation.add_parameter_options(unranged, "darcy", {"n_grid": "cells", "beta": "forcing"})
    assert _unchecked({"darcy": unranged}) == {("darcy", "--n-grid")}


@pytest.mark.parametrize("problem, option, kind, nargs, dest",
                         [case for case in _numeric_options() if hasattr(case[2], "check")])
def test_a_bad_number_names_its_option(tmp_path, capsys, problem, option, kind, nargs, dest):
    """Negative (and, where positive is expected, zero) values: argparse's one error line names the option,
    what it expected and what it found; exit status 2; nothing written."""
    bad = ["-64", "abc"] + ([] if kind.check(0) else ["0"])
    for value in bad:
        with pytest.raises(SystemExit) as exit_:
            main(["generate", problem, "--out", str(tmp_path / "x.nc"), option, *["1"] * (nargs - 1), value])
        assert exit_.value.code == 2
        lines = capsys.readouterr().err.strip().splitlines()
        found = value if value != "abc" else repr(value)
        assert len(lines) == 1, lines  # one line, not argparse's usage block first
        assert f"error: argument {option}: expected {kind.__name__}, found {found} (--help" in lines[0], lines
    assert not list(tmp_path.iterdir())


def test_the_command_names_the_option_as_a_subprocess(tmp_path):
    done = run_cli("generate", "ns", "--out", tmp_path / "ns.nc", "--n-sim", "-64")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == ["circuitop generate ns: error: argument --n-sim: expected a positive "
                                                "integer, found -64 (--help for usage)"]


@pytest.mark.parametrize("args, message", [
    (["ns", "--n-sim", 16, "--n-out", 6], "--n-out: expected a divisor of --n-sim=16, found 6"),
    (["ns", "--n-sim", 2, "--n-out", 2], "--n-sim: expected an even grid size n >= 4, found n=2"),
    (["ns", "--t-final", 2.5], "--records: required unless --t-final is a whole number >= 1, found --t-final=2.5"),
    (["swe", "--n-grid", 2], "--n-grid: expected at least 4 cells per side, found 2"),
    (["swe", "--frames", 1], "--frames: expected an integer >= 2"),
    (["poisson", "--K", 4, "--n-grid", 5], "--n-grid: expected at least K + 2 = 6 points"),
    (["degradation", "--min-length", 5, "--max-length", 3],
     "--min-length, --max-length: expected 1 <= --min-length <= --max-length, found 5, 3"),
    (["digits", "--gap", -0.5], "--gap: expected a fraction in [0, 1), found -0.5"),
])
def test_library_checks_name_the_options(tmp_path, capsys, args, message):
    """Constraints between options, checked by the library, come back in one line under the options' names."""
    tiny = ["--n", 2, "--device", "cpu"] if args[0] in ("ns", "swe") else ["--n", 2] if args[0] != "digits" else []
    assert main(["generate", args[0], "--out", str(tmp_path / "x.nc"), *map(str, tiny), *map(str, args[1:])]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(f"circuitop generate: error: {message}") and "Traceback" not in "".join(err)
    assert not (tmp_path / "x.nc").exists()


def test_parameters_are_named_by_the_table_and_the_rest_as_the_library_names_them():
    """The error carries its parameters as data: those the table knows become options, the others (and the
    text around them) stay as the library wrote them."""
    from functools import partial

    from pde_data.core.params import ParameterError

    name = partial(_generation.option_name, {"n_out": "--n-out", "n_sim": "--n-sim", "n": "--n"})
    error = ParameterError("n_out", "a divisor of {n_sim=8}", "3", ["n_sim"])
    assert str(error) == "n_out: expected a divisor of n_sim=8, found 3"
    assert error.describe(name) == "--n-out: expected a divisor of --n-sim=8, found 3"
    assert ParameterError(("n_out", "first_sample"), ">= 1", "0").describe(name) == \
        "--n-out, first_sample: expected >= 1, found 0"
    unmarked = "expected {n} >= 4 in /tmp/{n_sim}"  # braces that mark no mention stay as they are
    assert ParameterError("w0", unmarked).describe(name) == f"w0: {unmarked}"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/sys is Linux's")
def test_an_unwritable_output_fails_before_anything_is_computed(tmp_path):
    """``/sys`` refuses new files even to root (where permission bits allow everything): the defaults,
    minutes of simulation, end at once with one line naming --out."""
    start = time.perf_counter()
    done = run_cli("generate", "ns", "--out", "/sys/ns.h5", timeout=120)
    assert done.returncode == 1 and time.perf_counter() - start < 60
    errors = [line for line in done.stderr.splitlines() if "error" in line]
    assert len(errors) == 1 and errors[0].startswith("circuitop generate: error: --out: /sys: expected a folder")
    assert "samples" not in done.stderr and "estimated" not in done.stderr
    start = time.perf_counter()  # the check itself, without the interpreter's start-up
    assert main(["generate", "ns", "--out", "/sys/ns.h5"]) == 1
    assert time.perf_counter() - start < 1.0


def test_check_output_proves_writing_with_the_writers_temporary_file(tmp_path, monkeypatch):
    """``check_output`` creates (and removes) the very file :func:`pde_data.atomic_path` writes to; a folder
    where that fails is refused whatever its permission bits say."""
    made = []
    real = tempfile.mkstemp

    def mkstemp(**kwargs):
        made.append(real(**kwargs)[1])
        return os.open(made[-1], os.O_RDWR), made[-1]

    monkeypatch.setattr(tempfile, "mkstemp", mkstemp)
    pde_data.check_output(tmp_path / "a.nc")
    with pde_data.atomic_path(tmp_path / "a.nc") as tmp:
        tmp.write_text("x")
    assert [Path(p).name.split(".")[1:2] for p in made] == [["a"], ["a"]] and all(p.endswith(".tmp") for p in made)
    assert [p.name for p in tmp_path.iterdir()] == ["a.nc"]  # the probe is gone
    monkeypatch.setattr(tempfile, "mkstemp", lambda **kwargs: (_ for _ in ()).throw(PermissionError(13, "Denied")))
    with pytest.raises(ValueError, match=r"expected a folder this process can write b.nc into, .*\(Denied\)"):
        pde_data.check_output(tmp_path / "b.nc")


def test_a_set_larger_than_the_free_disk_is_refused_before_computing(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(pde_data.core.room.shutil, "disk_usage", lambda path: SimpleNamespace(free=1000))
    monkeypatch.setattr(pde_data, "generate_darcy", lambda *a, **k: pytest.fail("computed before the disk check"))
    assert main(["generate", "darcy", "--out", str(tmp_path / "d.nc"), "--n", "5", "--n-grid", "16"]) == 1
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"--out: expected room for 5 samples (20.5 kB before compression), found 1 kB free in {tmp_path}" in line
    assert not list(tmp_path.iterdir())


TINY = {
    "order": ["--n", 3, "--n-points", 128],
    "poisson": ["--n", 3, "--K", 4, "--n-grid", 16],
    "darcy": ["--n", 3, "--n-grid", 12],
    "ns": ["--n", 3, "--n-sim", 16, "--n-out", 8, "--t-final", 0.5, "--records", 2, "--dt", 0.05, "--record-initial",
           "--dtype", "float64", "--device", "cpu"],
    "swe": ["--n", 3, "--n-grid", 12, "--t-final", 0.2, "--frames", 3, "--momenta", "--device", "cpu"],
    "degradation": ["--n", 3, "--min-length", 4, "--max-length", 7],
}


@pytest.mark.parametrize("problem", sorted(TINY))
def test_the_announced_size_is_the_sets_size(tmp_path, capsys, problem):
    """The size printed before computing (from the options alone) is the bytes of the variables along
    ``sample`` in the set written."""
    args = ["generate", problem, "--out", str(tmp_path / "x.nc"), *map(str, TINY[problem])]
    assert main(args) == 0
    with pde_data.open_source(tmp_path / "x.nc").dataset as ds:
        nbytes = sum(v.nbytes for v in ds.variables.values() if "sample" in v.dims)
    assert f"x.nc: 3 samples, {_generation._size(nbytes)} before compression" in capsys.readouterr().err
    assert 3 * (sample_bytes(_generation.generation_spec(build_parser().parse_args(args))) + 8) == nbytes


def test_the_time_is_estimated_from_the_first_chunks(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(_generation, "_PROBE", 0.0)
    assert main(["generate", "order", "--out", str(tmp_path / "o.nc"), "--n", "3000", "--n-points", "128"]) == 0
    err = capsys.readouterr().err
    assert err.count("order: estimated ") == 1 and "to compute" in err


def test_the_defaults_are_laptop_sized():
    """Each generator's default set holds at most 2 GB before compression, and ns's defaults simulate no more
    than 32 samples x 20 time units at dt 1e-3 on 128² (measured on 2 shared cores: ns 4-9 min, swe 20 s,
    darcy 75 s, the others seconds; the old ns defaults were about 4 days)."""
    for problem in TINY:
        args = build_parser().parse_args(["generate", problem, "--out", "x.nc"])
        assert args.n * sample_bytes(_generation.generation_spec(args)) <= 2e9, problem
    ns = build_parser().parse_args(["generate", "ns", "--out", "x.nc"])
    assert ns.n * ns.t_final / ns.dt * ns.n_sim**2 <= 32 * 20 / 1e-3 * 128**2  # time steps x grid points
