"""`labkit report` and `labkit compare` through typer's CliRunner."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from labkit.report.cli import register
from tests.report.report_builders import make_record, mixed_records, write_run

pytestmark = pytest.mark.unit


def _app() -> typer.Typer:
    app = typer.Typer()
    register(app)
    return app


def test_report_command(tmp_path: Path) -> None:
    run_dir = write_run(tmp_path / "run", mixed_records())
    result = CliRunner().invoke(_app(), ["report", str(run_dir)])
    assert result.exit_code == 0, result.output
    assert str(run_dir / "report.md") in result.stdout
    assert (run_dir / "report.html").is_file()


def test_report_on_a_folder_that_is_not_a_run(tmp_path: Path) -> None:
    result = CliRunner().invoke(_app(), ["report", str(tmp_path)])
    assert result.exit_code == 1
    assert result.stderr.startswith("error: ")
    assert "records.jsonl is missing" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.output


def test_compare_command(tmp_path: Path) -> None:
    a = write_run(tmp_path / "a", [make_record(ttft_ms=100.0) for _ in range(3)])
    b = write_run(tmp_path / "b", [make_record(ttft_ms=120.0) for _ in range(3)])
    result = CliRunner().invoke(_app(), ["compare", str(a), str(b), "--out", str(tmp_path / "c")])
    assert result.exit_code == 0, result.output
    assert "+20.0" in result.stdout
    assert (tmp_path / "c" / "compare.md").is_file()


def test_compare_with_a_missing_run(tmp_path: Path) -> None:
    a = write_run(tmp_path / "a", [make_record()])
    result = CliRunner().invoke(_app(), ["compare", str(a), str(tmp_path / "missing")])
    assert result.exit_code == 1
    assert "error: " in result.stderr and "Traceback" not in result.output
