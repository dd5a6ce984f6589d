"""Runs as data: `labkit.read_run` / `read_runs`, and the DuckDB example in docs/runs.md."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import labkit
from labkit.errors import RunError
from tests.report.report_builders import write_run
from tests.support.records import make_record

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]


def _two_runs(root: Path) -> list[Path]:
    before = [make_record(run_id="before", ttft_ms=50.0 + i) for i in range(10)]
    before.append(make_record(run_id="before", error_kind="timeout"))
    after = [
        make_record(run_id="after", ttft_ms=80.0 + i, tags={"variant": "x"}) for i in range(10)
    ]
    after.append(make_record(run_id="after", ttft_ms=999.0, warmup=True))
    return [write_run(root / "runs" / "before", before), write_run(root / "runs" / "after", after)]


def test_read_run_flattens_the_contract(tmp_path: Path) -> None:
    before, _ = _two_runs(tmp_path)
    df = labkit.read_run(before)
    assert len(df) == 11 and set(df["run_id"]) == {"before"}
    for column in (
        "client.ttft_ms",
        "client.decode_ms_per_token",
        "provider_timings.prefill_ms",
        "usage.output_tokens",
        "app.client_path",
        "error.kind",
        "plan_key",
        "host",
        "ok",
        "warmup",
    ):
        assert column in df.columns, column
    assert df["client.ttft_ms"].iloc[:10].tolist() == [50.0 + i for i in range(10)]
    assert df["error.kind"].tolist().count("timeout") == 1 and df["ok"].sum() == 10
    assert "client.event_offsets_ms" not in df.columns
    # The records file itself is accepted too.
    assert len(labkit.read_run(before / "records.jsonl")) == 11


def test_read_runs_stacks_runs_with_their_run_id(tmp_path: Path) -> None:
    df = labkit.read_runs(_two_runs(tmp_path))
    assert df["run_id"].value_counts().to_dict() == {"before": 11, "after": 11}
    ok = df[df["ok"] & ~df["warmup"]]
    p50 = ok.groupby("run_id")["client.ttft_ms"].median()
    assert p50.to_dict() == {"after": 84.5, "before": 54.5}
    assert df.loc[df["run_id"] == "before", "tags.variant"].isna().all()
    assert labkit.read_runs([]).empty


def test_read_run_on_a_folder_that_is_not_a_run(tmp_path: Path) -> None:
    with pytest.raises(RunError, match="not a run folder"):
        labkit.read_run(tmp_path)


def test_import_labkit_stays_cheap() -> None:
    code = "import sys, labkit; assert 'pandas' not in sys.modules; labkit.read_run; print('ok')"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.stdout.strip() == "ok", done.stderr
    with pytest.raises(AttributeError):
        _ = labkit.no_such_thing  # type: ignore[attr-defined]


def test_the_cli_and_the_runner_start_without_scipy_stats() -> None:
    """scipy.stats costs half a second to import; only an analysis that uses it imports it
    (every `labkit` command and every worker process of a level would pay it otherwise)."""
    code = (
        "import sys, labkit.cli.app, labkit.runner.worker_body; "
        "assert 'scipy.stats' not in sys.modules, 'scipy.stats imported at start-up'; print('ok')"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.stdout.strip() == "ok", done.stderr


def _docs_duckdb_example() -> str:
    page = (ROOT / "docs" / "runs.md").read_text(encoding="utf-8")
    match = re.search(r"<!-- duckdb-example:[^>]*-->\n```python\n(.*?)```", page, re.S)
    assert match is not None, "the DuckDB example in docs/runs.md is missing"
    return match.group(1)


def test_the_docs_duckdb_example_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _two_runs(tmp_path)
    monkeypatch.chdir(tmp_path)
    exec(compile(_docs_duckdb_example(), "docs/runs.md", "exec"), {})
    out = capsys.readouterr().out
    rows = {line.split("│")[1].strip(): line for line in out.splitlines() if "│ local" in line}
    assert set(rows) == {"before", "after"}
    assert "54.5" in rows["before"] and "84.5" in rows["after"]  # failures, warm-ups left out
    assert re.search(r"│\s+10\s+│", rows["before"]) and re.search(r"│\s+10\s+│", rows["after"])
