"""Each package's public surface is its `__all__`: every package declares one, every name in
it resolves, none repeats, and a star import gives exactly those names (httpx's
test_exported_members, for every package of labkit)."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

import labkit

pytestmark = pytest.mark.unit

LABKIT = Path(labkit.__file__).parent
PACKAGES = sorted(
    ".".join(("labkit", *init.parent.relative_to(LABKIT).parts))
    for init in LABKIT.rglob("__init__.py")
)


def _declared_all(package: str) -> list[str] | None:
    """`__all__` as the package's `__init__.py` writes it (None: not declared)."""
    init = LABKIT.joinpath(*package.split(".")[1:], "__init__.py")
    for node in ast.parse(init.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            value = ast.literal_eval(node.value)
            assert isinstance(value, list | tuple)
            return [str(v) for v in value]
    return None


def test_every_package_is_listed() -> None:
    assert "labkit" in PACKAGES
    for expected in ("labkit.analysis", "labkit.measurement", "labkit.wire.lean"):
        assert expected in PACKAGES


@pytest.mark.parametrize("package", PACKAGES)
def test_the_package_declares_its_public_names_once_and_each_resolves(package: str) -> None:
    names = _declared_all(package)
    assert names is not None, f"{package} has no __all__"
    assert len(names) == len(set(names)), f"{package}.__all__ repeats a name"
    module = importlib.import_module(package)
    missing = [name for name in names if not hasattr(module, name)]
    assert not missing, f"{package}.__all__ names what it does not hold: {missing}"


@pytest.mark.parametrize("package", PACKAGES)
def test_star_import_gives_exactly_the_declared_names(package: str) -> None:
    namespace: dict[str, object] = {}
    exec(f"from {package} import *", namespace)
    namespace.pop("__builtins__", None)
    assert sorted(namespace) == sorted(_declared_all(package) or [])
