"""The four packages depend one way: pde_data <- circuitop <- evaluation <- operators (README); inside pde_data,
its layers depend one way too (core <- solvers, formats <- generate, datasets)."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: Each package may import only the packages listed for it.
ALLOWED = {
    "pde_data": set(),
    "circuitop": {"pde_data"},
    "evaluation": {"pde_data", "circuitop"},
    "operators": {"pde_data", "circuitop", "evaluation"},
}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found & set(ALLOWED)


def package_graph() -> dict[str, set[str]]:
    graph = {}
    for package in ALLOWED:
        deps = set()
        for path in (ROOT / package).rglob("*.py"):
            deps |= _imports(path)
        graph[package] = deps - {package}
    return graph


def _has_cycle(graph: dict[str, set[str]]) -> bool:
    state: dict[str, int] = {}

    def visit(node: str) -> bool:
        if state.get(node) == 1:
            return True
        if state.get(node) == 2:
            return False
        state[node] = 1
        if any(visit(dep) for dep in graph.get(node, ())):
            return True
        state[node] = 2
        return False

    return any(visit(node) for node in graph)


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_imports_follow_layer_order(package):
    illegal = package_graph()[package] - ALLOWED[package]
    assert not illegal, f"{package} imports {sorted(illegal)}, against the order in the README"


def test_package_graph_is_acyclic():
    assert not _has_cycle(package_graph())


def test_cycle_detector_detects_cycles():
    assert _has_cycle({"a": {"b"}, "b": {"a"}})
    assert not _has_cycle({"a": {"b"}, "b": set()})


def test_numerics_do_not_import_plotting_or_training():
    """Numerics (cells, solvers, metrics) never import matplotlib; only the plots module may."""
    offenders = []
    for package in ("circuitop", "pde_data"):
        for path in (ROOT / package).rglob("*.py"):
            tree = ast.parse(path.read_text())
            names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
            names |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
            if any(name.startswith("matplotlib") for name in names):
                offenders.append(str(path.relative_to(ROOT)))
    assert not offenders


#: consumers of the four packages: anything may use their public names, none their private modules
CONSUMERS = ("bench", "examples")


def _private_imports(path: Path, own: str | None) -> list[str]:
    """``pkg._module`` / ``from pkg import _name`` imports of another package's private parts."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        modules = []
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        for module in modules:
            parts = module.split(".")
            if parts[0] in ALLOWED and parts[0] != own and any(p.startswith("_") for p in parts[1:]):
                found.append(module)
    return found


@pytest.mark.parametrize("folder", [*sorted(ALLOWED), *CONSUMERS])
def test_no_private_imports_across_packages(folder):
    own = folder if folder in ALLOWED else None
    offenders = {str(path.relative_to(ROOT)): bad for path in (ROOT / folder).rglob("*.py")
                 if (bad := _private_imports(path, own))}
    assert not offenders, f"private cross-package imports: {offenders}"


@pytest.mark.parametrize("folder", CONSUMERS)
def test_consumers_import_only_the_packages_and_themselves(folder):
    """bench/ and examples/ sit above the four packages: nothing in the packages imports them."""
    for package in ALLOWED:
        for path in (ROOT / package).rglob("*.py"):
            assert folder not in _imports_all(path), f"{path.relative_to(ROOT)} imports {folder}"


def _imports_all(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module.split(".")[0] for n in ast.walk(tree)
              if isinstance(n, ast.ImportFrom) and n.level == 0 and n.module}
    return names


def _strings(path: Path) -> list[str]:
    """Every string constant of a module (f-string parts included) but its docstrings."""
    tree = ast.parse(path.read_text(), filename=str(path))
    owners = [tree, *(n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)))]
    docs = {id(o.body[0].value) for o in owners
            if o.body and isinstance(o.body[0], ast.Expr) and isinstance(o.body[0].value, ast.Constant)}
    return [n.value for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs]


#: the library's layers: their errors name Python parameters (``window=``), never command-line options
LIBRARY = ("pde_data", "circuitop", "evaluation", "operators/training", "operators/models")
#: option-like strings that are not ours (a compiler's ``--version``)
_NOT_OPTIONS = {"--version"}


def test_library_messages_name_parameters_not_options():
    import re

    option = re.compile(r"(?<![\w-])--[a-z][a-z-]*")
    offenders = {}
    for folder in LIBRARY:
        for path in (ROOT / folder).rglob("*.py"):
            found = {m for s in _strings(path) for m in option.findall(s)} - _NOT_OPTIONS
            if found:
                offenders[str(path.relative_to(ROOT))] = sorted(found)
    assert not offenders, f"library code naming command-line options: {offenders}"


#: the generic run layer: the trainer, the run, its loaders and evaluation know no task
GENERIC = ("trainer.py", "evaluate.py", "run.py", "data.py", "loader.py")
_TASK_WORDS = {"kind", "window", "windowed", "horizon", "classify", "classifying", "classes", "labels", "rollout",
               "steady", "sequence"}


def test_the_trainer_and_evaluation_have_no_task_branches():
    """What depends on the task lives in ``operators/training/tasks``: the generic modules name no task,
    no task-only setting and no task's data (as identifiers, attributes or strings)."""
    for name in GENERIC:
        path = ROOT / "operators" / "training" / name
        tree = ast.parse(path.read_text())
        words = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
        words |= {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
        words |= {s for s in _strings(path) if s.isidentifier()}
        assert not words & _TASK_WORDS, f"{name} names {sorted(words & _TASK_WORDS)}"


def _module_imports(path: Path, module: str, is_package: bool) -> set[str]:
    """The modules ``path`` imports anywhere in it (deferred imports inside functions too), relative ones resolved."""
    here = module.split(".") if is_package else module.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = here[: len(here) - node.level + 1] if node.level else []
            prefix = ".".join(base + ([node.module] if node.module else []))
            found |= {prefix} | {f"{prefix}.{a.name}" for a in node.names}
    return found


def test_no_import_cycles_between_modules_of_a_package():
    """No two modules of a package import each other, even lazily (e.g. a cell and its fast path)."""
    for package in ALLOWED:
        paths = {".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): p
                 for p in (ROOT / package).rglob("*.py")}
        graph = {m: {d for d in _module_imports(p, m, p.name == "__init__.py") if d in paths and d != m
                     and not m.startswith(d + ".") and not d.startswith(m + ".")}  # a package and its modules
                 for m, p in paths.items()}
        assert not _has_cycle(graph), f"an import cycle among the modules of {package}"


#: ``pde_data``'s layers and what each may import of the others (pde_data/__init__.py draws them)
LAYERS = {
    "core": set(),
    "solvers": {"core"},
    "formats": {"core"},
    "generate": {"core", "solvers", "formats"},
    "datasets": {"core", "formats"},
}


def _pde_data_imports(path: Path) -> set[str]:
    """The ``pde_data`` modules ``path`` imports, dotted (``pde_data.core.io``; ``pde_data`` for the facade)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == "pde_data"}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and \
                node.module.split(".")[0] == "pde_data":
            found.add(node.module)
    return found


def layer_violations(root: Path = ROOT / "pde_data") -> list[str]:
    """``"path imports module"`` for each import across ``pde_data``'s layers against :data:`LAYERS` (the
    facade ``pde_data`` itself counts as every layer), and each module outside a layer."""
    bad = []
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).parts
        if len(parts) == 1:
            if parts[0] != "__init__.py":
                bad.append(f"{path.name} lies outside the layers {sorted(LAYERS)}")
            continue
        layer = parts[0]
        allowed = {"pde_data." + name for name in LAYERS.get(layer, set()) | {layer}}
        for module in _pde_data_imports(path):
            if not any(module == a or module.startswith(a + ".") for a in allowed):
                bad.append(f"pde_data/{'/'.join(parts)} ({layer}) imports {module}")
    return bad


def test_pde_data_layers_import_downward_only():
    assert not layer_violations(), "\n".join(layer_violations())


def test_layer_check_fails_on_an_upward_import(tmp_path):
    for layer in LAYERS:
        (tmp_path / layer).mkdir()
        (tmp_path / layer / "__init__.py").write_text("")
    (tmp_path / "core" / "bad.py").write_text("from pde_data.formats.source import Source\n")
    (tmp_path / "solvers" / "worse.py").write_text("import pde_data\nfrom pde_data.generate import registry\n")
    (tmp_path / "stray.py").write_text("")
    assert sorted(layer_violations(tmp_path)) == [
        "pde_data/core/bad.py (core) imports pde_data.formats.source",
        "pde_data/solvers/worse.py (solvers) imports pde_data",
        "pde_data/solvers/worse.py (solvers) imports pde_data.generate",
        "stray.py lies outside the layers ['core', 'datasets', 'formats', 'generate', 'solvers']"]


def test_solvers_import_no_xarray():
    for path in (ROOT / "pde_data" / "solvers").rglob("*.py"):
        tree = ast.parse(path.read_text())
        names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        names |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        assert not any(n.split(".")[0] == "xarray" for n in names), f"{path.name} imports xarray"


def test_cells_import_only_the_core_of_pde_data():
    """``circuitop`` names only ``pde_data.core`` modules, and importing it loads no other part of ``pde_data``."""
    named = set()
    for path in (ROOT / "circuitop").rglob("*.py"):
        named |= _pde_data_imports(path)
    assert named and all(m.startswith("pde_data.core.") for m in named), sorted(named)
    code = ("import sys, circuitop, circuitop.apply; "
            "print(sorted(m for m in sys.modules if m.startswith('pde_data.') and not m.startswith('pde_data.core')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]", out.stdout
