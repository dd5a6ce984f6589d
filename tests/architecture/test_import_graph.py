"""labkit's import graph, and what it must never hold: a circle of modules.

Read from the syntax tree of every module under `labkit/`: each `import` counts wherever it
stands (module level, inside a function, under `TYPE_CHECKING`), because a circle through a
deferred import is still a circle a reader must untangle. An import names the module it
reads (`from labkit.wire import loopclock` is `labkit.wire.loopclock`); the parent
package's `__init__` is not counted, so `labkit.wire`'s lazy exports are not a circle with
the modules that import one of its leaves. The layers built on this graph:
`test_layers.py`.
"""

from __future__ import annotations

import ast
import importlib
from collections.abc import Iterable
from pathlib import Path

import pytest

import labkit

pytestmark = pytest.mark.unit

LABKIT = Path(labkit.__file__).parent


def module_name(path: Path, root: Path = LABKIT) -> str:
    """`labkit/wire/lean/tcp.py` -> `labkit.wire.lean.tcp`."""
    parts = ["labkit", *path.relative_to(root).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(root: Path = LABKIT) -> dict[str, set[str]]:
    """Each labkit module and the labkit modules it imports (`root`: a copy of labkit/)."""
    paths = {module_name(p, root): p for p in root.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, base] if base else up)
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    targets.add(sub if sub in paths else base)
        graph[name] = {t for t in targets if t in paths and t != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def reachable(graph: dict[str, set[str]], starts: Iterable[str]) -> set[str]:
    """Every module the `starts` import, directly or through others."""
    seen: set[str] = set()
    todo = list(starts)
    while todo:
        for w in graph[todo.pop()]:
            if w not in seen:
                seen.add(w)
                todo.append(w)
    return seen


GRAPH = import_graph()


def test_the_check_sees_a_circle_and_deferred_imports() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
    # a deferred import inside a function is an edge like any other
    assert "labkit.providers.base" in GRAPH["labkit.measurement.recorder"]
    assert "labkit.local" in GRAPH["labkit.measurement.capacity"]


def test_labkit_has_no_import_cycle() -> None:
    assert cycles(GRAPH) == []


CONTRACTS = ["labkit.records", "labkit.figures", "labkit.manifest"]


def _in_contracts(module: str) -> bool:
    """A contract or a module of a contract package (`labkit.figures.single`)."""
    return any(module == c or module.startswith(f"{c}.") for c in CONTRACTS)


@pytest.mark.parametrize("contract", CONTRACTS)
def test_the_contracts_are_leaves(contract: str) -> None:
    modules = [m for m in GRAPH if m == contract or m.startswith(f"{contract}.")]
    assert modules
    assert all(_in_contracts(m) for m in reachable(GRAPH, modules))


@pytest.mark.parametrize("package", ["labkit.measurement", "labkit.wire", "labkit.wire.lean"])
def test_a_package_with_lazy_names_exports_what_its_all_names(package: str) -> None:
    module = importlib.import_module(package)
    for name in module.__all__:
        assert getattr(module, name) is not None, name
    with pytest.raises(AttributeError):
        _ = module.no_such_name
