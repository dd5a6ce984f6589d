"""`labkit report` and `labkit compare` through typer's CliRunner."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from labkit.cli.report import register
from tests.report.report_builders import mixed_records, write_run
from tests.support.records import make_record

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


def _slowed_pair(tmp_path: Path) -> tuple[Path, Path]:
    a = write_run(tmp_path / "a", [make_record(ttft_ms=100.0 + i % 7) for i in range(30)])
    b = write_run(tmp_path / "b", [make_record(ttft_ms=160.0 + i % 7) for i in range(30)])
    return a, b


def test_compare_gate_fails_and_names_the_threshold(tmp_path: Path) -> None:
    a, b = _slowed_pair(tmp_path)
    summary = tmp_path / "summary.md"
    result = CliRunner().invoke(
        _app(),
        [
            "compare",
            str(a),
            str(b),
            "--fail-on",
            "ttft_p50>+10%,error_rate>+1pp",
            "--fail-on",
            "decode_p50>+5%",
            "--markdown",
            str(summary),
        ],
    )
    assert result.exit_code == 1, result.output
    assert "FAILED ttft_p50>+10%: local · single · m (b): +60.0 ms" in result.stderr
    assert "error_rate" not in result.stderr and "decode_p50" not in result.stderr
    text = summary.read_text()
    assert "❌ Gate failed" in text and "slower" in text


def test_compare_gate_passes(tmp_path: Path) -> None:
    a, b = _slowed_pair(tmp_path)
    result = CliRunner().invoke(_app(), ["compare", str(a), str(b), "--fail-on", "ttft_p50>+80%"])
    assert result.exit_code == 0, result.output
    assert "gate passed (1 comparison(s) checked)" in result.stderr


def test_compare_markdown_to_stdout(tmp_path: Path) -> None:
    a, b = _slowed_pair(tmp_path)
    result = CliRunner().invoke(_app(), ["compare", str(a), str(b), "--markdown", "-"])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("## labkit compare: a vs b")
    assert "| TTFT p50 " in result.stdout and "written:" not in result.stdout


@pytest.mark.parametrize("expr", ["ttft_p50>10", "ttft>+10%", "ttft_p50 => 3%"])
def test_compare_malformed_threshold_is_a_usage_error(tmp_path: Path, expr: str) -> None:
    a, b = _slowed_pair(tmp_path)
    result = CliRunner().invoke(_app(), ["compare", str(a), str(b), "--fail-on", expr])
    assert result.exit_code == 2
    assert result.stderr.startswith(f"error: --fail-on {expr!r}")
    assert "Traceback" not in result.output
    assert not (tmp_path / "compare-a-vs-b").exists()  # nothing computed or written


def test_compare_with_a_missing_run(tmp_path: Path) -> None:
    a = write_run(tmp_path / "a", [make_record()])
    result = CliRunner().invoke(_app(), ["compare", str(a), str(tmp_path / "missing")])
    assert result.exit_code == 1
    assert "error: " in result.stderr and "Traceback" not in result.output
