"""Run folders → DataFrame: flattened contract names, truncated lines, lazy event offsets."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from labkit.errors import RunError
from labkit.report import load_event_offsets, load_run, load_runs
from tests.report.report_builders import write_run
from tests.support.records import make_record

pytestmark = pytest.mark.unit


def test_columns_follow_the_contract(tmp_path: Path) -> None:
    recs = [make_record(tags={"variant": "seed", "target_prompt_tokens": 512}, prefill_ms=5.0)]
    df = load_run(write_run(tmp_path / "run", recs)).records
    for col in (
        "run_id",
        "run_dir",
        "client.ttft_ms",
        "client.decode_ms_per_token",
        "provider_timings.prefill_ms",
        "usage.output_tokens",
        "app.prepare_ms",
        "app.client_path",
        "error.kind",
        "tags.variant",
        "tags.target_prompt_tokens",
    ):
        assert col in df.columns, col
    assert "client.event_offsets_ms" not in df.columns
    assert df.loc[0, "tags.target_prompt_tokens"] == 512.0
    assert df.loc[0, "provider_timings.prefill_ms"] == 5.0
    assert df.loc[0, "client.n_events"] == 20


def test_truncated_last_line_is_skipped(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    recs = [make_record(), make_record()]
    cut = recs[0].to_json_line()[:57]
    run_dir = write_run(tmp_path / "run", recs, tail=cut)
    with caplog.at_level(logging.WARNING):
        run = load_run(run_dir)
    assert len(run.records) == 2
    assert run.skipped_lines == 1
    assert any("skipped" in p for p in run.problems)
    assert "skipped" in caplog.text


def test_event_offsets_read_lazily(tmp_path: Path) -> None:
    recs = [
        make_record(ttft_ms=50.0, decode_ms_per_token=5.0, output_tokens=4),
        make_record(ttft_ms=70.0, decode_ms_per_token=1.0, output_tokens=3),
    ]
    df = load_run(write_run(tmp_path / "run", recs)).records
    offsets = load_event_offsets(df.iloc[[1]])
    assert offsets == {recs[1].record_id: [70.0, 71.0, 72.0]}


def test_load_runs_concatenates(tmp_path: Path) -> None:
    a = write_run(tmp_path / "a", [make_record(run_id="a")])
    b = write_run(tmp_path / "b", [make_record(run_id="b"), make_record(run_id="b")])
    df = load_runs([a, b])
    assert list(df["run_id"]) == ["a", "b", "b"]
    assert set(df["run_dir"]) == {str(a), str(b)}


def test_not_a_run_folder(tmp_path: Path) -> None:
    with pytest.raises(RunError, match=r"records\.jsonl is missing"):
        load_run(tmp_path)
    with pytest.raises(RunError, match="no such directory"):
        load_run(tmp_path / "nope")
