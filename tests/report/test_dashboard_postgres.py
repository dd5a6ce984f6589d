"""`labkit dashboard` over a real PostgreSQL store (a server the test starts, with a
password): the page of its rounds, with the cost a hand computation gives; the password in
the URL never reaches the page, its title or the terminal, and a wrong one is one line."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from labkit.cli import app
from tests.report.test_dashboard_store import _config, _store

pytestmark = pytest.mark.integration


def _password(url: str) -> str:
    return url.split("://", 1)[1].split("@", 1)[0].split(":", 1)[1]


def test_the_page_of_a_postgres_store_keeps_its_password(postgres_db: str, tmp_path: Path) -> None:
    _store(postgres_db, tmp_path)
    password = _password(postgres_db)
    page = tmp_path / "page.html"
    out = CliRunner().invoke(
        app,
        ["dashboard", postgres_db, "--config", str(_config(tmp_path / "c.yaml")), "-o", str(page)],
    )
    assert out.exit_code == 0, out.output
    text = page.read_text(encoding="utf-8")
    assert "rounds: 3" in text
    assert "0.001300" in text  # 1000 × 1.00 / 1e6 + 100 × 3.00 / 1e6 per request
    assert password not in text and password not in out.output
    assert "store: postgresql://labkit@127.0.0.1:" in text

    wrong = postgres_db.replace(f":{password}@", ":not-the-password@")
    out = CliRunner().invoke(app, ["dashboard", wrong, "-o", str(tmp_path / "other.html")])
    assert out.exit_code == 1
    lines = [line for line in out.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), out.output
    assert "not-the-password" not in out.output and password not in out.output
    assert not (tmp_path / "other.html").exists()
