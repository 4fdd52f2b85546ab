"""Checkpoints: plain values only, weights_only loading, refusal of pickled objects, atomic writes."""

import errno
import pickle
import re

import pytest
import torch

import operators
from operators.training import CheckpointError, RunSpec, load_checkpoint, save_checkpoint
from operators.training.checkpoint import estimate_bytes, link_checkpoint, state_bytes, tensor_state
from pde_data.core.room import NoRoomError


class _Payload:
    """Unpickling this would create a marker file: proof that arbitrary code ran."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


def _trainer_state(tmp_path):
    from test_trainer import _tiny_trainer

    trainer = _tiny_trainer(tmp_path, epochs=1)
    trainer.fit()
    return trainer.state_dict()


def test_trainer_checkpoint_loads_with_weights_only(tmp_path):
    state = _trainer_state(tmp_path)
    loaded = load_checkpoint(tmp_path / "last.pt")
    assert set(loaded) == set(state)
    spec = RunSpec.from_dict(loaded["spec"])
    assert loaded["epoch"] == 1 and spec.model.name == "fno" and spec.data.splits.sizes == (16, 8, 0)
    assert all(torch.equal(loaded["model"][k], v) for k, v in state["model"].items())
    assert "_metadata" not in loaded["model"]  # neuraloperator's entry holding functions is dropped
    torch.load(tmp_path / "last.pt", weights_only=True)
    model = spec.model.build()
    model.load_state_dict(loaded["model"])


def test_a_checkpoint_with_the_dropped_format_key_still_loads(tmp_path):
    """Checkpoints of earlier versions carry ``"format": 1``, which nothing read: they resume as before."""
    from test_trainer import _tiny_trainer

    state = _trainer_state(tmp_path)
    assert "format" not in state
    save_checkpoint(tmp_path / "earlier.pt", {**state, "format": 1})
    again = _tiny_trainer(tmp_path / "again", epochs=1)
    again.load(load_checkpoint(tmp_path / "earlier.pt"))
    assert (again.epoch, again.best, again.best_epoch) == (state["epoch"], state["best"], state["best_epoch"])
    assert all(torch.equal(again.model.state_dict()[k], v) for k, v in state["model"].items())


def test_checkpoint_with_a_pickled_object_is_refused(tmp_path):
    marker = tmp_path / "code-ran"
    state = {"model": {"w": torch.zeros(2)}, "evil": _Payload(marker)}
    path = tmp_path / "tampered.pt"
    torch.save(state, path)
    with pytest.raises(CheckpointError, match="refusing to load") as err:
        load_checkpoint(path)
    assert not marker.exists() and "weights_only" not in str(err.value)  # never advise unsafe loading
    with pytest.raises(pickle.UnpicklingError):  # sanity: the file really needs unpickling
        torch.load(path, weights_only=True)


def test_missing_or_truncated_checkpoints_give_clear_errors(tmp_path):
    with pytest.raises(CheckpointError, match="no checkpoint at"):
        load_checkpoint(tmp_path / "nope.pt")
    save_checkpoint(tmp_path / "ok.pt", {"model": {"w": torch.ones(3)}})
    data = (tmp_path / "ok.pt").read_bytes()
    (tmp_path / "cut.pt").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="cut.pt"):
        load_checkpoint(tmp_path / "cut.pt")
    (tmp_path / "junk.pt").write_text("junk\n")  # torch raises a bare KeyError for this one
    with pytest.raises(CheckpointError, match="junk.pt: expected a checkpoint written by circuitop train"):
        load_checkpoint(tmp_path / "junk.pt")


class _Unpicklable:
    def __reduce__(self):
        raise pickle.PicklingError("not a checkpoint value")


def test_failed_write_leaves_the_previous_checkpoint(tmp_path):
    path = tmp_path / "last.pt"
    save_checkpoint(path, {"model": {"w": torch.ones(3)}})
    with pytest.raises(pickle.PicklingError, match="^not a checkpoint value$"):
        save_checkpoint(path, {"model": {"w": torch.zeros(3)}, "bad": _Unpicklable()})
    assert torch.equal(load_checkpoint(path)["model"]["w"], torch.ones(3))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.pt"]


def test_a_full_disk_leaves_the_previous_checkpoint_and_says_how_much_is_needed(tmp_path, monkeypatch):
    """The write finds 10 kB free for a 40 kB checkpoint: torch's own error ("unexpected pos") becomes one
    line naming the folder, the bytes needed and free; the temporary file goes, the old checkpoint stays."""
    from test_disk_full import full_disk

    path, state = tmp_path / "last.pt", {"model": {"w": torch.zeros(10_000)}}
    save_checkpoint(path, {"model": {"w": torch.ones(3)}})
    full_disk(monkeypatch, ".last.pt.", 10_000)
    with pytest.raises(NoRoomError, match=rf"^expected room for a checkpoint of about 40 kB \(40,000 bytes\), "
                                          rf"found .+ free in {re.escape(str(tmp_path))}$") as err:
        save_checkpoint(path, state)
    assert (err.value.needed, err.value.folder, err.value.errno) == (40_000, tmp_path, errno.ENOSPC)
    assert torch.equal(load_checkpoint(path)["model"]["w"], torch.ones(3))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.pt"]


def test_the_estimate_before_training_is_the_checkpoint_after_it(tmp_path):
    """What train checks for room before the first epoch: the tensors a checkpoint will hold, Adam's moments
    counted before they exist (after: its step counts, 4 bytes a parameter); the file adds the spec, the
    history and the archive's headers."""
    from test_trainer import _tiny_trainer

    trainer = _tiny_trainer(tmp_path, epochs=1)
    before = trainer.checkpoint_bytes()
    trainer.fit()
    after, n_params = state_bytes(trainer.state_dict()), len(list(trainer.model.parameters()))
    assert after - 4 * n_params == before == estimate_bytes(trainer.state_dict(), trainer.optimizer) - 4 * n_params
    assert before < (tmp_path / "last.pt").stat().st_size < before + 64_000


def test_tensor_state_drops_non_tensors():
    model = operators.build("fno", 1, 1, n_modes=4, width=8, n_layers=1)
    assert "_metadata" in model.state_dict()
    assert all(torch.is_tensor(v) for v in tensor_state(model).values())


@pytest.mark.parametrize("links", [True, False])
def test_a_linked_checkpoint_keeps_its_content_when_the_source_is_replaced(tmp_path, monkeypatch, links):
    """best.pt linked to last.pt (or copied, where hard links fail) holds last.pt's state, and keeps it when
    last.pt is saved again; no temporary file is left."""
    import os

    if not links:
        monkeypatch.setattr(os, "link", lambda *args: (_ for _ in ()).throw(OSError("no hard links here")))
    last, best = tmp_path / "last.pt", tmp_path / "best.pt"
    save_checkpoint(last, {"model": {"w": torch.ones(3)}})
    save_checkpoint(best, {"model": {"w": torch.full((3,), 7.0)}})  # an older best is replaced
    link_checkpoint(last, best)
    assert best.stat().st_nlink == (2 if links else 1)
    save_checkpoint(last, {"model": {"w": torch.zeros(3)}})
    assert torch.equal(load_checkpoint(best)["model"]["w"], torch.ones(3))
    assert torch.equal(load_checkpoint(last)["model"]["w"], torch.zeros(3))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best.pt", "last.pt"]


_INTERRUPTED_SAVE = """
import os, signal, sys, torch
signal.signal(signal.SIGINT, signal.default_int_handler)  # a pytest-xdist worker's children start with it ignored
from operators.training import checkpoint
write = checkpoint._Writer.write
def interrupting(self, data):
    os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C arrives while torch is writing the archive
    return write(self, data)
checkpoint._Writer.write = interrupting
try:
    checkpoint.save_checkpoint(sys.argv[1], {"model": {"w": torch.arange(1000.0)}})
except KeyboardInterrupt:
    print("interrupted", float(checkpoint.load_checkpoint(sys.argv[1])["model"]["w"].sum()))
"""


def test_ctrl_c_during_a_write_finishes_the_checkpoint_then_interrupts(tmp_path):
    """Ctrl-C raised inside torch's writer would leave its C++ archive writing to a closed file, and the process
    would abort (SIGABRT, "terminate called"): the interrupt waits until the checkpoint is whole."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _INTERRUPTED_SAVE, str(tmp_path / "last.pt")],
                          capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout) == (0, "interrupted 499500.0\n"), done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.pt"]
