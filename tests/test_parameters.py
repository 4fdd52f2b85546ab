"""The one typed-parameter system (``pde_data.core.params``, issue 42): one converter for the run spec, the model
configs, the generators' parameters and the evaluation options; errors carry ``(parameter, expected, found)`` as
data, and the CLI names parameters by table, never by rewriting text."""

from __future__ import annotations

import ast
import pickle
from dataclasses import dataclass
from pathlib import Path

import pytest

from operators.cli import main, message
from operators.cli.train import option_of
from operators.training import ModelSpec, RunSpec
from operators.training.tasks import EvalOptions
from pde_data.core.params import ExistsError, ParameterError, Typed, param, typed
from pde_data.generate.defaults import PARAMS
from pde_data.generate.registry import GenerationSpec

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class _Grid(Typed, prefix="grid"):
    n: int = param(8, "a positive integer", lambda v: v >= 1)
    dt: float = 0.1
    sizes: tuple[int, ...] = ()
    mode: str | None = param(None, choices=("a", "b", None))
    on: bool = False


def test_text_lists_and_integers_become_the_field_s_type():
    assert typed(_Grid, {"n": "4", "dt": "1e-3", "sizes": "(2, 3)", "mode": "a", "on": "True"}) == {
        "n": 4, "dt": 1e-3, "sizes": (2, 3), "mode": "a", "on": True}
    assert typed(_Grid, {"dt": 2, "sizes": [1, 2], "mode": None}) == {"dt": 2.0, "sizes": (1, 2), "mode": None}
    assert type(typed(_Grid, {"dt": 2})["dt"]) is float and _Grid(n="3") == _Grid(n=3)


@pytest.mark.parametrize("values, expected", [
    ({"n": "big"}, "grid.n: expected int, found 'big'"),
    ({"n": True}, "grid.n: expected int, found True"),
    ({"n": 0}, "grid.n: expected a positive integer, found 0"),
    ({"n": None}, "grid.n: expected int, found none"),
    ({"on": 1}, "grid.on: expected bool, found 1"),
    ({"sizes": [1, "x"]}, "grid.sizes: expected tuple[int, ...], found [1, 'x']"),
    ({"mode": "c"}, "grid.mode: expected one of ['a', 'b'] or null, found 'c'"),
    ({"m": 1}, "grid.m: expected a field of _Grid among ['dt', 'mode', 'n', 'on', 'sizes'], found 'm'"),
])
def test_a_value_that_does_not_fit_is_one_error_with_its_parts(values, expected):
    with pytest.raises(ParameterError) as caught:
        typed(_Grid, values, "grid")
    error = caught.value
    assert str(error) == expected and error.path == expected.split(":")[0]
    assert f"expected {error.expected}, found {error.found}" in expected
    assert str(pickle.loads(pickle.dumps(error))) == expected


def test_the_same_text_converts_alike_everywhere():
    """``--config``, ``--gen``, a generated set's parameters, the evaluation options and the spec read "64"
    with the one converter."""
    assert ModelSpec("fno", {"width": "64"}).config == {"width": 64}
    spec = RunSpec().override({"data.generate": "ns", "data.generator": {"n_sim": "64", "t_final": "5"},
                               "data.samples_per_epoch": "8", "optim.lr": "1e-3"})
    assert spec.data.generator == {"n_sim": 64, "t_final": 5.0} and spec.data.samples_per_epoch == 8
    assert GenerationSpec("ns", 2, 0, {"n_sim": "64", "t_final": 5}).params == {"n_sim": 64, "t_final": 5.0}
    assert typed(PARAMS["ns"], {"n_records": "None", "dtype": "float64"}) == {"n_records": None, "dtype": "float64"}
    assert typed(EvalOptions, {"steps": "64", "batch_size": "8"}) == {"steps": 64, "batch_size": 8}
    with pytest.raises(ParameterError, match="params.dtype: expected one of"):
        GenerationSpec("ns", 2, 0, {"dtype": "float16"})


def test_the_other_typing_systems_are_gone():
    import operators.models.registry as registry
    import operators.training.online as online
    import operators.training.spec_values as spec_values

    assert not hasattr(registry, "_check_type") and not hasattr(online, "typed_params")
    assert not hasattr(spec_values, "typed") and not hasattr(spec_values, "CHOICES")


def test_mentioned_parameters_are_named_by_whoever_tells_the_error():
    error = ParameterError("data.split", "0 training samples ({data.samples_per_epoch})", "[4, 2, 2]",
                           ["data.samples_per_epoch"])
    assert str(error) == "data.split: expected 0 training samples (data.samples_per_epoch), found [4, 2, 2]"
    assert message(error) == "--split: expected 0 training samples (--samples-per-epoch), found [4, 2, 2]"
    exists = ExistsError((), "/x: found one; pass {overwrite=True} or {samples='all'}",
                         mentions=["overwrite", "samples"])
    assert isinstance(exists, FileExistsError) and isinstance(exists, ValueError)
    assert str(exists) == "/x: found one; pass overwrite=True or samples='all'"
    assert message(exists) == "/x: found one; pass --overwrite or --samples all"
    assert [option_of(p, v) for p, v in (("task.loss", "h1"), ("model.config.width", 8), ("resume", True))] == \
        ["--loss h1", "--config width=8", "--resume"]
    assert option_of("data.splits") == "data.splits" and option_of("first_sample") == "first_sample"


def test_errors_name_options_in_the_cli(tmp_path, capsys):
    out = ["--out", str(tmp_path / "run")]
    cases = [(["--data", "x.nc", "--model", "fno", "--epochs", "0"],
              "--epochs: expected a positive number of epochs, found 0"),
             (["--data", "x.nc", "--model", "fno", "--samples-per-epoch", "8"],
              "--samples-per-epoch: expected only with --generate (a run on generated data), found it without"),
             (["--data", "x.nc", "--model", "fno", "--config", "n_layers=two"],
              "--config n_layers: expected int, found 'two'")]
    for args, expected in cases:
        assert main(["train", *args, *out]) == 1
        assert f"circuitop train: error: {expected} (--debug" in capsys.readouterr().err
    assert main(["evaluate", "--run", str(tmp_path), "--steps", "many"]) == 1
    assert "circuitop evaluate: error: --steps: expected int | None, found 'many'" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


#: the calls that would rewrite an error's text (``re.sub``, a compiled pattern's ``sub``, ``str.replace``)
_REWRITES = {"sub", "subn", "replace"}
#: the regular expressions the CLI may compile: they parse what the user typed
_INPUT_PATTERNS = {("__init__.py", "_NEGATIVE")}
#: ``.replace`` calls over text that is no error's (``(file, function)``)
_NOT_ERRORS = {("evaluate.py", "result_table"), ("_generation.py", "add_parameter_options")}  # option names


def test_the_cli_never_rewrites_error_text():
    """No regular expression or ``str.replace`` turns library text into option names: a library error carries
    its parameters as data and the CLI names them by table (issue 42). Fails when such a rewrite comes back."""
    found = []
    for path in sorted((ROOT / "operators" / "cli").glob("*.py")):
        tree = ast.parse(path.read_text())
        owner = {id(node): f.name for f in ast.walk(tree) if isinstance(f, ast.FunctionDef) for node in ast.walk(f)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                name = node.func.attr
                if name in _REWRITES and (path.name, owner.get(id(node))) not in _NOT_ERRORS:
                    found.append(f"{path.name}:{node.lineno} .{name}(")
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and \
                    getattr(node.value.func, "attr", None) == "compile":
                targets = {t.id for t in node.targets if isinstance(t, ast.Name)}
                if not {(path.name, t) for t in targets} <= _INPUT_PATTERNS:
                    found.append(f"{path.name}:{node.lineno} re.compile")
    assert not found, f"error text rewritten in operators/cli: {found}"
