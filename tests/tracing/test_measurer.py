"""The measurement core puts each request's trace context on the request it sends, and
keeps it in the record; `tracing.headers: false` sends none."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from labkit.experiments import PlannedRequest
from labkit.measurement.recorder import StreamRecorder
from labkit.providers.base import ChatRequest
from labkit.providers.fake import FakeProvider, FakeSettings, FakeTransport
from labkit.records import RequestRecord
from labkit.runner.executor import Measurer
from labkit.tracing.context import span_id_of, trace_id_of

pytestmark = pytest.mark.unit


def _measure(
    monkeypatch: pytest.MonkeyPatch, *, propagate: bool, tags: dict[str, str] | None = None
) -> tuple[RequestRecord, httpx.Headers]:
    seen: list[httpx.Headers] = []
    serve = FakeTransport.handle_async_request

    async def spy(self: FakeTransport, request: httpx.Request) -> httpx.Response:
        seen.append(request.headers)
        return await serve(self, request)

    monkeypatch.setattr(FakeTransport, "handle_async_request", spy)

    async def main() -> RequestRecord:
        settings = FakeSettings(id="f", kind="fake", schedule={"tokens": 3})
        provider = FakeProvider(settings)
        recorder = StreamRecorder()
        measurer = Measurer(
            recorder, lambda: recorder, run_id="run-7", store_text=False, propagate_trace=propagate
        )
        planned = PlannedRequest("k", ChatRequest([{"role": "user", "content": "hi"}]))
        planned.tags = dict(tags or {})
        try:
            return await measurer.measure(provider, "load", planned, 0.0)
        finally:
            await provider.aclose()

    record = asyncio.run(main())
    (headers,) = seen
    return record, headers


def test_the_request_sent_carries_the_records_trace_context(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    record, headers = _measure(monkeypatch, propagate=True, tags={"level_run": "L3"})
    assert record.error is None and record.trace is not None
    trace = record.trace
    assert headers["traceparent"] == f"00-{trace_id_of('run-7')}-{trace.span_id}-01"
    assert headers["x-request-id"] == record.record_id == trace.request_id_sent
    assert trace.parent_span_id == span_id_of("run-7", "f", "load", "L3")
    assert trace.propagated


def test_with_headers_off_the_request_carries_none_and_the_record_keeps_its_ids(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    record, headers = _measure(monkeypatch, propagate=False)
    assert "traceparent" not in headers and "x-request-id" not in headers
    assert record.trace is not None and not record.trace.propagated
    assert record.trace.parent_span_id == span_id_of("run-7", "f", "load")


def test_the_request_id_a_server_answers_with_is_read_where_the_parser_reads_none() -> None:
    import respx

    from tests.providers.streams import anthropic_events, make_provider, record_one, sse_response

    provider = make_provider("anthropic", api_key="sk-ant-test", model="claude-haiku-4-5")
    with respx.mock(assert_all_called=True) as router:
        # A gateway in front of Anthropic's API answering with its own `x-request-id`.
        reply = sse_response(list(anthropic_events(["Hi"])), headers={"x-request-id": "gw-1"})
        router.post("https://api.anthropic.com/v1/messages").mock(return_value=reply)
        record = record_one(provider)
    assert record.error is None and record.request_id == "gw-1"
