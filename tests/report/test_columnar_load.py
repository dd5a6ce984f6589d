"""The run read once into columns: the same frame as line by line, bad lines named, and the
request statistics equal to those computed from the records themselves."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from labkit.analysis.columns import Columns
from labkit.analysis.requests import FIELDS, request_stats, request_stats_of
from labkit.records import RequestRecord
from labkit.report import load, load_run, run_stats, write_report
from labkit.report.build import REPORT_COLUMNS, build_blocks
from labkit.rundata import read_run, read_runs
from tests.report.report_builders import full_lab, write_run
from tests.support.records import make_record

pytestmark = pytest.mark.unit

#: The readers of a run: at once by DuckDB (the default), block by block by Arrow (a file
#: DuckDB cannot read), and line by line (a block Arrow refuses).
READERS = ["at once", "blocks", "line by line"]


def _use(reader: str, patch: pytest.MonkeyPatch) -> None:
    """Make `load_run` read with `reader` (one of READERS)."""
    if reader != "at once":
        patch.setattr(load, "read_at_once", lambda *args: None)
    if reader == "line by line":
        patch.setattr(load, "block_columns", lambda *args: None)


@pytest.fixture
def read_at_once_calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[object]]:
    """What each call of `read_at_once` returned (None: the file read block by block)."""
    calls: list[object] = []
    real = load.read_at_once
    monkeypatch.setattr(load, "read_at_once", lambda *a: calls.append(real(*a)) or calls[-1])
    yield calls


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


@pytest.mark.parametrize("reader", READERS)
def test_every_text_field_of_the_contract_reads_as_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reader: str
) -> None:
    """The sections' text fields are found from the contract's annotations: a list kept by
    hand had missed four, which every reader then read as numbers (all NaN)."""
    recs = _varied()[:2]
    recs[0].client.stamp_source = "kernel"
    recs[0].client.decode_null_reason = "one_token"
    recs[0].provider_timings.source = "llamacpp"
    recs[0].usage.streamed_output_null_reason = "hidden reasoning"
    run_dir = write_run(tmp_path / "run", recs)
    with monkeypatch.context() as patch:
        _use(reader, patch)
        row = load_run(run_dir).records.iloc[0]
    assert row["client.stamp_source"] == "kernel"
    assert row["client.decode_null_reason"] == "one_token"
    assert row["provider_timings.source"] == "llamacpp"
    assert row["usage.streamed_output_null_reason"] == "hidden reasoning"
    assert row["app.client_path"] == "sdk" and row["client.ttft_ms"] == 100.0


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
        for reader in READERS[1:]:
            with monkeypatch.context() as patch:
                _use(reader, patch)
                other = load_run(run_dir).records
            pd.testing.assert_frame_equal(at_once, other)
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


@pytest.mark.parametrize("reader", READERS)
def test_a_line_cut_short_and_one_not_json_are_named_and_every_good_record_is_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reader: str, read_at_once_calls: list[object]
) -> None:
    recs = _varied()
    clean = load_run(write_run(tmp_path / "clean", recs)).records
    lines = [r.to_json_line() for r in recs]
    lines.insert(25, "this is not JSON")
    run_dir = write_run(tmp_path / "dirty", [])
    cut = lines[7][: len(lines[7]) // 2]  # the last line of a killed run: no newline
    (run_dir / "records.jsonl").write_text("\n".join(lines) + "\n" + cut, encoding="utf-8")
    with monkeypatch.context() as patch:
        _use(reader, patch)
        dirty = load_run(run_dir)
    assert all(read is not None for read in read_at_once_calls)  # DuckDB did read it
    assert dirty.skipped_lines == 2
    problems = [p for p in dirty.problems if "records.jsonl" in p]
    assert len(problems) == 1  # one message, naming the lines and why the first is not read
    assert "2 line(s) of records.jsonl are not valid records" in problems[0]
    assert "(line 26, 62); line 26: not JSON" in problems[0]
    pd.testing.assert_frame_equal(
        dirty.records.drop(columns=["file_offset", "run_dir"]),
        clean.drop(columns=["file_offset", "run_dir"]),
    )


def test_the_bad_lines_are_found_by_the_reader_at_once(
    tmp_path: Path, read_at_once_calls: list[object]
) -> None:
    lines = [r.to_json_line() for r in _varied()]
    lines.insert(3, lines[3].replace('"prompt_chars":', '"prompt_chars":"12","x":', 1))
    lines.insert(9, "   ")  # white space only: no record, not a bad one
    run_dir = write_run(tmp_path / "run", [])
    (run_dir / "records.jsonl").write_text("\n".join(lines) + "\n{", encoding="utf-8")
    run = load_run(run_dir)
    assert (
        run.skipped_lines == 2
        and "(line 4, 63); line 4: no valid 'prompt_chars'" in (run.problems[0])
    )
    assert len(read_at_once_calls) == 1 and read_at_once_calls[0] is not None  # not by blocks
    assert len(run.records) == 60


def test_a_record_that_only_the_line_reader_reads_keeps_its_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    recs = _varied()[:9]
    run_dir = write_run(tmp_path / "run", recs)
    real = load.read_at_once

    def doubting_line_5(path: Path, wanted: frozenset[str] | None) -> object:
        read = real(path, wanted)
        assert read is not None
        pieces = read.pieces[0]
        keep = pieces["record_id"].to_numpy(zero_copy_only=False) != recs[4].record_id
        for name, values in pieces.items():
            pieces[name] = values.filter(keep) if hasattr(values, "filter") else values[keep]
        raw = (path).read_bytes()
        start = raw.index(recs[4].record_id.encode()) - len('{"run_id":"run-1","record_id":"')
        start = raw.rindex(b"\n", 0, start) + 1
        read.doubtful.append((5, start, raw.index(b"\n", start) + 1 - start))
        return read

    monkeypatch.setattr(load, "read_at_once", doubting_line_5)
    frame = load_run(run_dir).records
    assert list(frame["record_id"]) == [r.record_id for r in recs]
    assert frame.index.tolist() == list(range(9))


def _report_files(run_dir: Path) -> dict[str, bytes]:
    write_report(run_dir)
    names = ["report.md", "report.html", "summary.csv", "summary.parquet"]
    files = {name: (run_dir / name).read_bytes() for name in names}
    for path in sorted((run_dir / "report_files").rglob("*")):
        if path.is_file():
            files[str(path.relative_to(run_dir))] = path.read_bytes()
    return files


def test_the_report_is_the_same_whichever_reader_read_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, read_at_once_calls: list[object]
) -> None:
    run_dir = write_run(tmp_path / "run", _varied(), lab=full_lab(), tail='{"record_id": "cut')
    by_reader = {}
    for reader in READERS:
        with monkeypatch.context() as patch:
            _use(reader, patch)
            by_reader[reader] = _report_files(run_dir)
    assert read_at_once_calls and all(read is not None for read in read_at_once_calls)
    at_once = by_reader["at once"]
    assert len(at_once) > 4 and any(name.endswith(".png") for name in at_once)
    for reader in READERS[1:]:
        assert by_reader[reader].keys() == at_once.keys()
        for name, content in at_once.items():
            assert by_reader[reader][name] == content, f"{name} differs when read {reader}"


def test_a_folder_whose_name_duckdb_would_read_as_a_pattern_is_read_by_blocks(
    tmp_path: Path, read_at_once_calls: list[object]
) -> None:
    recs = _varied()[:6]
    plain = load_run(write_run(tmp_path / "run1", recs)).records
    patterned = load_run(write_run(tmp_path / "run[1]", recs)).records
    assert read_at_once_calls[0] is not None and read_at_once_calls[1] is None
    pd.testing.assert_frame_equal(patterned.drop(columns="run_dir"), plain.drop(columns="run_dir"))
