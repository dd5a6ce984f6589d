"""A large run read through its columnar sidecar: the same frame, report and comparison as
from records.jsonl read whole, a stale sidecar rebuilt, and the report read a part at a
time (never the whole run at once)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd
import pytest

from labkit.report import columnar, load_run, write_comparison
from labkit.report.columnar import SIDECAR_DIR, SIDECAR_INDEX, Sidecar
from labkit.rundata import read_run
from tests.report.report_builders import full_lab, write_run
from tests.report.test_columnar_load import _report_files, _varied
from tests.support.records import make_record

pytestmark = pytest.mark.unit


def _varied_run(path: Path) -> Path:
    """`_varied`'s records (errors, warm-ups, tags of each type, client paths), a second
    experiment and model, a line that repeats a record, and a last line cut short."""
    recs = _varied()
    for i, r in enumerate(recs):
        if i % 4 == 1:
            r.experiment = "token_ratio"
            r.model = "m2"
    run_dir = write_run(path, recs, lab=None)
    with (run_dir / "records.jsonl").open("a", encoding="utf-8") as fh:
        fh.write(recs[7].to_json_line() + "\n")  # repeats a record read before
        fh.write('{"record_id": "cut')
    return run_dir


@pytest.fixture
def always(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every run, however small, read through its sidecar."""
    monkeypatch.setattr(columnar, "SIDECAR_MIN_BYTES", 0)


def _whole(run_dir: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, bytes]:
    with monkeypatch.context() as patch:
        patch.setattr(columnar, "SIDECAR_MIN_BYTES", 1 << 62)
        files = _report_files(run_dir)
    assert not (run_dir / SIDECAR_DIR).exists()
    return files


def test_the_report_from_the_sidecar_is_the_report_of_the_records_read_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_dir = _varied_run(tmp_path / "run")
    whole = _whole(run_dir, monkeypatch)
    monkeypatch.setattr(columnar, "SIDECAR_MIN_BYTES", 0)
    parts = _report_files(run_dir)
    assert (run_dir / SIDECAR_INDEX).is_file() and (run_dir / SIDECAR_INDEX).is_file()
    assert parts.keys() == whole.keys()
    for name, content in whole.items():
        assert parts[name] == content, f"{name} differs when read through the sidecar"
    md = whole["report.md"].decode()
    assert "not valid records" in md and "repeat 1 record(s)" in md and "token_ratio" in md


def test_the_report_with_lab_answers_is_the_same_through_the_sidecar(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_dir = write_run(tmp_path / "run", _varied(), lab=full_lab(), tail='{"record_id": "cut')
    whole = _whole(run_dir, monkeypatch)
    monkeypatch.setattr(columnar, "SIDECAR_MIN_BYTES", 0)
    assert _report_files(run_dir) == whole


@pytest.mark.usefixtures("always")
def test_read_run_through_the_sidecar_is_the_frame_of_the_records_read_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_dir = _varied_run(tmp_path / "run")
    with monkeypatch.context() as patch:
        patch.setattr(columnar, "SIDECAR_MIN_BYTES", 1 << 62)
        whole = load_run(run_dir)
        some = read_run(run_dir, ["client.ttft_ms", "experiment"])
    through = load_run(run_dir)
    assert (run_dir / SIDECAR_INDEX).is_file()
    pd.testing.assert_frame_equal(through.records, whole.records)
    assert through.problems == whole.problems and through.skipped_lines == 1
    assert through.repeated_records == whole.repeated_records == 1
    pd.testing.assert_frame_equal(read_run(run_dir, ["client.ttft_ms", "experiment"]), some)


@pytest.mark.usefixtures("always")
def test_records_appended_are_converted_as_a_new_part(tmp_path: Path) -> None:
    recs = _varied()[:20]
    run_dir = write_run(tmp_path / "run", recs)
    assert len(read_run(run_dir)) == 20
    built = json.loads((run_dir / SIDECAR_INDEX).read_text())
    assert len(built["parts"]) == 1
    more = make_record(provider="late", ttft_ms=5.0)
    with (run_dir / "records.jsonl").open("a", encoding="utf-8") as fh:
        fh.write(more.to_json_line() + "\n")
    frame = read_run(run_dir)
    assert len(frame) == 21 and "late" in set(frame["provider"])
    grown = json.loads((run_dir / SIDECAR_INDEX).read_text())
    assert grown["parts"][0] == built["parts"][0]  # the first part kept, only the tail read
    assert [sum(g[4] for g in p["groups"]) for p in grown["parts"]] == [20, 1]
    assert grown["parts"][1]["start"] == built["parts"][0]["end"]
    # A sidecar of another format, or a lost index: rebuilt.
    grown["version"] = -1
    (run_dir / SIDECAR_INDEX).write_text(json.dumps(grown))
    assert columnar.open_sidecar(run_dir) is None
    assert len(read_run(run_dir)) == 21 and columnar.open_sidecar(run_dir) is not None
    assert len(json.loads((run_dir / SIDECAR_INDEX).read_text())["parts"]) == 1
    (run_dir / SIDECAR_INDEX).unlink()
    assert len(read_run(run_dir)) == 21
    assert sorted(p.name for p in (run_dir / SIDECAR_DIR).iterdir()) == [
        ".lock",
        "index.json",
        "part-00000.parquet",
    ]  # no leftover temporary file, nor a part no index names
    assert sorted(p.name for p in run_dir.iterdir() if "columns" in p.name) == [SIDECAR_DIR]


@pytest.mark.usefixtures("always")
def test_a_same_size_rewrite_of_the_records_makes_the_sidecar_stale(tmp_path: Path) -> None:
    run_dir = write_run(tmp_path / "run", _varied()[:10])
    read_run(run_dir)
    path = run_dir / "records.jsonl"
    text = path.read_text().replace('"provider":"a"', '"provider":"z"')
    stat = path.stat()
    path.write_text(text)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    assert "z" in set(read_run(run_dir)["provider"])


def test_the_report_reads_the_sidecar_a_part_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Structural memory bound: every read of the sidecar is one part (a provider ×
    experiment's records), never the whole run (beside a part, a read holds at most the
    row groups of its groups: `columnar.ROW_GROUP_ROWS` rows each)."""
    monkeypatch.setattr(columnar, "SIDECAR_MIN_BYTES", 0)
    run_dir = _varied_run(tmp_path / "run")
    reads: list[int] = []
    real = Sidecar.read

    def spy(self: Sidecar, groups: object = None, columns: object = None) -> object:
        table = real(self, groups, columns)  # type: ignore[arg-type]
        reads.append(table.num_rows)
        return table

    monkeypatch.setattr(Sidecar, "read", spy)
    _report_files(run_dir)
    side = columnar.open_sidecar(run_dir)
    assert side is not None and len(side.groups) >= 6
    largest = max(sum(g.rows for g in part) for part in side.parts(2))
    assert reads and max(reads) <= largest < side.rows
    assert sum(reads) == side.rows  # every record read once


def test_compare_through_the_sidecar_is_the_comparison_of_the_records_read_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = _varied_run(tmp_path / "base")
    recs = _varied()
    for r in recs:
        r.client.ttft_ms = (r.client.ttft_ms or 0.0) * 1.5
    other = write_run(tmp_path / "other", recs)
    with monkeypatch.context() as patch:
        patch.setattr(columnar, "SIDECAR_MIN_BYTES", 1 << 62)
        write_comparison([base, other], tmp_path / "whole")
    monkeypatch.setattr(columnar, "SIDECAR_MIN_BYTES", 0)
    write_comparison([base, other], tmp_path / "parts")
    assert (base / SIDECAR_INDEX).is_file() and (other / SIDECAR_INDEX).is_file()
    for name in ("compare.md", "compare.csv", "compare.html"):
        assert (tmp_path / "parts" / name).read_bytes() == (tmp_path / "whole" / name).read_bytes()
    assert "slower" in (tmp_path / "parts" / "compare.md").read_text()


def test_a_priced_run_shows_the_same_cost_through_the_sidecar(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.report.test_cost_report import priced_run

    run_dir = priced_run(tmp_path / "run")
    whole = _whole(run_dir, monkeypatch)
    monkeypatch.setattr(columnar, "SIDECAR_MIN_BYTES", 0)
    parts = _report_files(run_dir)
    assert (run_dir / SIDECAR_INDEX).is_file()
    assert "## Cost" in whole["report.md"].decode()
    assert parts == whole
