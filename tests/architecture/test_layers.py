"""The layers labkit keeps: every package sits in one, and nothing imports upward.

Read from the syntax tree of every module under `labkit/` (`test_import_graph.import_graph`:
an import counts wherever it stands, inside a function or under `TYPE_CHECKING` too). A
*unit* is a top-level package or module of `labkit` (`labkit.wire`, `labkit.errors`); each
unit is placed in one layer below, and a unit may import its own modules, the units of its
own layer and the layers its layer uses, directly or through them. The units' own graph
has no circle, so two units of one layer never lean on each other both ways.

Two stacks share the lower layers: the one that measures (wire < providers < measurement <
experiments < runner) and the one that reads run folders (analysis < wording < report); the
report never reaches the measuring stack, so it works on a copied run with no provider
code. docs/architecture.md draws the same picture.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import labkit
from tests.architecture.test_import_graph import cycles, import_graph

pytestmark = pytest.mark.unit

LABKIT = Path(labkit.__file__).parent

#: Each layer: its units, and the layers it uses (and, through them, theirs).
LAYERS: dict[str, tuple[set[str], set[str]]] = {
    "foundation": (
        {
            "errors",
            "filenames",
            "boundedyaml",
            "jsonlines",
            "scrub",
            "terminal",
            "safefiles",
            "oslimits",
        },
        set(),
    ),
    "contracts": (
        {"records", "figures", "manifest", "timing", "clocksync", "provider_stats", "pricing"},
        {"foundation"},
    ),
    "platform": ({"local", "tokenizers", "tracing", "server_metrics", "truth"}, {"contracts"}),
    "wire": ({"wire"}, {"platform"}),
    "providers": ({"providers"}, {"wire"}),
    "measurement": ({"measurement", "workloads"}, {"providers"}),
    "analysis": ({"analysis"}, {"platform"}),
    "wording": ({"wording"}, {"analysis"}),
    "report": ({"report", "rundata", "store"}, {"wording"}),
    "experiments": ({"experiments"}, {"measurement", "wording"}),
    "runner": ({"config", "runner"}, {"experiments"}),
    "scoring": ({"scoring"}, {"report"}),
    "watch": ({"watch"}, {"runner", "report"}),
    "cli": ({"cli", "__init__", "__main__"}, {"runner", "report", "scoring", "watch"}),
}


def unit_of(module: str) -> str:
    """`labkit.wire.lean.tcp` -> `wire`; `labkit` (its `__init__`) -> `__init__`."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def layer_of() -> dict[str, str]:
    """Each unit and its layer's name."""
    return {unit: layer for layer, (units, _) in LAYERS.items() for unit in units}


def usable(layer: str) -> set[str]:
    """The layers `layer` may import: its own and those it uses, transitively."""
    seen = {layer}
    todo = [layer]
    while todo:
        for below in LAYERS[todo.pop()][1]:
            if below not in seen:
                seen.add(below)
                todo.append(below)
    return seen


def unit_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The module graph folded onto units (a unit's imports of itself left out)."""
    units: dict[str, set[str]] = {}
    for module, targets in graph.items():
        units.setdefault(unit_of(module), set()).update(
            unit_of(t) for t in targets if unit_of(t) != unit_of(module)
        )
    return units


def upward(graph: dict[str, set[str]]) -> list[str]:
    """Every import that leaves its layer for one it may not use, as `a -> b (layer < layer)`."""
    where = layer_of()
    found = []
    for module, targets in sorted(graph.items()):
        mine = where[unit_of(module)]
        for target in sorted(targets):
            theirs = where[unit_of(target)]
            if theirs not in usable(mine):
                found.append(f"{module} -> {target} ({mine} may not use {theirs})")
    return found


GRAPH = import_graph()


def test_every_unit_sits_in_one_layer() -> None:
    placed = [unit for units, _ in LAYERS.values() for unit in units]
    assert len(placed) == len(set(placed)), "a unit placed in two layers"
    unplaced = set(unit_graph(GRAPH)) - set(placed)
    assert not unplaced, f"place these in a layer of LAYERS: {sorted(unplaced)}"
    assert not set(placed) - set(unit_graph(GRAPH)), "a layer names a unit that is gone"


def test_the_layers_themselves_form_no_circle() -> None:
    assert cycles({name: uses for name, (_, uses) in LAYERS.items()}) == []


def test_nothing_imports_upward() -> None:
    assert upward(GRAPH) == []


def test_the_units_form_no_circle() -> None:
    assert cycles(unit_graph(GRAPH)) == []


def test_the_report_never_reaches_the_measuring_stack() -> None:
    assert not usable("report") & {"wire", "providers", "measurement", "experiments"}
    assert not usable("analysis") & {"wire", "providers", "measurement"}


def _plant(tmp_path: Path, module: Path, line: str) -> dict[str, set[str]]:
    tree = tmp_path / "labkit"
    shutil.copytree(LABKIT, tree, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    planted = tree / module
    planted.write_text(planted.read_text(encoding="utf-8") + f"\n{line}\n", encoding="utf-8")
    return import_graph(tree)


@pytest.mark.parametrize(
    ("module", "line"),
    [
        (Path("wire/sse.py"), "from labkit.providers.base import Provider"),
        (Path("analysis/stats.py"), "def f() -> None:\n    import labkit.experiments.base"),
        (Path("report/build.py"), "from labkit.measurement import recorder"),
        (Path("records.py"), "import labkit.wording"),
    ],
)
def test_a_planted_upward_import_fails_the_check(tmp_path: Path, module: Path, line: str) -> None:
    planted = upward(_plant(tmp_path, module, line))
    assert len(planted) == 1 and planted[0].startswith(_dotted(module)), planted


def _dotted(path: Path) -> str:
    return ".".join(["labkit", *path.with_suffix("").parts])
