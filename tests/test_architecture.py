"""The four packages depend one way: pde_data <- circuitop <- evaluation <- operators (README)."""

import ast
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
