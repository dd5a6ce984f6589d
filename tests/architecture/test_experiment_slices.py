"""An experiment kind is one slice: its own modules, and no hub module that knows it.

A kind lives in `labkit/experiments/<kind>.py` (registered by `kind`), its figures in
`labkit/figures/<kind>.py`, its sentences in `labkit/wording/<kind>.py`, its part of the
report in `labkit/report/kinds/<kind>.py` and any analysis of its own in
`labkit/analysis/<kind>.py`. The hubs that serve every kind — the shared modules of
figures/ and wording/, experiments/__init__.py and base.py, the report's modules outside
its kind modules, config.py, runner/ and cli/ — find kinds through their registries: none
names a kind as a string literal or imports a kind's module. Read from the syntax tree, so
prose in docstrings and comments ("a load level") is free.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import labkit
from labkit.experiments import experiment_class, experiment_kinds
from labkit.figures import FIGURE_KINDS
from labkit.figures.base import figures_models

pytestmark = pytest.mark.unit

LABKIT = Path(labkit.__file__).parent
KINDS = frozenset(experiment_kinds())

#: The packages that hold one module per kind (`labkit.figures.load`).
SLICE_PACKAGES = (
    "labkit.experiments",
    "labkit.figures",
    "labkit.wording",
    "labkit.report.kinds",
    "labkit.analysis",
)

#: Mentions allowed where they are, each for a reason that is not the kind's own code.
#: (path relative to labkit/, the kind named) -> why
ALLOWED: dict[tuple[str, str], str] = {
    ("cli/truth.py", "load"): "the experiment name a peer's imported records carry by default "
    "(labkit.scoring.imports.import_results has the same default): a label for the records",
}


def kind_modules(kinds: frozenset[str] = KINDS) -> frozenset[str]:
    """Every module a kind may own (`labkit.report.kinds.sweep`), whether or not it exists."""
    return frozenset(f"{package}.{kind}" for package in SLICE_PACKAGES for kind in kinds)


def is_hub(where: str, kinds: frozenset[str] = KINDS) -> bool:
    """Whether the module at `where` (relative to labkit/) serves every kind."""
    parts = where.split("/")
    stem = Path(where).stem
    if parts[0] in ("figures", "wording"):
        return stem not in kinds
    if parts[0] == "experiments":
        return where in ("experiments/__init__.py", "experiments/base.py")
    if parts[0] == "report":
        return not (parts[:2] == ["report", "kinds"] and stem in kinds)
    return where == "config.py" or parts[0] in ("runner", "cli")


def _imported(node: ast.Import | ast.ImportFrom, package: str) -> list[str]:
    """The modules an import may read: `from labkit.figures import load` reads
    `labkit.figures` and `labkit.figures.load`; a relative import is resolved in `package`."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        up = package.split(".")[: len(package.split(".")) - node.level + 1]
        base = ".".join([*up, base] if base else up)
    return [base] + [f"{base}.{alias.name}" for alias in node.names]


def offences(source: str, where: str, kinds: frozenset[str] = KINDS) -> list[str]:
    """Each place in `source` (the module at `where`, relative to labkit/) naming a kind."""
    package = ".".join(["labkit", *Path(where).parent.parts])  # what `from . import` reads
    owned = kind_modules(kinds)
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if node.value in kinds and (where, node.value) not in ALLOWED:
                found.append(f"{where}:{line}: string {node.value!r} is an experiment kind")
        elif isinstance(node, ast.Import | ast.ImportFrom):
            for name in _imported(node, package):
                if name in owned:
                    found.append(f"{where}:{line}: imports the kind module {name}")
    return sorted(found, key=lambda f: int(f.split(":")[1]))


def hubs(root: Path = LABKIT) -> list[Path]:
    """The hub modules under `root` (a copy of labkit/)."""
    return [p for p in sorted(root.rglob("*.py")) if is_hub(p.relative_to(root).as_posix())]


def test_each_kind_lives_in_its_own_modules() -> None:
    assert {"load", "sweep", "trace", "attribution", "next_token"} <= KINDS
    assert set(FIGURE_KINDS) == KINDS
    for kind in KINDS:
        assert experiment_class(kind).__module__ == f"labkit.experiments.{kind}"
        assert figures_models()[kind].__module__ == f"labkit.figures.{kind}"


def test_the_hubs_are_the_shared_modules() -> None:
    found = {p.relative_to(LABKIT).as_posix() for p in hubs()}
    expected = {"figures/__init__.py", "figures/levels.py", "wording/common.py"}
    expected |= {"experiments/__init__.py", "experiments/base.py", "config.py"}
    expected |= {"report/build.py", "report/charts.py", "report/kinds/__init__.py"}
    expected |= {"runner/summary.py", "cli/app.py"}
    assert expected <= found
    assert not {"figures/load.py", "wording/sweep.py", "report/kinds/load.py"} & found
    assert not {"experiments/load.py", "experiments/paced.py", "analysis/stats.py"} & found


def test_no_hub_module_names_a_kind() -> None:
    found = [
        offence
        for path in hubs()
        for offence in offences(
            path.read_text(encoding="utf-8"), path.relative_to(LABKIT).as_posix()
        )
    ]
    assert found == [], "experiment kinds named in hub modules:\n" + "\n".join(found)


def test_prose_passes_and_a_kind_module_is_no_hub() -> None:
    source = (
        '"""A load level; the sweep\'s knee."""\n'
        "# the trace replay's level\n"
        "from labkit.figures import LoadLevel\n"
        "from labkit.report.load import RunData\n"  # the run loader, not a kind module
        "LOAD = 'load levels'\n"
    )
    assert offences(source, "report/build.py") == []
    kind_module = (LABKIT / "report/kinds/load.py").read_text(encoding="utf-8")
    assert not is_hub("report/kinds/load.py") and offences(kind_module, "report/kinds/load.py")


@pytest.mark.parametrize(
    ("where", "planted", "expected"),
    [
        ("report/build.py", "ORDER = ['single', 'tokens']", "string 'single'"),
        ("report/charts.py", "from labkit.report.kinds import sweep", "labkit.report.kinds.sweep"),
        ("runner/summary.py", "from labkit.figures.load import LoadFigures", "labkit.figures.load"),
        ("figures/levels.py", "import labkit.figures.trace", "labkit.figures.trace"),
        ("figures/__init__.py", "from . import session", "labkit.figures.session"),
        ("wording/common.py", "def f():\n    from labkit.wording import load", "wording.load"),
        ("experiments/__init__.py", "from labkit.experiments import load", "experiments.load"),
        ("experiments/base.py", "KINDS = {'next_token': 1}", "string 'next_token'"),
        ("config.py", "import labkit.analysis.next_token", "labkit.analysis.next_token"),
        ("cli/app.py", "if kind == 'prefill_decode':\n    pass", "string 'prefill_decode'"),
    ],
)
def test_a_planted_mention_fails_the_check(where: str, planted: str, expected: str) -> None:
    assert is_hub(where)
    source = (LABKIT / where).read_text(encoding="utf-8")
    assert offences(source, where) == []
    found = offences(f"{source}\n{planted}\n", where)
    assert len(found) == 1 and expected in found[0], found
