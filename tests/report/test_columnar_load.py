"""The run read once into columns: the same frame as line by line, bad lines named, and the
request statistics equal to those computed from the records themselves."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from labkit.analysis.columns import Columns
from labkit.analysis.requests import FIELDS, request_stats, request_stats_of
from labkit.records import RequestRecord
from labkit.report import load, load_run, run_stats
from labkit.report.build import REPORT_COLUMNS, build_blocks
from labkit.rundata import read_run, read_runs
from tests.report.report_builders import full_lab, write_run
from tests.support.records import make_record

pytestmark = pytest.mark.unit


def _varied() -> list[RequestRecord]:
    """Records that use every kind of column: tags of each type, errors, warm-ups, the
    split's terms, a load level's stamp lateness with per-event estimates."""
    recs: list[RequestRecord] = []
    for i in range(60):
        r = make_record(
            provider=("a", "b", "c")[i % 3],
            ttft_ms=100.0 + i,
            prefill_ms=80.0 + i / 2 if i % 3 != 2 else None,
            provider_decode_ms_per_token=9.0 if i % 3 == 0 else None,
            error_kind="http_status" if i % 17 == 5 else None,
            warmup=i < 3,
            client_path="sdk" if i % 7 == 0 else "wire",
            tags={"level": f"c{1 + i % 2}", "variant": "x" if i % 2 else "y", "share": i / 10},
        )
        r.tags.update(server_slots=4, in_flight_max=1 + i % 6)
        r.client.stamp_lateness_ms = [0.0] * 15 + [0.2 * (i % 4), 1.5 * (i % 5)] + [0.0] * 3
        r.client.stamp_lateness_ms_p50 = 0.0
        r.client.stamp_lateness_ms_p99 = max(r.client.stamp_lateness_ms)
        r.client.stamp_lateness_ms_max = max(r.client.stamp_lateness_ms)
        r.client.ttft_lateness_ms = 0.1 * (i % 3)
        r.client.loop_lag_ms = 0.05 * i
        r.client.new_connection = i % 2 == 0
        r.client.stamp_source = "user"
        r.app.cpu_ms = 3.0 + i
        r.provider_timings.keepalive_comments = 2 if i % 5 == 0 else None
        recs.append(r)
    return recs


def test_a_bad_line_costs_that_line_only_and_the_rest_reads_as_without_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    recs = _varied()
    line_by_line = []
    parse_block = load._parse_block
    monkeypatch.setattr(load, "_parse_block", lambda *a: line_by_line.append(1) or parse_block(*a))
    clean = load_run(write_run(tmp_path / "clean", recs)).records
    assert not line_by_line  # read at once, in columns
    lines = [r.to_json_line() for r in recs]
    lines.insert(10, '{"record_id": "half a line", "client": {"ttft_ms": 1')  # not JSON
    lines.insert(20, lines[20].replace('"provider":"', '"provider":7,"x":"', 1))  # a number
    lines.insert(30, lines[30].replace('"prompt_id":"p1",', "", 1))  # a required field
    lines.insert(40, "")
    run_dir = tmp_path / "dirty"
    write_run(run_dir, [])
    (run_dir / "records.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    dirty = load_run(run_dir)
    assert line_by_line  # the block with the bad lines, line by line
    assert dirty.skipped_lines == 3
    assert "(line 11, 21, 31)" in dirty.problems[0]
    pd.testing.assert_frame_equal(
        dirty.records.drop(columns=["file_offset", "run_dir"]),
        clean.drop(columns=["file_offset", "run_dir"]),
    )


def test_a_record_without_a_required_field_is_named_when_its_block_reads_at_once(
    tmp_path: Path,
) -> None:
    recs = _varied()
    lines = [r.to_json_line() for r in recs]
    lines[7] = lines[7].replace('"prompt_id":"p1"', '"prompt_id":null', 1)
    run_dir = write_run(tmp_path / "run", [])
    (run_dir / "records.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    run = load_run(run_dir)
    assert run.skipped_lines == 1 and "(line 8)" in run.problems[0]
    assert len(run.records) == len(recs) - 1


def test_each_row_keeps_the_byte_offset_of_its_line(tmp_path: Path) -> None:
    recs = _varied()[:5]
    run_dir = write_run(tmp_path / "run", recs)
    frame = load_run(run_dir).records
    raw = (run_dir / "records.jsonl").read_bytes()
    for offset, record_id in zip(frame["file_offset"], frame["record_id"], strict=True):
        line = raw[offset : raw.index(b"\n", offset)]
        assert RequestRecord.from_json_line(line.decode()).record_id == record_id


def test_tags_keep_their_types_as_columns(tmp_path: Path) -> None:
    frame = load_run(write_run(tmp_path / "run", _varied())).records
    assert frame["tags.share"].dtype == float and frame["tags.share"].iloc[4] == 0.4
    assert frame["tags.level"].iloc[0] == "c1" and frame["tags.server_slots"].iloc[0] == 4.0
    assert frame["client.new_connection"].iloc[0] == 1.0
    assert frame["client.n_events"].iloc[0] == 20


def test_statistics_from_the_columns_equal_those_from_the_records(tmp_path: Path) -> None:
    recs = _varied()
    from_columns = run_stats(None, load_run(write_run(tmp_path / "run", recs)))
    assert from_columns == request_stats(recs)
    assert any(s.ttft_split.queue_source for s in from_columns)


def test_read_runs_reads_each_run_into_one_frame(tmp_path: Path) -> None:
    recs = _varied()
    one = write_run(tmp_path / "one", recs[:30])
    two = write_run(tmp_path / "two", recs[30:])
    frame = read_runs([one, two])
    assert len(frame) == len(recs) and set(frame["run_dir"]) == {str(one), str(two)}


def test_the_statistics_read_only_the_fields_they_list() -> None:
    cols = Columns.of_records(_varied())
    request_stats_of(cols)
    assert cols.asked <= set(FIELDS)


def test_the_report_read_with_its_columns_only_is_the_report_of_the_whole_frame(
    tmp_path: Path,
) -> None:
    for name, lab in (("lab", full_lab()), ("records only", None)):
        run_dir = write_run(tmp_path / name, _varied(), lab=lab)
        whole = build_blocks(load_run(run_dir))
        assert build_blocks(load_run(run_dir, REPORT_COLUMNS)) == whole
        assert len(whole[1]) > 10


def test_tags_stay_on_their_rows_when_a_line_has_none_or_a_nested_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    recs = _varied()[:12]
    recs[6].params = {"tags": {"level": "not this one"}}
    lines = [r.to_json_line() for r in recs]
    lines[3] = lines[3].replace('"tags":{', '"labels":{', 1)
    for name, chosen in (("untagged", lines), ("nested", [r.to_json_line() for r in recs])):
        run_dir = write_run(tmp_path / name, [])
        (run_dir / "records.jsonl").write_text("\n".join(chosen) + "\n", encoding="utf-8")
        at_once = load_run(run_dir).records
        with monkeypatch.context() as patch:
            patch.setattr(load, "block_columns", lambda *args: None)
            by_line = load_run(run_dir).records
        pd.testing.assert_frame_equal(at_once, by_line)
        assert at_once["tags.level"].iloc[6] == "c1"


def test_read_run_keeps_the_columns_asked_for_with_the_identity_and_tags(tmp_path: Path) -> None:
    run_dir = write_run(tmp_path / "run", _varied())
    frame = read_run(run_dir, columns=["client.ttft_ms"])
    whole = read_run(run_dir)
    assert set(frame.columns) == {
        "run_id", "run_dir", "file_offset", "ok", "warmup", "record_id", "client.ttft_ms",
        *(c for c in whole.columns if c.startswith("tags.")),
    }  # fmt: skip
    pd.testing.assert_frame_equal(frame, whole[frame.columns])
