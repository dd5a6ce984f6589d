"""The stream recorder against respx-mocked streams, for every wire adapter.

Each case asserts the record's fields: what was measured, what was counted, what failed.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpcore
import httpx
import pytest
import respx

from labkit.measurement.failures import http_error
from labkit.measurement.recorder import RecordContext, StreamRecorder
from labkit.providers import Provider
from labkit.records import ErrorKind, StopReason
from tests.providers.streams import (
    ScriptedClock,
    anthropic_events,
    chat,
    make_provider,
    oa_usage,
    openai_events,
    record_one,
    sse,
    sse_response,
)

pytestmark = pytest.mark.unit


@dataclass
class Adapter:
    kind: str
    url: str
    settings: dict[str, Any]
    api_key: str | None
    events: Callable[..., Iterator[bytes]]
    error_event: bytes
    error_body: dict[str, Any]

    def provider(self, **overrides: Any) -> Provider:
        return make_provider(self.kind, api_key=self.api_key, **{**self.settings, **overrides})

    def stream(self, tokens: list[str], *, usage: bool = True) -> list[bytes]:
        if self.kind == "anthropic":
            return list(anthropic_events(tokens))
        return list(openai_events(tokens, usage=oa_usage(7, len(tokens)) if usage else None))


OPENAI_ERR = {"error": {"type": "server_error", "message": "The server had an error"}}
ANTHROPIC_ERR = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}

ADAPTERS = {
    "openai": Adapter(
        "openai",
        "https://api.openai.com/v1/chat/completions",
        {"model": "gpt-4.1-mini"},
        "sk-test-openai",
        openai_events,
        sse(OPENAI_ERR),
        OPENAI_ERR,
    ),
    "openai_compatible": Adapter(
        "openai_compatible",
        "http://vllm.test:8000/v1/chat/completions",
        {"base_url": "http://vllm.test:8000/v1", "transport": "httpx"},
        None,
        openai_events,
        sse(OPENAI_ERR),
        OPENAI_ERR,
    ),
    "llamacpp": Adapter(
        "llamacpp",
        "http://llama.test:8080/v1/chat/completions",
        {"base_url": "http://llama.test:8080", "transport": "httpx"},
        None,
        openai_events,
        sse(OPENAI_ERR),
        OPENAI_ERR,
    ),
    "anthropic": Adapter(
        "anthropic",
        "https://api.anthropic.com/v1/messages",
        {"model": "claude-haiku-4-5"},
        "sk-ant-test",
        anthropic_events,
        sse(ANTHROPIC_ERR, "error"),
        ANTHROPIC_ERR,
    ),
}


@pytest.fixture(params=list(ADAPTERS))
def adapter(request: pytest.FixtureRequest) -> Adapter:
    return ADAPTERS[request.param]


def run_mocked(adapter: Adapter, response: httpx.Response | Exception, **kw: Any):
    with respx.mock(assert_all_called=True) as router:
        route = router.post(adapter.url)
        if isinstance(response, Exception):
            route.mock(side_effect=response)
        else:
            route.mock(return_value=response)
        return record_one(adapter.provider(**kw.pop("settings", {})), **kw)


# --- success paths ------------------------------------------------------------------------


def test_whole_stream_one_event_per_read(adapter: Adapter) -> None:
    rec = run_mocked(adapter, sse_response(adapter.stream(["Hello", ",", " world"])))
    assert rec.error is None
    assert rec.output_text == "Hello, world"
    assert rec.stop_reason == StopReason.END
    assert rec.stop_reason_raw in ("stop", "end_turn")
    assert rec.usage.output_tokens == 3 and rec.usage.output_tokens_source == "provider"
    assert len(rec.client.event_offsets_ms) == 3
    assert rec.provider == f"{adapter.kind}-test" and rec.provider_kind == adapter.kind
    assert rec.prompt_chars == len("Say hi.") and rec.prompt_bytes == len("Say hi.")
    assert rec.app.client_path == "wire" and rec.app.prepare_ms is not None
    c = rec.client
    assert c.e2e_ms >= c.last_token_ms >= c.ttft_ms >= c.first_event_ms >= c.headers_ms >= 0
    # respx emits no trace events: no connection phases are invented.
    assert c.connect_ms is None and c.tls_ms is None


def test_all_events_in_one_read(adapter: Adapter) -> None:
    rec = run_mocked(adapter, sse_response([b"".join(adapter.stream(["a", "b", "c", "d"]))]))
    assert rec.error is None and rec.output_text == "abcd"
    offs = rec.client.event_offsets_ms
    assert len(offs) == 4 and len(set(offs)) == 1  # one read, one stamp
    assert rec.client.itl_ms_max == 0.0


@pytest.mark.parametrize("size", [1, 3, 17])
def test_stream_cut_into_small_reads(adapter: Adapter, size: int) -> None:
    raw = b"".join(adapter.stream(["日本", "語", " ok 🙂"]))
    chunks = [raw[i : i + size] for i in range(0, len(raw), size)]
    rec = run_mocked(adapter, sse_response(chunks))
    assert rec.error is None
    assert rec.output_text == "日本語 ok 🙂"
    assert rec.usage.output_tokens == 3


def test_utf8_split_inside_a_sequence(adapter: Adapter) -> None:
    raw = b"".join(adapter.stream(["日本", "🙂!"]))
    cut1 = raw.index("本".encode()) + 2  # inside 本's three bytes
    cut2 = raw.index("🙂".encode()) + 1  # inside the emoji's four bytes
    rec = run_mocked(adapter, sse_response([raw[:cut1], raw[cut1:cut2], raw[cut2:]]))
    assert rec.error is None
    assert rec.output_text == "日本🙂!"


def test_crlf_line_endings_and_crlf_split_across_reads(adapter: Adapter) -> None:
    raw = b"".join(adapter.stream(["x", "y"])).replace(b"\n", b"\r\n")
    cuts = [i + 1 for i in range(len(raw)) if raw[i : i + 1] == b"\r"]
    # Cut right after every "\r": every "\r\n" pair is split between two reads.
    chunks, prev = [], 0
    for c in cuts:
        chunks.append(raw[prev:c])
        prev = c
    chunks.append(raw[prev:])
    rec = run_mocked(adapter, sse_response([c for c in chunks if c]))
    assert rec.error is None
    assert rec.output_text == "xy"
    assert len(rec.client.event_offsets_ms) == 2
    rec = run_mocked(adapter, sse_response([raw]))
    assert rec.error is None and rec.output_text == "xy"


def test_usage_missing_counts_locally(adapter: Adapter) -> None:
    if adapter.kind == "anthropic":
        events = [
            e for e in adapter.stream(["a", "b", "c"]) if b"message_delta" not in e
        ]  # no output count anywhere but message_start's placeholder
        events = [e.replace(b'"output_tokens":1', b'"x":1') for e in events]
    else:
        events = adapter.stream(["a", "b", "c"], usage=False)
    rec = run_mocked(adapter, sse_response(events))
    assert rec.error is None
    assert rec.usage.output_tokens == 3
    assert rec.usage.output_tokens_source == "local"
    assert rec.client.decode_ms_per_token is not None


def test_keepalives_never_count(adapter: Adapter) -> None:
    clock = ScriptedClock()
    ping = b": keep-alive\n\n" if adapter.kind != "anthropic" else sse({"type": "ping"}, "ping")
    events = adapter.stream(["a", "b"])
    # A keep-alive before anything, then the stream, with a keep-alive between tokens.
    first_tok = next(i for i, e in enumerate(events) if b'"a"' in e)
    chunks = [ping, *events[:first_tok], ping, *events[first_tok:]]
    times = [float(10 * (i + 1)) for i in range(len(chunks))]
    rec = run_mocked(adapter, sse_response(chunks, clock=clock, times_ms=times), clock=clock)
    assert rec.error is None
    assert rec.client.first_event_ms != 10.0  # the leading keep-alive is not an event
    assert rec.client.ttft_ms == times[first_tok + 2]  # leading ping, events, ping, token
    assert len(rec.client.event_offsets_ms) == 2


def test_role_only_first_chunk_not_counted() -> None:
    adapter = ADAPTERS["openai_compatible"]
    clock = ScriptedClock()
    events = adapter.stream(["hi", "!"])
    rec = run_mocked(
        adapter,
        sse_response(events, clock=clock, times_ms=[10, 20, 30, 40, 50, 60]),
        clock=clock,
    )
    assert rec.client.first_event_ms == 20.0 and rec.client.ttft_ms == 20.0
    assert rec.client.event_offsets_ms == [20.0, 30.0]


def test_anthropic_message_start_is_first_event_not_ttft() -> None:
    adapter = ADAPTERS["anthropic"]
    clock = ScriptedClock()
    events = adapter.stream(["hi", "!"])  # start, block_start, ping, 2 deltas, stop, delta, stop
    times = [10.0, 11.0, 12.0, 30.0, 40.0, 41.0, 42.0, 43.0]
    rec = run_mocked(adapter, sse_response(events, clock=clock, times_ms=times), clock=clock)
    assert rec.client.first_event_ms == 10.0
    assert rec.client.ttft_ms == 30.0 and rec.client.ttft_text_ms == 30.0
    assert rec.client.last_token_ms == 40.0 and rec.client.e2e_ms == 43.0


def test_multi_token_events_use_provider_count(adapter: Adapter) -> None:
    clock = ScriptedClock()
    stream = adapter.stream(["one two three", " four five six"])
    # llama.cpp counts the end token of a reply that stopped on its own, never streamed
    counted = b"7" if adapter.kind == "llamacpp" else b"6"
    if adapter.kind == "anthropic":
        stream = [e.replace(b'"output_tokens":2}', b'"output_tokens":6}') for e in stream]
    else:
        stream = [
            e.replace(b'"completion_tokens":2', b'"completion_tokens":' + counted) for e in stream
        ]
    times = [float(10 * (i + 1)) for i in range(len(stream))]
    rec = run_mocked(adapter, sse_response(stream, clock=clock, times_ms=times), clock=clock)
    assert rec.usage.output_tokens == int(counted) and rec.usage.streamed_output_tokens == 6
    offs = rec.client.event_offsets_ms
    assert len(offs) == 2
    assert rec.client.decode_ms_per_token == (offs[1] - offs[0]) / 5


# --- failures -------------------------------------------------------------------------------


def test_error_event_mid_stream_keeps_timings(adapter: Adapter) -> None:
    events = adapter.stream(["a", "b"])
    first_tok = next(i for i, e in enumerate(events) if b'"a"' in e)
    chunks = [*events[: first_tok + 2], adapter.error_event]
    if adapter.kind != "anthropic":
        chunks.append(b"data: [DONE]\n\n")
    rec = run_mocked(adapter, sse_response(chunks))
    assert rec.error is not None and rec.error.kind == ErrorKind.STREAM_ERROR
    assert ("overloaded_error" if adapter.kind == "anthropic" else "server_error") in (
        rec.error.message
    )
    assert rec.stop_reason == StopReason.ERROR
    assert rec.client.ttft_ms is not None and len(rec.client.event_offsets_ms) == 2
    assert rec.output_text == "ab"
    assert rec.usage.output_tokens_source in ("local", "provider")


@pytest.mark.parametrize(
    ("status", "headers", "retry_after"),
    [
        (400, {}, None),
        (401, {}, None),
        (429, {"retry-after": "7"}, 7.0),
        (500, {}, None),
        (529, {"retry-after": "0"}, 0.0),
    ],
)
def test_http_status_errors(
    adapter: Adapter, status: int, headers: dict[str, str], retry_after: float | None
) -> None:
    resp = httpx.Response(status, headers=headers, json=adapter.error_body)
    rec = run_mocked(adapter, resp)
    e = rec.error
    assert e is not None and e.kind == ErrorKind.HTTP_STATUS
    assert e.status == status
    assert e.retry_after_s == retry_after
    assert e.body_excerpt is not None and json.loads(e.body_excerpt) == adapter.error_body
    assert e.message.startswith(f"HTTP {status}: ")
    assert rec.stop_reason == StopReason.ERROR
    assert rec.client.headers_ms is not None and rec.client.e2e_ms is not None
    assert rec.client.ttft_ms is None and rec.output_text == ""


def test_long_error_body_is_cut_to_an_excerpt() -> None:
    adapter = ADAPTERS["openai_compatible"]
    rec = run_mocked(adapter, httpx.Response(502, text="<html>" + "x" * 5000))
    assert rec.error is not None and rec.error.status == 502
    assert len(rec.error.body_excerpt or "") == 500
    assert rec.error.message == "HTTP 502"


def test_connection_dropped_mid_stream(adapter: Adapter) -> None:
    events = adapter.stream(["a", "b", "c"])
    first_tok = next(i for i, e in enumerate(events) if b'"a"' in e)
    drop = httpcore.RemoteProtocolError("peer closed connection without sending complete body")
    rec = run_mocked(adapter, sse_response(events[: first_tok + 2], raise_at_end=drop))
    e = rec.error
    assert e is not None and e.kind == ErrorKind.CONNECTION
    assert "mid-stream" in e.message
    assert rec.client.ttft_ms is not None and len(rec.client.event_offsets_ms) == 2
    assert rec.client.e2e_ms is None  # the stream was never fully consumed
    assert rec.stop_reason == StopReason.ERROR


def test_connection_refused_before_response(adapter: Adapter) -> None:
    rec = run_mocked(adapter, httpx.ConnectError("[Errno 111] Connection refused"))
    assert rec.error is not None and rec.error.kind == ErrorKind.CONNECTION
    # Never connected, so nothing was lost (a real refusal: tests/measurement/test_connect_words)
    assert rec.error.message.startswith("could not connect to ")
    assert rec.error.message.endswith(": [Errno 111] Connection refused")
    assert rec.client.headers_ms is None and rec.client.ttft_ms is None


def test_stream_cut_without_terminator_is_protocol(adapter: Adapter) -> None:
    events = adapter.stream(["a", "b"])
    last_token = max(i for i, e in enumerate(events) if b'"b"' in e)
    # Cut after the last token: no stop reason, no [DONE] / message_stop.
    rec = run_mocked(adapter, sse_response(events[: last_token + 1]))
    assert rec.error is not None and rec.error.kind == ErrorKind.PROTOCOL
    assert "truncated" in rec.error.message
    assert rec.output_text == "ab" and rec.client.ttft_ms is not None


def test_stream_ending_at_its_stop_reason_without_terminator_is_complete(
    adapter: Adapter,
) -> None:
    """Perplexity and others end after the chunk with the finish reason, without [DONE]."""
    events = adapter.stream(["a", "b"])
    rec = run_mocked(adapter, sse_response(events[:-1]))  # no [DONE] / message_stop
    assert rec.error is None and rec.stop_reason == StopReason.END
    assert rec.output_text == "ab" and rec.usage.output_tokens == 2


def test_malformed_json_is_protocol(adapter: Adapter) -> None:
    events = adapter.stream(["a", "b"])
    first_tok = next(i for i, e in enumerate(events) if b'"a"' in e)
    bad = (
        b"event: content_block_delta\ndata: {not json\n\n"
        if adapter.kind == "anthropic"
        else (b'data: {"choices": [{"delta": {"content": "x"\n\n')
    )
    chunks = [*events[: first_tok + 1], bad, *events[first_tok + 1 :]]
    rec = run_mocked(adapter, sse_response(chunks))
    assert rec.error is not None and rec.error.kind == ErrorKind.PROTOCOL
    assert "malformed" in rec.error.message
    assert rec.client.ttft_ms is not None  # what was reached before is kept


def test_empty_200_body_is_protocol(adapter: Adapter) -> None:
    rec = run_mocked(adapter, sse_response([]))
    assert rec.error is not None and rec.error.kind == ErrorKind.PROTOCOL
    assert rec.error.message == "empty response body"
    assert rec.client.first_event_ms is None and rec.client.ttft_ms is None
    assert rec.usage.output_tokens is None and rec.usage.output_tokens_source is None


def test_read_timeout_from_transport(adapter: Adapter) -> None:
    events = adapter.stream(["a", "b"])
    first_tok = next(i for i, e in enumerate(events) if b'"a"' in e)
    rec = run_mocked(
        adapter,
        sse_response(events[: first_tok + 1], raise_at_end=httpcore.ReadTimeout("timed out")),
    )
    assert rec.error is not None and rec.error.kind == ErrorKind.TIMEOUT
    assert rec.client.ttft_ms is not None


def test_store_text_false_drops_text() -> None:
    adapter = ADAPTERS["openai_compatible"]
    ctx = RecordContext(run_id="r", experiment="t", store_text=False, trial=2, attempt=3)
    rec = run_mocked(adapter, sse_response(adapter.stream(["a"])), ctx=ctx)
    assert rec.output_text is None and rec.error is None
    assert (rec.trial, rec.attempt, rec.run_id, rec.experiment) == (2, 3, "r", "t")


def test_record_round_trips_as_json_line() -> None:
    from labkit.records import RequestRecord

    adapter = ADAPTERS["openai"]
    rec = run_mocked(adapter, sse_response(adapter.stream(["a", "b"])))
    line = rec.to_json_line()
    assert "\n" not in line
    assert RequestRecord.from_json_line(line) == rec
    data = json.loads(line)
    assert data["error"] is None and data["client"]["tls_ms"] is None  # nulls are written


# --- cancellation, lag monitor, helpers --------------------------------------------------------


class _StallingStream(httpx.AsyncByteStream):
    """Hands over `chunks`, then waits forever; `stalled` is set once the reader asked for more."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks
        self.stalled = asyncio.Event()

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks:
            yield chunk
        self.stalled.set()  # the recorder has handled every chunk and waits for the next
        await asyncio.Event().wait()


def test_cancelled_request_hands_partial_record_over() -> None:
    adapter = ADAPTERS["openai_compatible"]
    kept = []
    events = adapter.stream(["a", "b"])
    stream = _StallingStream(events[:2])  # role, then "a"; the rest never comes

    async def go() -> None:
        provider = adapter.provider()
        recorder = StreamRecorder(on_cancelled=kept.append)
        try:
            task = asyncio.create_task(
                recorder.record(
                    provider, chat(), RecordContext(run_id="r", experiment="t", plan_key="t/0")
                )
            )
            await stream.stalled.wait()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        finally:
            await provider.aclose()

    with respx.mock() as router:
        router.post(adapter.url).mock(
            return_value=httpx.Response(
                200, headers={"content-type": "text/event-stream"}, stream=stream
            )
        )
        asyncio.run(go())
    assert len(kept) == 1
    rec = kept[0]
    assert rec.error is not None and rec.error.kind == ErrorKind.CANCELLED
    assert rec.stop_reason == StopReason.CANCELLED
    assert rec.output_text == "a" and rec.client.ttft_ms is not None
    # The partial record carries its plan key, so a resume can tell which request it was.
    assert rec.plan_key == "t/0"


def test_http_error_retry_after_as_http_date() -> None:
    from datetime import UTC, datetime, timedelta
    from email.utils import format_datetime

    # An HTTP date has whole seconds; the wait is measured from a moment between before/after.
    when = (datetime.now(UTC) + timedelta(seconds=30)).replace(microsecond=0)
    before = datetime.now(UTC)
    err = http_error(
        429,
        httpx.Headers({"retry-after": format_datetime(when, usegmt=True)}),
        b"slow down",
        lambda s: s,
    )
    after = datetime.now(UTC)
    assert err.retry_after_s is not None
    assert (when - after).total_seconds() <= err.retry_after_s <= (when - before).total_seconds()
    assert err.message == "HTTP 429" and err.body_excerpt == "slow down"
    bad = http_error(503, httpx.Headers({"retry-after": "soon"}), b"", lambda s: s)
    assert bad.retry_after_s is None and bad.body_excerpt is None


def test_stale_pooled_connection_is_resent_once_from_a_fresh_clock() -> None:
    """A server that closed a keep-alive connection as it was reused: measure again."""
    body = b"".join(openai_events(["Hi", " there"]))
    calls = {"n": 0}

    def respond(request: httpx.Request) -> httpx.Response:
        calls["n"] += 1
        if calls["n"] == 1:
            raise httpx.RemoteProtocolError("Server disconnected without sending a response.")
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body)

    provider = make_provider(
        "openai_compatible", base_url="http://127.0.0.1:9/v1", transport="httpx"
    )
    with respx.mock:
        respx.post("http://127.0.0.1:9/v1/chat/completions").mock(side_effect=respond)
        rec = record_one(provider)
    assert calls["n"] == 2
    assert rec.error is None and rec.output_text == "Hi there"
    assert rec.tags["stale_connection_resent"] is True


def test_a_second_disconnect_is_a_connection_error() -> None:
    provider = make_provider(
        "openai_compatible", base_url="http://127.0.0.1:9/v1", transport="httpx"
    )
    with respx.mock:
        respx.post("http://127.0.0.1:9/v1/chat/completions").mock(
            side_effect=httpx.RemoteProtocolError("Server disconnected without sending a response.")
        )
        rec = record_one(provider)
    assert rec.error is not None and rec.error.kind == ErrorKind.CONNECTION
