"""One named batch and one route (issue 42): every dataset reads a :class:`pde_data.Batch`, a plain torch
``DataLoader`` yields one, no source indexes a batch by position, and tasks are split by what they are (no
switches on ``task.kind`` inside them)."""

import re
from pathlib import Path

import numpy as np
import torch
import xarray as xr
from torch.utils.data import DataLoader

import pde_data
from operators.training import DataSpec, ModelSpec, RunSpec, make_task, resolve
from operators.training.tasks import SequenceClassification, SequenceRegression

ROOT = Path(__file__).resolve().parents[1]
#: a batch indexed by position (``batch[1]``), or a switch on a task's kind
POSITIONAL, KIND_SWITCH = re.compile(r"\bbatch\["), re.compile(r"\b(task|cls|self)\.kind\s*[!=]=")


def offending_lines(pattern: re.Pattern, folders: list[Path]) -> list[str]:
    """``path:line: text`` of every line of the ``.py`` files under ``folders`` that ``pattern`` matches."""
    return [f"{path}:{k}: {line.strip()}" for folder in folders for path in sorted(folder.rglob("*.py"))
            for k, line in enumerate(path.read_text().splitlines(), 1) if pattern.search(line)]


def test_no_batch_is_indexed_by_position():
    found = offending_lines(POSITIONAL, [ROOT / "operators", ROOT / "pde_data"])
    assert not found, "expected batches read by name (batch.inputs, batch.mask), found:\n" + "\n".join(found)


def test_the_check_finds_a_positional_batch_that_comes_back(tmp_path):
    (tmp_path / "task.py").write_text("def losses(pred, batch):\n    return pred - batch[1]\n")
    assert offending_lines(POSITIONAL, [tmp_path]) == [f"{tmp_path / 'task.py'}:2: return pred - batch[1]"]


def test_tasks_do_not_switch_on_their_kind():
    found = offending_lines(KIND_SWITCH, [ROOT / "operators" / "training" / "tasks"])
    assert not found, "expected the task's own methods in place of kind switches, found:\n" + "\n".join(found)


def _sequences(n=5, labels=False) -> xr.Dataset:
    rng = np.random.default_rng(0)
    target = (("sample",), np.arange(n) % 3) if labels else (("sample",), rng.standard_normal(n))
    ds = xr.Dataset({"x": (("sample", "time"), rng.standard_normal((n, 5)).astype(np.float32)), "y": target})
    if labels:
        ds["y"].attrs["n_classes"] = 3
    return ds


def _darcy(n=5) -> xr.Dataset:
    rng = np.random.default_rng(1)
    return xr.Dataset({v: (("sample", "x", "y"), rng.random((n, 4, 4), np.float32)) for v in ("a", "u")})


def test_a_plain_dataloader_yields_a_batch_with_absent_fields_kept_none():
    pairs = pde_data.PairDataset(_darcy(), ["a"], ["u"])
    inputs_alone = pde_data.SequenceDataset(_sequences(), ["x"], ())
    for dataset, absent in ((pairs, ("dt", "mask")), (inputs_alone, ("targets",))):
        for workers in (0, 2):
            batches = list(DataLoader(dataset, batch_size=2, num_workers=workers))
            assert [len(b.inputs) for b in batches] == [2, 2, 1]
            for k, batch in enumerate(batches):
                want = dataset.read_batch(range(2 * k, min(2 * k + 2, 5)))
                assert type(batch) is pde_data.Batch and all(getattr(batch, f) is None for f in absent)
                assert all(torch.equal(a, b) for a, b in zip(batch.tensors(), want.tensors(), strict=True))


def test_a_batch_moves_by_name():
    batch = pde_data.SequenceDataset(_sequences(), ["x"], ["y"]).read_batch([0, 1])
    moved = batch.to("cpu", non_blocking=True)
    assert moved.targets is batch.targets and moved.mask.dtype == torch.bool and moved.dt.shape == (2, 5)
    assert pde_data.PairDataset(_darcy(), ["a"], ["u"]).read_batch([0]).to("cpu").mask is None


def test_a_sequence_run_is_run_by_the_task_of_its_targets():
    for labels, expected, loss in ((True, SequenceClassification, "cross_entropy"), (False, SequenceRegression, "mse")):
        spec = resolve(RunSpec(data=DataSpec("in-memory", targets=("y",), split=(3, 1, 1)), model=ModelSpec("cfc")),
                       _sequences(labels=labels))
        task = make_task(spec)
        assert spec.task.kind == "sequence" and type(task) is expected and task.loss == loss
        assert type(task.with_variables(None, None)) is expected


#: an encode call (a normalizer applied) in a module of ``pde_data.datasets`` other than the normalizers' own
ENCODE = re.compile(r"\.encode_?\(")


def test_pde_data_datasets_never_encode():
    folder = ROOT / "pde_data" / "datasets"
    found = [line for line in offending_lines(ENCODE, [folder])  # docstring examples (">>>") show a caller's code
             if not line.startswith(str(folder / "normalize.py")) and ": >>> " not in line]
    assert not found, "expected batches in the data's units (the run's processor encodes), found:\n" + "\n".join(found)


def test_the_processor_encodes_what_the_datasets_read_in_the_data_units():
    seq = _sequences(labels=False)
    seq["z"] = seq["x"] * 2
    seq["length"] = ("sample",), np.array([5, 3, 1, 4, 2])
    padded = 0
    for labels, ds, variables in ((False, _darcy(), {"targets": ("u",)}), (False, seq, {"targets": ("y",)}),
                                  (False, seq, {"inputs": ("x",), "targets": ("z",)}),
                                  (True, _sequences(labels=True), {"targets": ("y",)})):
        spec = resolve(RunSpec(data=DataSpec("in-memory", split=(3, 1, 1), **variables),
                               model=ModelSpec("fno" if ds is not seq and not labels else "cfc")), ds)
        task = make_task(spec)
        task = make_task(spec, task.fit_normalizers(pde_data.open_source(ds)))
        raw = task.dataset(ds, range(5)).read_batch([4, 1, 2])
        encoded = task.batches(ds, range(5)).read_batch([4, 1, 2])
        norms = task.normalizers
        assert norms.input is not None and (norms.output is None) == labels
        keep = torch.ones_like(raw.inputs, dtype=torch.bool) if raw.mask is None else raw.mask[..., None]
        torch.testing.assert_close(encoded.inputs, torch.where(keep, norms.input.encode(raw.inputs), 0.0))
        if labels:
            assert torch.equal(encoded.targets, raw.targets) and encoded.targets.dtype == torch.int64
        else:
            want = norms.output.encode(raw.targets)
            want = torch.where(keep, want, 0.0) if raw.targets.ndim == 3 else want
            torch.testing.assert_close(encoded.targets, want)
        if raw.mask is not None and not raw.mask.all():
            padded += 1
            assert not encoded.inputs[~raw.mask].any()  # padding stays 0 after encoding
    assert padded == 2


def test_a_run_is_resolved_in_one_pass(monkeypatch):
    from operators.training.spec import RunSpec as Spec

    calls, override = [], Spec.override
    monkeypatch.setattr(Spec, "override", lambda self, values: calls.append(sorted(values)) or override(self, values))
    for ds, model in ((_darcy(), "fno"), (_sequences(labels=True), "cfc")):
        calls.clear()
        spec = resolve(RunSpec(data=DataSpec("in-memory", split=(3, 1, 1)), model=ModelSpec(model)), ds)
        assert spec.resolved and len(calls) == 1, calls  # everything the data fix, applied at once


def kind_names(folders: list[Path]) -> list[str]:
    """``path:line: name`` of every identifier ``kind`` (a name, argument, keyword or attribute) in the ``.py``
    files under ``folders``, but a task's kind (``task.kind``, and the tasks' own ``cls.kind``/``self.kind``) and
    NumPy's (``dtype.kind``, ``argsort(kind=...)``)."""
    import ast

    found = []
    for folder in folders:
        for path in sorted(folder.rglob("*.py")):
            in_tasks = "tasks" in path.parts or path.name == "spec.py"
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Attribute) and node.attr == "kind":
                    base = ast.unparse(node.value)
                    if base.endswith(("task", "dtype")) or (in_tasks and base in ("cls", "self", "task")):
                        continue
                elif isinstance(node, ast.keyword) and node.arg == "kind":
                    if ast.unparse(node).startswith("kind='stable'"):
                        continue
                elif not (isinstance(node, ast.Name) and node.id == "kind" or isinstance(node, ast.arg) and
                          node.arg == "kind") or in_tasks:
                    continue
                found.append(f"{path}:{node.lineno}: kind")
    return found


def test_kind_means_the_task_kind_alone():
    found = kind_names([ROOT / name for name in ("operators", "pde_data", "evaluation", "circuitop")])
    assert not found, ("expected 'kind' for a task's kind alone (a data set's family, a target's form, a "
                       "normalizer's method, a generator's name), found:\n" + "\n".join(found))
