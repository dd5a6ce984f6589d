"""The columnar sidecar in parts (byte ranges of records.jsonl converted as it grows):
every line read once across the parts whatever the boundaries, the same frame and report
as records.jsonl read whole, a half-converted run completed by its reader, and a
truncated or rewritten records.jsonl rebuilt, never misread."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd
import pytest

from labkit.report import columnar, load_run
from labkit.report.columnar import SIDECAR_DIR, SIDECAR_INDEX
from tests.report.report_builders import write_run
from tests.report.test_columnar_load import _report_files, _varied
from tests.support.records import make_record

pytestmark = pytest.mark.unit


def _lines() -> list[str]:
    """`_varied`'s records (errors, warm-ups, tags of each type, client paths; a second
    experiment and model), a line that is not a record, a blank line and one that repeats
    a record, as records.jsonl's lines."""
    recs = _varied()
    for i, r in enumerate(recs):
        if i % 4 == 1:
            r.experiment = "token_ratio"
            r.model = "m2"
    lines = [r.to_json_line() + "\n" for r in recs]
    lines.insert(5, "not json\n")
    lines.insert(9, "   \n")
    lines.append(recs[7].to_json_line() + "\n")  # repeats a record read before
    return lines


def _index(run_dir: Path) -> dict[str, object]:
    data: dict[str, object] = json.loads((run_dir / SIDECAR_INDEX).read_text())
    return data


def _whole(run_dir: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[pd.DataFrame, object]:
    with monkeypatch.context() as patch:
        patch.setattr(columnar, "SIDECAR_MIN_BYTES", 1 << 62)
        whole = load_run(run_dir)
    return whole.records, (whole.problems, whole.skipped_lines, whole.repeated_records)


def _recorded_in_steps(run_dir: Path, lines: list[str], cuts: list[int], tail: str) -> None:
    """Write `lines` as a run records them, converting (not final) at each byte count of
    `cuts`, which may fall inside a line; `tail` last (a cut line)."""
    text = "".join(lines) + tail
    write_run(run_dir, [])
    path = run_dir / "records.jsonl"
    path.write_text("")
    at = 0
    for cut in [*cuts, len(text)]:
        with path.open("a", encoding="utf-8") as fh:
            fh.write(text[at:cut])
        at = cut
        assert columnar.convert(run_dir, final=False)


@pytest.mark.parametrize("step", [1, 3, 7])
def test_parts_cover_every_line_once_and_read_as_the_whole_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, step: int
) -> None:
    lines = _lines()
    run_dir = tmp_path / "run"
    # Boundaries every `step` lines, half of them in the middle of a line (and so inside a
    # statistics group, whose rows then lie in several parts).
    ends = [sum(len(x) for x in lines[: i + 1]) for i in range(len(lines))]
    cuts = [
        max(end - (7 if i % 2 else 0), ends[max(0, (i + 1) * step - 2)])
        for i, end in enumerate(ends[step - 1 :: step])
    ]
    assert cuts == sorted(cuts)
    _recorded_in_steps(run_dir, lines, cuts, '{"record_id": "cut')
    index = _index(run_dir)
    parts = index["parts"]
    assert isinstance(parts, list) and len(parts) > 2
    size = (run_dir / "records.jsonl").stat().st_size
    # The ranges follow each other, each ends a line, and the last stops before the cut one.
    assert [p["start"] for p in parts] == [0] + [p["end"] for p in parts[:-1]]
    assert parts[-1]["end"] == size - len('{"record_id": "cut')
    assert index["repeated"] is None  # found once the parts are complete
    whole, notes = _whole(run_dir, monkeypatch)
    monkeypatch.setattr(columnar, "SIDECAR_MIN_BYTES", 0)
    through = load_run(run_dir)
    pd.testing.assert_frame_equal(through.records, whole)
    assert (through.problems, through.skipped_lines, through.repeated_records) == notes
    # Not JSON and the cut line (the line of spaces is blank); one repeat.
    assert through.skipped_lines == 2 and through.repeated_records == 1
    final = _index(run_dir)["parts"]
    assert isinstance(final, list) and final[:-1] == parts  # only the tail was converted
    side = columnar.open_sidecar(run_dir)
    assert side is not None and side.rows == len(whole) + 1  # the repeat is a row, dropped
    offsets = side.read(None, ["file_offset"]).column("file_offset").to_pylist()
    assert len(offsets) == len(set(offsets))  # no line in two parts


def test_a_report_of_parts_is_the_report_read_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lines = _lines()
    run_dir = tmp_path / "run"
    cuts = [sum(len(x) for x in lines[:n]) + 3 for n in (4, 11, 12, 25)]
    _recorded_in_steps(run_dir, lines, cuts, '{"record_id": "cut')
    with monkeypatch.context() as patch:
        patch.setattr(columnar, "SIDECAR_MIN_BYTES", 1 << 62)
        whole = _report_files(run_dir)
    monkeypatch.setattr(columnar, "SIDECAR_MIN_BYTES", 0)
    assert _report_files(run_dir) == whole
    assert len(_index(run_dir)["parts"]) == 6  # type: ignore[arg-type]


def test_a_run_killed_with_half_its_parts_is_completed_by_its_reader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lines = _lines()
    run_dir = write_run(tmp_path / "run", [])
    path = run_dir / "records.jsonl"
    path.write_text("".join(lines[:15]) + lines[15][:20])  # killed in the middle of a line
    assert columnar.convert(run_dir, final=False)
    half = _index(run_dir)["parts"]
    assert isinstance(half, list) and len(half) == 1 and half[0]["end"] < path.stat().st_size
    # A resume cuts the partial line off and appends the rest.
    path.write_text("".join(lines))
    whole, notes = _whole(run_dir, monkeypatch)
    monkeypatch.setattr(columnar, "SIDECAR_MIN_BYTES", 0)
    through = load_run(run_dir)
    pd.testing.assert_frame_equal(through.records, whole)
    assert (through.problems, through.skipped_lines, through.repeated_records) == notes
    parts = _index(run_dir)["parts"]
    assert isinstance(parts, list) and parts[0] == half[0] and len(parts) == 2
    # A long rest, copied out for DuckDB, is converted in parts of at most MAX_PART_BYTES.
    more = [make_record(provider="late", ttft_ms=float(i)).to_json_line() + "\n" for i in range(9)]
    path.write_text("".join(lines) + "".join(more))
    monkeypatch.setattr(columnar, "MAX_PART_BYTES", 5000)
    assert len(load_run(run_dir).records) == len(whole) + 9
    before = parts
    parts = _index(run_dir)["parts"]
    assert isinstance(parts, list) and parts[:2] == before
    assert len(parts) > 3 and all(p["end"] - p["start"] <= 5000 for p in parts[2:])


@pytest.mark.parametrize("change", ["truncated", "first line rewritten", "cut line continued"])
def test_a_changed_records_file_is_rebuilt_never_misread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: str
) -> None:
    lines = _lines()
    run_dir = write_run(tmp_path / "run", [])
    path = run_dir / "records.jsonl"
    cut = "" if change == "first line rewritten" else '{"record_id": "cu'
    path.write_text("".join(lines[:20]) + cut)
    monkeypatch.setattr(columnar, "SIDECAR_MIN_BYTES", 0)
    assert len(load_run(run_dir).records) and columnar.open_sidecar(run_dir) is not None
    if change == "truncated":
        path.write_text("".join(lines[:12]))
    elif change == "first line rewritten":
        first = lines[0].replace('"provider":"a"', '"provider":"z"', 1)
        assert len(first) == len(lines[0]) and first != lines[0]
        path.write_text(first + "".join(lines[1:25]))  # grown too: only the fingerprint tells
    else:  # the cut line is continued: the part that ended inside it is stale
        path.write_text("".join(lines[:20]) + '{"record_id": "cu' + lines[20][15:])
    assert columnar.open_sidecar(run_dir) is None
    whole, notes = _whole(run_dir, monkeypatch)
    through = load_run(run_dir)
    pd.testing.assert_frame_equal(through.records, whole)
    assert (through.problems, through.skipped_lines, through.repeated_records) == notes
    parts = _index(run_dir)["parts"]
    assert isinstance(parts, list) and len(parts) == 1  # rebuilt from the start


def test_yesterdays_single_file_sidecar_is_removed_and_never_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_dir = write_run(
        tmp_path / "run", [make_record(provider="p", ttft_ms=float(i)) for i in range(5)]
    )
    (run_dir / "records.columns.parquet").write_bytes(b"PAR1 not really")
    (run_dir / "records.columns.json").write_text(json.dumps({"version": 2, "groups": []}))
    monkeypatch.setattr(columnar, "SIDECAR_MIN_BYTES", 0)
    assert len(load_run(run_dir).records) == 5
    assert not (run_dir / "records.columns.parquet").exists()
    assert not (run_dir / "records.columns.json").exists()
    assert (run_dir / SIDECAR_DIR / "part-00000.parquet").is_file()


def test_a_part_records_the_process_that_converted_it(tmp_path: Path) -> None:
    run_dir = write_run(tmp_path / "run", [make_record(provider="p", ttft_ms=1.0)])
    assert columnar.convert(run_dir)
    side = columnar.open_sidecar(run_dir)
    assert side is not None and side.converted_by == [os.getpid()]


@pytest.mark.parametrize(
    "index",
    [
        b"[" * 100_000 + b"]" * 100_000,  # nested too deep for the JSON reader
        b'{"version": \xff\xfe}',  # not UTF-8
        b'{"version": NaN, "parts": [{"start": NaN, "end": Infinity}]}',
        b'{"version": "x", "parts": "not a list"}',
        b'{"version": 3, "parts": [{"start": "0", "end": [1]}]}',
        b'{"parts": [',  # cut short
    ],
    ids=["deep", "not-utf8", "nan", "wrong-types", "wrong-part-types", "truncated"],
)
def test_a_hostile_index_is_rebuilt_not_a_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, index: bytes
) -> None:
    run_dir = write_run(tmp_path / "run", [])
    (run_dir / "records.jsonl").write_text("".join(_lines()))
    monkeypatch.setattr(columnar, "SIDECAR_MIN_BYTES", 0)
    whole, notes = _whole(run_dir, monkeypatch)
    (run_dir / SIDECAR_DIR).mkdir(exist_ok=True)
    (run_dir / SIDECAR_INDEX).write_bytes(index)
    through = load_run(run_dir)
    pd.testing.assert_frame_equal(through.records, whole)
    assert (through.problems, through.skipped_lines, through.repeated_records) == notes
    assert isinstance(_index(run_dir)["parts"], list)  # rebuilt


def test_an_index_past_its_bound_is_not_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_dir = write_run(tmp_path / "run", [])
    (run_dir / "records.jsonl").write_text("".join(_lines()))
    monkeypatch.setattr(columnar, "SIDECAR_MIN_BYTES", 0)
    assert load_run(run_dir).records.shape[0]
    monkeypatch.setattr(columnar, "MAX_INDEX_BYTES", 16)
    assert columnar.open_sidecar(run_dir) is None


@pytest.mark.parametrize("damage", ["garbage", "truncated", "empty"])
def test_a_damaged_part_is_rebuilt_not_a_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, damage: str
) -> None:
    run_dir = write_run(tmp_path / "run", [])
    (run_dir / "records.jsonl").write_text("".join(_lines()))
    monkeypatch.setattr(columnar, "SIDECAR_MIN_BYTES", 0)
    whole, notes = _whole(run_dir, monkeypatch)
    assert len(load_run(run_dir).records) and columnar.open_sidecar(run_dir) is not None
    part = run_dir / SIDECAR_DIR / "part-00000.parquet"
    data = part.read_bytes()
    part.write_bytes({"garbage": b"PAR1 not a part", "truncated": data[:-9], "empty": b""}[damage])
    assert columnar.open_sidecar(run_dir) is None
    through = load_run(run_dir)
    pd.testing.assert_frame_equal(through.records, whole)
    assert (through.problems, through.skipped_lines, through.repeated_records) == notes
    assert columnar.open_sidecar(run_dir) is not None  # rebuilt
