"""`labkit watch` as a command: a user's mistakes are one line and a non-zero exit, and the
status of a watch folder is printed whether or not a watch runs there."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from typer.testing import CliRunner

from labkit.cli import app
from labkit.watch import WatchState
from labkit.watch.state import write_state

pytestmark = pytest.mark.unit


def _invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.output


def test_status_of_a_folder_without_a_watch_is_one_line_and_exit_1(tmp_path: Path) -> None:
    code, out = _invoke("watch", "status", str(tmp_path))
    assert code == 1
    assert (
        out.strip()
        == f"error: {tmp_path} holds no watch (no state.json); start one with labkit watch"
    )
    code, out = _invoke("watch", "status")
    assert code == 1 and "give one watch folder" in out


def test_a_config_without_a_watch_section_is_refused_in_one_line(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        "name: c\nproviders: [{id: p, kind: fake, model: m}]\nexperiments: [{kind: single}]\n"
    )
    code, out = _invoke("watch", str(cfg))
    assert code == 1 and len(out.strip().splitlines()) == 1
    assert "this config has no watch: section" in out
    code, out = _invoke("watch", str(tmp_path / "missing.yaml"))
    assert code == 1 and "no such config file" in out


def test_status_prints_the_state_of_a_stopped_watch(tmp_path: Path) -> None:
    state = WatchState(
        watch_id="probe-1a2b",
        name="probe",
        clock="simulated",
        anchor=datetime(2026, 1, 5, tzinfo=UTC),
        every_s=3600.0,
        store="w/watch.duckdb",
        stopped="3 rounds done (watch.rounds)",
        max_rounds=3,
    )
    write_state(tmp_path, state)
    code, out = _invoke("watch", "status", str(tmp_path))
    assert code == 0, out
    assert "watch probe-1a2b (probe)" in out and "stopped: 3 rounds done" in out
    assert "next: nothing; the watch stopped" in out
