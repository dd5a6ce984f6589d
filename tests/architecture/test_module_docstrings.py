"""Every labkit module opens with a short docstring: what it is and why, ten lines at most.

The house style (README, "How we like the code"): reference material belongs in docs/, a
fact about one class or function in that thing's own docstring. Ruff's D1 rules say that
each public thing has a docstring; this says how long a module's may be, and asks one of the
private modules too (``_wire.py`` and the like, which D100 passes over).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

LABKIT = Path(__file__).resolve().parents[2] / "labkit"
MAX_LINES = 10


def docstring_lines(source: str) -> int | None:
    """Lines of a module's docstring, blank ones included (None: it has none)."""
    text = ast.get_docstring(ast.parse(source), clean=False)
    return None if text is None else len(text.strip().splitlines())


def test_the_count_sees_a_long_docstring_and_a_missing_one() -> None:
    assert docstring_lines('"""One line."""\n') == 1
    assert docstring_lines('"""First.\n\nThird.\n"""\nx = 1\n') == 3
    assert docstring_lines("x = 1\n") is None
    eleven = "\n".join(f"line {i}" for i in range(11))
    assert docstring_lines(f'"""{eleven}"""\n') == 11


def test_every_module_docstring_is_ten_lines_at_most() -> None:
    modules = sorted(LABKIT.rglob("*.py"))
    assert len(modules) > 100  # the package, not an empty glob
    missing, long = [], []
    for path in modules:
        n = docstring_lines(path.read_text(encoding="utf-8"))
        name = str(path.relative_to(LABKIT.parent))
        if n is None:
            missing.append(name)
        elif n > MAX_LINES:
            long.append(f"{name}: {n} lines")
    assert not missing, f"modules without a docstring: {missing}"
    assert not long, f"module docstrings over {MAX_LINES} lines: {long}"
