"""A stream of only its terminator (`data: [DONE]`) is one failed request, said as one
(issue 44): recorded over a real socket on both paths, then reported as "every request
failed (1 of 1)", never as an ok record whose report counts "no requests (n=0)"."""

from __future__ import annotations

from pathlib import Path

import pytest

from labkit.measurement.recorder import EMPTY_STREAM_MESSAGE
from labkit.records import ErrorKind, StopReason
from labkit.report import write_report
from tests.providers.test_corpus import CORPUS, replay
from tests.report.report_builders import write_run

pytestmark = pytest.mark.integration

DONE_ONLY = next(f for f in CORPUS if f.name == "openai_done_only")


@pytest.mark.parametrize("path", ["wire", "sdk"])
def test_a_done_only_stream_is_one_failed_request_in_the_report(path: str, tmp_path: Path) -> None:
    record = replay(DONE_ONLY, path)
    assert record.error is not None and record.error.kind == ErrorKind.PROTOCOL
    assert record.error.message == EMPTY_STREAM_MESSAGE
    assert record.stop_reason == StopReason.ERROR
    assert record.client.e2e_ms is not None  # the terminator's arrival is kept
    md = write_report(write_run(tmp_path / "run", [record])).md.read_text(encoding="utf-8")
    assert "every request failed (1 of 1: protocol × 1)" in md
    assert "no requests (n=0)" not in md


def test_an_empty_answer_with_a_stop_reason_stays_ok() -> None:
    # A reply of no text that says why it stopped and what it counted is an answer.
    fixture = next(f for f in CORPUS if f.name == "azure_prompt_content_filter")
    record = replay(fixture, "wire")
    assert record.error is None and record.stop_reason == StopReason.CONTENT_FILTER
