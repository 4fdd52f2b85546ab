"""The run spec as a file: every run writes ``config.yaml`` (the spec as asked) and ``run.json`` (resolved);
``config.yaml → RunSpec → config.yaml`` round-trips exactly; feeding it back (into another ``--out``) trains
the same run again, to identical weights; options on the command line win; a bad file is one line."""

import pytest
import torch
import yaml

from operators.training import DataSpec, ModelSpec, RunSpec, SpecError, load_checkpoint
from test_trainer import write_poisson
from cli_run import run_cli as _cli


def test_config_yaml_round_trips_exactly(tmp_path):
    spec = RunSpec(data=DataSpec("d.nc", inputs=("a",), split=(8, 2, 2)), model=ModelSpec("fno", {"n_modes": (4, 4)}))
    text = spec.to_yaml()
    assert RunSpec.from_dict(yaml.safe_load(text)) == spec and RunSpec.from_dict(yaml.safe_load(text)).to_yaml() == text
    with pytest.raises(SpecError, match="version: expected run spec version 1, found 7"):
        RunSpec.from_dict({**yaml.safe_load(text), "version": 7})
    with pytest.raises(SpecError, match=r"optim.learning_rate: expected a field of OptimSpec among \[.*'lr'"):
        RunSpec.from_dict({**yaml.safe_load(text), "optim": {"learning_rate": 0.1}})
    with pytest.raises(SpecError, match="optim.epochs: expected int, found 'ten'"):
        RunSpec.from_dict({**yaml.safe_load(text), "optim": {"epochs": "ten"}})


def test_a_runs_config_file_trains_it_again(tmp_path):
    data = write_poisson(tmp_path / "p.nc", n_samples=12)
    first = _cli("train", "--data", data, "--model", "fno", "--out", tmp_path / "a", "--input", "f", "--target", "u",
                 "--split", "8,2,2", "--epochs", "2", "--batch-size", "4", "--lr", "3e-3", "--config", "n_modes=4",
                 "width=8", "n_layers=2", "--workers", "0", "--threads", "1", "--no-progress", "--device", "cpu")
    assert first.returncode == 0, first.stderr  # (on the CPU: two GPU runs may differ in the last bits)
    text = (tmp_path / "a" / "config.yaml").read_text()
    recorded = yaml.safe_load(text)
    assert recorded["optim"]["lr"] == 3e-3 and recorded["model"]["config"]["width"] == 8
    assert recorded["data"]["split"] == [8, 2, 2] and "splits" not in recorded["data"]
    assert RunSpec.from_dict(recorded).to_yaml() == text
    again = _cli("train", "--config-file", tmp_path / "a" / "config.yaml", "--out", tmp_path / "b", "--no-progress",
                 "--device", "cpu")
    assert again.returncode == 0, again.stderr
    a, b = (load_checkpoint(tmp_path / d / "last.pt") for d in ("a", "b"))
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])
    longer = _cli("train", "--config-file", tmp_path / "a" / "config.yaml", "--out", tmp_path / "c", "--epochs", "3",
                  "--config", "width=8", "--no-progress")  # an option on the command line wins over the file
    assert longer.returncode == 0, longer.stderr
    assert load_checkpoint(tmp_path / "c" / "last.pt")["epoch"] == 3


def test_bad_config_files_are_one_line_errors(tmp_path):
    (tmp_path / "bad.yaml").write_text("optim: [1, 2\n")
    (tmp_path / "unknown.yaml").write_text("version: 1\noptim:\n  learning_rate: 0.1\n")
    (tmp_path / "flat.yaml").write_text("lr: 0.1\n")
    for name, expected in (("bad.yaml", "expected YAML, found a syntax error"),
                           ("unknown.yaml", "optim.learning_rate: expected a field of OptimSpec among"),
                           ("flat.yaml", "version: expected 'version: 1' and the parts"),
                           ("missing.yaml", "found no file at")):
        done = _cli("train", "--config-file", tmp_path / name, "--out", tmp_path / "run")
        assert done.returncode != 0 and expected in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "run").exists()


def test_the_glossary_names_every_field_and_its_option():
    """docs/glossary.md's table is the CLI's table: every spec field, with the option that sets it (or none)."""
    from pathlib import Path

    from operators.cli.train import OPTIONS
    from operators.training.spec import paths

    text = (Path(__file__).resolve().parents[1] / "docs" / "glossary.md").read_text()
    parts = ("`data.", "`task.", "`model.", "`optim.", "`loading.")
    rows = [line.split("|")[1:3] for line in text.splitlines() if line.startswith(tuple(f"| {p}" for p in parts))]
    table = {k.strip(" `"): v.strip().split()[0].strip("`") for k, v in rows}
    by_field = {field: option for option, (field, _, _) in OPTIONS.items()}
    assert table == {p: by_field.get(p, "—") for p in paths()}
