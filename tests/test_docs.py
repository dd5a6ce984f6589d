"""The README's links and the docs site's nav: every page the README points to exists, and
every page under docs/ is in mkdocs.yml's nav (`make docs` checks the links between pages)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]


def _nav_pages(entries: list[Any]) -> set[str]:
    pages: set[str] = set()
    for entry in entries:
        for value in entry.values() if isinstance(entry, dict) else [entry]:
            pages |= _nav_pages(value) if isinstance(value, list) else {value}
    return pages


def test_every_relative_link_in_the_readme_names_a_file() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)\s]+)\)", readme)
    local = [t.split("#")[0] for t in targets if not re.match(r"[a-z]+:", t)]
    assert local, "the README links to no page"
    missing = [t for t in local if t and not (ROOT / t).is_file()]
    assert missing == []


def test_every_docs_page_is_in_the_nav() -> None:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    pages = {p.name for p in (ROOT / "docs").glob("*.md")}
    assert _nav_pages(config["nav"]) == pages
