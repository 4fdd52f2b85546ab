"""``train --config-file``: every run writes its settings as ``config.yaml``; feeding that file back
(into another ``--out``) trains the same run again, to identical weights; flags on the command line win;
a bad file is one line naming what is wrong."""

import torch
import yaml

from operators.training import load_checkpoint
from test_trainer import write_poisson
from cli_run import run_cli as _cli


def test_a_runs_config_file_trains_it_again(tmp_path):
    data = write_poisson(tmp_path / "p.nc", n_samples=12)
    first = _cli("train", "--data", data, "--model", "fno", "--out", tmp_path / "a", "--input", "f", "--target", "u",
                 "--split", "8,2,2", "--epochs", "2", "--batch-size", "4", "--lr", "3e-3", "--config", "n_modes=4",
                 "width=8", "n_layers=2", "--workers", "0", "--threads", "1", "--no-progress")
    assert first.returncode == 0, first.stderr
    recorded = yaml.safe_load((tmp_path / "a" / "config.yaml").read_text())
    assert recorded["lr"] == 3e-3 and recorded["config"]["width"] == 8 and recorded["split"] == [8, 2, 2]
    assert "out" not in recorded and recorded["epochs"] == 2
    again = _cli("train", "--config-file", tmp_path / "a" / "config.yaml", "--out", tmp_path / "b", "--no-progress")
    assert again.returncode == 0, again.stderr
    a, b = (load_checkpoint(tmp_path / d / "last.pt") for d in ("a", "b"))
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])
    longer = _cli("train", "--config-file", tmp_path / "a" / "config.yaml", "--out", tmp_path / "c", "--epochs", "3",
                  "--no-progress")  # a flag on the command line wins over the file
    assert longer.returncode == 0, longer.stderr
    assert load_checkpoint(tmp_path / "c" / "last.pt")["epoch"] == 3


def test_bad_config_files_are_one_line_errors(tmp_path):
    (tmp_path / "bad.yaml").write_text("lr: [1, 2\n")
    (tmp_path / "unknown.yaml").write_text("learning_rate: 0.1\n")
    for name, expected in (("bad.yaml", "expected YAML, found a syntax error"),
                           ("unknown.yaml", "expected keys among train's flags"),
                           ("missing.yaml", "found no file at")):
        done = _cli("train", "--config-file", tmp_path / name, "--out", tmp_path / "run")
        assert done.returncode != 0 and expected in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "run").exists()
