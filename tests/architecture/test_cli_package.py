"""The CLI is one package, `labkit.cli`, and the tokenizers are a leaf again: no command
module lives elsewhere, and `labkit.tokenizers` imports nothing of labkit but its errors
(the CLI wires a provider's or the local server's tokenizer in, `labkit.cli.tokens`)."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

import labkit
from labkit.cli import app, main

pytestmark = pytest.mark.unit

LABKIT = Path(labkit.__file__).parent


def _labkit_imports(path: Path) -> set[str]:
    """The labkit modules `path` imports, at module level or inside a function."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {name for name in found if name == "labkit" or name.startswith("labkit.")}


def test_every_command_module_is_in_the_cli_package() -> None:
    elsewhere = [
        p.relative_to(LABKIT).as_posix()
        for p in LABKIT.rglob("cli.py")
        if p.parent != LABKIT / "cli"
    ]
    assert elsewhere == []
    assert not (LABKIT / "cli.py").exists()


def test_tokenizers_import_only_labkit_errors() -> None:
    modules = sorted((LABKIT / "tokenizers").rglob("*.py"))
    assert modules
    imports = set().union(*(_labkit_imports(p) for p in modules))
    assert imports - {"labkit.errors"} == set()


def test_the_console_script_and_python_m_reach_the_same_main() -> None:
    pyproject = tomllib.loads((LABKIT.parent / "pyproject.toml").read_text(encoding="utf-8"))
    assert pyproject["project"]["scripts"]["labkit"] == "labkit.cli:main"
    assert callable(main)
    assert app.info.name == "labkit"
    assert "from labkit.cli import main" in (LABKIT / "__main__.py").read_text(encoding="utf-8")
