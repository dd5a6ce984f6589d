"""Every setting the fake provider's schedule had, served by the truth server over a real
socket and read by labkit's own recorder: each record agrees with the truth log's line."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from labkit.measurement.recorder import RecordContext, StreamRecorder
from labkit.records import ErrorKind, RequestRecord, StopReason
from labkit.truth.log import TruthRequest, read_truth_log
from labkit.truth.process import TruthServer
from tests.providers.streams import chat, make_provider

pytestmark = pytest.mark.integration

FAST = {"first_token_ms": 2, "token_interval_ms": 1}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "search",
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}},
                "required": ["query", "limit"],
            },
        },
    }
]


def served(
    tmp_path: Path, requests: int = 1, params: dict[str, Any] | None = None, **schedule: Any
) -> list[tuple[RequestRecord, TruthRequest]]:
    """`requests` requests at once from labkit's recorder; each record with its log line."""
    log = tmp_path / "truth.jsonl"

    async def go() -> list[RequestRecord]:
        with TruthServer(truth_log=log, **{**FAST, **schedule}) as server:
            # A provider (a connection) per request: they reach the server together.
            providers = [
                make_provider("openai_compatible", base_url=server.base_url)
                for _ in range(requests)
            ]
            recorder = StreamRecorder()
            ctx = RecordContext(run_id="r", experiment="t")
            request = chat(**(params or {}))
            try:
                return list(
                    await asyncio.gather(*(recorder.record(p, request, ctx) for p in providers))
                )
            finally:
                for provider in providers:
                    await provider.aclose()

    records = asyncio.run(go())
    by_id = {t.id: t for t in read_truth_log(log).requests}
    assert len(by_id) == requests
    out = []
    for rec in records:
        truth = by_id.get(rec.response_id or "") or by_id[rec.request_id or ""]
        out.append((rec, truth))
    return out


def test_a_scripted_http_error_is_logged_with_its_status(tmp_path: Path) -> None:
    ((rec, truth),) = served(tmp_path, fail="http_status", fail_status=429, retry_after_s=1.5)
    assert rec.error is not None and rec.error.kind == ErrorKind.HTTP_STATUS
    assert (rec.error.status, rec.error.retry_after_s) == (truth.status, 1.5) == (429, 1.5)
    assert truth.fail == "http_status" and truth.events_ns == [] and truth.output_tokens == 0


def test_a_stream_error_and_a_drop_come_after_the_logged_events(tmp_path: Path) -> None:
    ((rec, truth),) = served(tmp_path, tokens=10, fail="stream_error", fail_after_tokens=3)
    assert rec.error is not None and rec.error.kind == ErrorKind.STREAM_ERROR
    assert truth.fail == "stream_error" and truth.finish_reason is None
    assert len(rec.client.event_offsets_ms) == len(truth.events_ns) == truth.output_tokens == 3

    drop_dir = tmp_path / "drop"
    drop_dir.mkdir()
    ((rec, truth),) = served(drop_dir, tokens=10, fail="drop", fail_after_tokens=4)
    assert rec.error is not None and rec.error.kind == ErrorKind.CONNECTION
    assert truth.fail == "drop" and truth.status == 200
    assert len(rec.client.event_offsets_ms) == len(truth.events_ns) == truth.output_tokens == 4


def test_no_usage_and_a_chosen_finish_reason(tmp_path: Path) -> None:
    ((rec, truth),) = served(tmp_path, tokens=6, usage=False, finish_reason="content_filter")
    assert rec.error is None
    assert rec.usage.output_tokens_source == "local" and truth.output_tokens == 6
    assert rec.stop_reason_raw == truth.finish_reason == "content_filter"
    assert rec.stop_reason == StopReason.CONTENT_FILTER


def test_tool_calls_are_parsed_as_the_server_made_them(tmp_path: Path) -> None:
    schedule = {"tokens": 6, "tool_calls": 1, "parallel_tool_calls": 2}
    ((rec, truth),) = served(tmp_path, params={"tools": TOOLS}, **schedule)
    assert rec.error is None and rec.stop_reason == StopReason.TOOL_CALL
    assert truth.finish_reason == "tool_calls" == rec.stop_reason_raw
    made = [(c.id, c.name, c.arguments) for c in truth.tool_calls]
    assert [(c.id, c.name, c.arguments) for c in rec.tool_calls or []] == made
    assert len(made) == 2
    for _, name, arguments in made:
        args = json.loads(arguments)
        assert name == "search" and set(args) == {"query", "limit"} and args["limit"] == 1


def test_a_slot_s_wait_is_the_queue_the_server_reports_and_logs(tmp_path: Path) -> None:
    pairs = served(
        tmp_path, requests=2, slots=1, tokens=3, first_token_ms=100, server_timings="vllm"
    )
    waits = sorted(truth.queue_ms for _, truth in pairs)
    assert waits[0] == 0 and waits[1] > 0  # the second waited for the first's slot
    for rec, truth in pairs:
        assert rec.provider_timings.queue_ms == truth.queue_ms
        assert truth.reported is not None
        assert rec.provider_timings.raw == truth.reported["fields"]["metrics"]
        assert truth.queue_ms * 1e6 == pytest.approx(truth.t_start_ns - truth.t_admit_ns)
