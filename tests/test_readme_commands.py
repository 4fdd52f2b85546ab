"""Every command line of the README's "The command line" block, and its Python blocks, run, as written, at tiny size.

Each line is taken from README.md itself (comments and ``[optional]`` parts dropped) and run as a real
subprocess in one folder, in an order where each finds the files the earlier ones wrote. The only
additions are flags that make it tiny (``--n 4``, one epoch, a small model), appended after the README's
own flags (argparse keeps the last value). A README line this test does not know fails it, so the block
and the test change together.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

import torch

import pde_data

pytestmark = pytest.mark.slow  # end-to-end: real subprocesses (CI runs them)

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
SMALL_MODEL = ["width=8", "n_modes=4", "n_layers=2"]
FAST = ["--epochs", "1", "--threads", "1", "--no-progress", "--workers", "0"]

#: README command (as written, options in [...] and comments dropped) -> tiny-size flags appended, in run order
COMMANDS = {
    "circuitop --help": [],
    "circuitop info": [],
    "circuitop build": [],
    "circuitop generate order --out order.nc --order 2": ["--n", "8", "--n-points", "128"],
    "circuitop generate poisson --out poisson.nc --K 16 --n 1024": ["--n", "4", "--n-grid", "18"],
    "circuitop generate darcy --out darcy.nc --n 256 --n-grid 128": ["--n", "6", "--n-grid", "16"],
    "circuitop generate ns --out ns.h5 --n 32 --pdebench": ["--n", "5", "--n-sim", "16", "--n-out", "16",
                                                           "--t-final", "12", "--dt", "1e-2", "--device", "cpu"],
    "circuitop generate swe --out rdb.h5 --n 16 --pdebench": ["--n", "2", "--n-grid", "16", "--frames", "3",
                                                             "--t-final", "0.05", "--device", "cpu"],
    "circuitop info darcy.nc": [],
    "circuitop train --data darcy.nc --model chonn_fno --out runs/darcy": [*FAST, "--config", *SMALL_MODEL,
                                                                         "d_state=2"],
    "circuitop generate degradation --out seq.nc --n 512": ["--n", "24", "--min-length", "4", "--max-length", "8"],
    "circuitop generate digits --out seq_digits.nc --gap 0.3": [],
    "circuitop info runs/darcy": [],
    "circuitop train --data ns.h5 --model fno --window 10 --periodic --out runs/ns": [*FAST, "--config", *SMALL_MODEL],
    "circuitop train --config-file runs/ns/config.yaml --out runs/ns2": ["--no-progress"],
    "circuitop generate darcy --out sweep.nc --gen beta=0.5..2": ["--n", "12", "--n-grid", "16"],
    "circuitop train --data sweep.nc --condition beta --model fno --out runs/beta": [*FAST, "--config", *SMALL_MODEL],
    "circuitop train --generate ns --gen n_sim=64 t_final=5 --samples-per-epoch 64 --window 1 --periodic --model fno --out runs/ns_gen":
        ["--gen", "n_sim=16", "n_out=16", "t_final=0.5", "n_records=2", "batch_size=4", "--samples-per-epoch", "4",
         *FAST, "--config", *SMALL_MODEL],
    "circuitop train --data ns.h5 --model nac_fno --window 10 --periodic --config tokens=time --out runs/ns_nac":
        [*FAST, "--config", "tokens=time", *SMALL_MODEL],
    "circuitop train --data digits.nc --model chonn_vision --config size=cpu --target label --out runs/digits":
        [*FAST, "--config", "size=cpu", "d_state=2"],
    "circuitop train --data seq.nc --model cfc --target rul --out runs/rul": [*FAST, "--config", "units=8"],
    "circuitop train --data seq_digits.nc --model pdna --config variant=E --out runs/pdna":
        [*FAST, "--config", "variant=E", "units=8", "backbone_units=8"],
    "circuitop evaluate --run runs/darcy --data darcy.nc": [],
    "circuitop evaluate --run runs/darcy --data darcy_test.pt --samples all --input input --target target": [],
    "circuitop evaluate --run runs/ns --data ns.h5 --steps 40": ["--steps", "2"],
    "circuitop evaluate --run runs/rul --data seq.nc": [],
    "circuitop evaluate --run runs/beta --data sweep.nc": [],
    "circuitop evaluate --pred pred.nc --true true.nc": ["--window", "10"],
    "circuitop predict --run runs/darcy --data new_inputs.nc --out new_pred.nc": [],
    "circuitop bench": ["--quick", "--only", "bench_metrics"],
}
#: covered elsewhere, with the reason
ELSEWHERE = {"torchrun --nproc_per_node 2 -m operators.cli train ...": "tests/test_ddp.py runs torchrun"}


def _readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    block = text.split("## The command line", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    lines = []
    for line in block.splitlines():
        line = re.sub(r"\[[^\]]*\]", "", line.split("  #")[0]).strip()
        if line:
            lines.append(" ".join(line.split()))
    return lines


def _prepare(command: str, folder: Path) -> None:
    """Files a command reads that no earlier README line writes."""
    if "darcy_test.pt" in command:  # neuraloperator's layout of the same physics: a dict of x and y tensors
        darcy = pde_data.open_source(folder / "darcy.nc").dataset
        torch.save({"x": torch.from_numpy(darcy["a"].values), "y": torch.from_numpy(darcy["u"].values)},
                   folder / "darcy_test.pt")
    if "new_inputs.nc" in command:  # inputs alone
        pde_data.save(pde_data.open_source(folder / "darcy.nc").dataset[["a"]].load(), folder / "new_inputs.nc")
    if "digits.nc" in command:  # a tiny image set: images (sample, x, y) and integer labels (sample,)
        images = xr.Dataset({"image": (("sample", "x", "y"), np.random.default_rng(0).random((10, 16, 16))),
                             "label": (("sample",), np.arange(10) % 3)})
        pde_data.save(images, folder / "digits.nc")
    if command.startswith("circuitop evaluate --pred"):  # a run's predictions, and the data as NetCDF
        shutil.copy(folder / "runs" / "ns" / "evaluations" / "ns.h5-test" / "pred.nc", folder / "pred.nc")
        pde_data.save(pde_data.open_source(folder / "ns.h5").dataset.load(), folder / "true.nc")


def test_the_readme_block_is_the_tested_one():
    assert sorted(_readme_commands()) == sorted([*COMMANDS, *ELSEWHERE])


def test_every_readme_command_runs(tmp_path):
    for command, tiny in COMMANDS.items():
        _prepare(command, tmp_path)
        words = command.split()
        done = subprocess.run([sys.executable, "-m", "operators.cli", *words[1:], *tiny], cwd=tmp_path, env=ENV,
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"{command} {' '.join(tiny)}\n{done.stderr[-3000:]}"
    assert (tmp_path / "runs" / "ns2" / "last.pt").is_file() and (tmp_path / "new_pred.nc").is_file()
    assert len(list((tmp_path / "runs" / "darcy" / "evaluations").iterdir())) == 2  # both evaluations kept


def _python_blocks() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Python", 1)[1].split("\n## ", 1)[0]
    return [block.split("```", 1)[0] for block in section.split("```python")[1:]]


#: appended to the first block: what its model scored, and how its predictions vary against the truth
_SCORES = """
import json
truth = pde_data.generate_darcy(3, n_grid=32, seed=1)["u"].values  # the same samples as `inputs`
u = pred["u"].values
print(json.dumps({"model": result["metrics"]["rel_l2"], "mean": result["baseline"]["mean_predictor"]["rel_l2"],
                  "spread": float((u.std(axis=(1, 2)) / truth.std(axis=(1, 2))).min()),
                  "rel_l2": float((((u - truth) ** 2).sum(axis=(1, 2)) / (truth ** 2).sum(axis=(1, 2))).max() ** 0.5)}))
"""


def test_the_readme_python_runs_as_written_and_its_model_learns(tmp_path):
    """Both blocks run; the first one's model scores at most 0.8 of the mean predictor's rel. L2, and its
    predictions at another resolution vary as the truth does (no constant field) and are near it."""
    blocks = _python_blocks()
    assert len(blocks) == 2 and "run.predict(inputs)" in blocks[0]
    for block, extra in zip(blocks, (_SCORES, "")):
        done = subprocess.run([sys.executable, "-c", block + extra + "\nprint('ok')"], cwd=tmp_path, env=ENV,
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0 and done.stdout.endswith("ok\n"), done.stderr[-3000:]
        if extra:
            scores = json.loads(done.stdout.splitlines()[-2])
    assert (tmp_path / "runs" / "darcy16" / "evaluations" / "darcy16.nc-test" / "metrics.json").is_file()
    assert scores["model"] <= 0.8 * scores["mean"], scores
    assert scores["spread"] >= 0.5 and scores["rel_l2"] <= 0.3, scores  # each sample: its own field, near the truth
