"""The console command as a user runs it: a real subprocess."""

import subprocess
import sys

import numpy as np
import xarray as xr

import pde_data


def circuitop(*args, check=False):
    return subprocess.run([sys.executable, "-m", "operators.cli", *args], capture_output=True, text=True,
                          check=check, timeout=120)


def test_help_lists_subcommands():
    out = circuitop("--help", check=True).stdout
    for name in ("generate", "train", "evaluate", "bench", "info"):
        assert name in out


def test_info_reports_versions_device_and_threads():
    out = circuitop("info", check=True).stdout
    assert "torch: 2." in out and "device: " in out and "torch threads: " in out


def test_info_describes_a_data_file(tmp_path):
    ds = xr.Dataset({"a": (("sample", "x", "y"), np.zeros((2, 4, 4)))}, attrs={"seed": 3})
    pde_data.save(ds, tmp_path / "a.nc")
    out = circuitop("info", str(tmp_path / "a.nc"), check=True).stdout
    assert "family: field" in out and "attr seed: 3" in out


def _assert_one_line_error(result, *fragments):
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    for fragment in fragments:
        assert fragment in lines[0]
    assert "Traceback" not in result.stderr


def test_bad_inputs_give_one_line_errors(tmp_path):
    _assert_one_line_error(circuitop("info", str(tmp_path / "missing.nc")), "no such file", "missing.nc")
    (tmp_path / "notes.nc").write_text("not a netcdf file")
    _assert_one_line_error(circuitop("info", str(tmp_path / "notes.nc")), "expected a NetCDF, HDF5 (PDEBench, The Well), torch")
    xr.Dataset({"q": (("a", "b"), np.zeros((2, 2)))}).to_netcdf(tmp_path / "odd.nc")
    _assert_one_line_error(circuitop("info", str(tmp_path / "odd.nc")), "expected a 'sample' dim", "('a', 'b')")


def test_debug_shows_the_traceback(tmp_path):
    result = circuitop("--debug", "info", str(tmp_path / "missing.nc"))
    assert result.returncode != 0 and "Traceback" in result.stderr


def test_the_command_ends_without_the_interpreter_teardown_but_after_its_work(tmp_path):
    """``exit_now`` (what the command ends with): the status kept, a thread that is not a daemon finished, the
    atexit handlers run and the output flushed, before the process ends without freeing its modules."""
    script = ("import atexit, threading, time, pathlib, sys\n"
              "from operators.cli import exit_now\n"
              f"out = pathlib.Path({str(tmp_path)!r})\n"
              "atexit.register(lambda: print('atexit ran'))\n"
              "threading.Thread(target=lambda: (time.sleep(0.5), (out / 'late').write_text('done'))).start()\n"
              "from concurrent.futures import ThreadPoolExecutor\n"
              "ThreadPoolExecutor(1).submit(time.sleep, 0.1).result()  # its idle worker: stopped, not waited on\n"
              "print('buffered', end='')\n"
              "sys.stderr.write('said')\n"
              "exit_now(3)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 3 and (tmp_path / "late").read_text() == "done"
    assert done.stdout == "bufferedatexit ran\n" and done.stderr == "said"


def test_usage_errors_and_help_keep_their_status():
    assert circuitop("--no-such-option").returncode == 2
    assert circuitop("--help").returncode == 0
