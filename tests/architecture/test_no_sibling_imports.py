"""Experiments never import a sibling experiment: what two of them share (prompt sizing,
shared prefixes, traces, histories) lives in `labkit.workloads`, the scaffolding in
`labkit.experiments.base`, `.common` and `.paced`.

An experiment module is one that registers an experiment (`@register_experiment`); the
check reads the syntax trees, so it sees every import, at module level or inside a function.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import labkit.experiments

pytestmark = pytest.mark.unit

EXPERIMENTS = Path(labkit.experiments.__file__).parent

# The one edge allowed, with its reason: a sweep *is* a load experiment (a subclass that
# chooses its own levels). Level figures are `labkit.analysis.levels`, shared by all three.
ALLOWED = {("sweep", "load")}


def _tree(name: str) -> ast.Module:
    return ast.parse((EXPERIMENTS / f"{name}.py").read_text(encoding="utf-8"))


def _registers_experiment(tree: ast.Module) -> bool:
    classes = [node for node in ast.walk(tree) if isinstance(node, ast.ClassDef)]
    decorators = [d for c in classes for d in c.decorator_list]
    return any(isinstance(d, ast.Name) and d.id == "register_experiment" for d in decorators)


def _experiment_modules() -> list[str]:
    names = sorted(p.stem for p in EXPERIMENTS.glob("*.py") if p.stem != "__init__")
    return [n for n in names if _registers_experiment(_tree(n))]


def _imported_experiments(tree: ast.Module, experiments: set[str]) -> set[str]:
    """The experiment modules `tree` imports, however it spells the import."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module is not None:
            parts = node.module.split(".")
            if parts[:2] == ["labkit", "experiments"] and len(parts) > 2:
                found.add(parts[2])
            elif node.module == "labkit.experiments":
                found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[:2] == ["labkit", "experiments"] and len(parts) > 2:
                    found.add(parts[2])
    return found & experiments


def test_the_experiment_modules_are_found() -> None:
    names = _experiment_modules()
    assert {"load", "conversation", "prefill_decode", "trace", "sweep"} <= set(names)
    assert not {"base", "common", "paced"} & set(names)


def test_no_experiment_imports_a_sibling() -> None:
    experiments = set(_experiment_modules())
    edges = {
        (name, other)
        for name in experiments
        for other in _imported_experiments(_tree(name), experiments)
        if other != name
    }
    assert edges - ALLOWED == set()
    # An allowed edge that is gone should leave the list too.
    assert edges >= ALLOWED


def test_the_check_sees_a_sibling_import() -> None:
    tree = ast.parse(
        "from labkit.experiments.prefill_decode import filler_text\n"
        "def f():\n    import labkit.experiments.load\n"
    )
    assert _imported_experiments(tree, {"prefill_decode", "load", "trace"}) == {
        "prefill_decode",
        "load",
    }
