"""``circuitop info RUN``: the last epoch and the best one apart, each read from its own checkpoint, with
epochs counted from 1 as the training log, the history and the checkpoints count them."""

import json
import re

from cli_run import run_cli
from operators.cli import main
from operators.training import load_checkpoint
from test_trainer import write_poisson

EPOCHS = 6


def _info(path, capsys) -> dict[str, str]:
    assert main(["info", str(path)]) == 0
    return dict(line.split(": ", 1) for line in capsys.readouterr().out.splitlines())


def _scores(record: dict) -> str:
    return ", ".join(f"{k} {v:.4g}" for k, v in record.items() if k == "train_loss" or k.startswith("val_"))


def test_info_names_the_last_epoch_and_the_best_apart(tmp_path, capsys):
    """A real short run whose validation error rises after epoch 2 (lr 0.1), stopped early by patience 2: its
    last epoch is not its best, and info says both, as the log and the checkpoints do."""
    data = write_poisson(tmp_path / "p.nc", n_samples=12)
    out = tmp_path / "run"
    train = run_cli("train", "--data", data, "--model", "fno", "--out", out, "--input", "f", "--target", "u",
                    "--split", "8,2,2", "--epochs", EPOCHS, "--batch-size", 4, "--lr", 0.1, "--patience", 2,
                    "--config", "n_modes=4", "width=8", "n_layers=2", "--threads", 1, "--no-progress")
    assert train.returncode == 0, train.stderr
    history = json.loads((out / "history.json").read_text())
    scores = [r["val_rel_l2"] for r in history]
    last, best = len(history), 1 + scores.index(min(scores))
    assert best < last < EPOCHS, scores  # the record: stopped early, after a best that is not the last epoch
    # one numbering, from 1: the log, the records, the checkpoints
    assert [int(k) for k in re.findall(r"^epoch (\d+) \| loss", train.stderr, re.M)] == list(range(1, last + 1))
    assert [r["epoch"] for r in history] == list(range(1, last + 1))
    assert f"stopping early after epoch {last}: " in train.stderr and f"at epoch {best}, is in best.pt" in train.stderr
    last_state, best_state = load_checkpoint(out / "last.pt"), load_checkpoint(out / "best.pt")
    assert (last_state["epoch"], last_state["best_epoch"], best_state["epoch"]) == (last, best, best)

    last_line = f"epoch {last} of {EPOCHS}, stopped early (last.pt): {_scores(history[-1])}"
    best_line = f"epoch {best} (best.pt): {_scores(history[best - 1])}"
    for target, shown in ((out, "last"), (out / "last.pt", "last"), (out / "best.pt", "best")):
        lines = _info(target, capsys)
        assert lines["checkpoint"] == f"{out / f'{shown}.pt'} (epoch {last if shown == 'last' else best} of {EPOCHS})"
        assert (lines["last"], lines["best"]) == (last_line, best_line)
