"""A stream ends at its terminator, whether or not the server then closes the body.

Servers on 127.0.0.1 and ::1 send a whole stream — `data: [DONE]`, Anthropic's
`message_stop`, the Responses API's terminal events, Ollama's `done: true` line — and then
keep the body open, neither closing nor ending the chunked body. The record must be
complete (no timeout), through httpx and the lean transport and, where an SDK applies, the
SDK path; and the held connection must not be reused by the next request.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import pytest

from labkit.measurement.recorder import BaseRecorder, RecordContext, StreamRecorder
from labkit.measurement.sdkpath import SDKRecorder
from labkit.providers import Provider, provider_class
from labkit.records import ErrorKind, RequestRecord
from tests.providers.streams import (
    anthropic_events,
    chat,
    oa_usage,
    openai_events,
    responses_events,
    sse,
)
from tests.support.misbehaving import (
    HOLD,
    MisbehavingServer,
    Reply,
    http_head,
    next_request,
    record_requests,
)

pytestmark = pytest.mark.integration

HOSTS = ["127.0.0.1", "::1"]
TRANSPORTS = ["httpx", "lean"]
#: Short enough that a recorder waiting for the close would time out well within a test.
READ_TIMEOUT_S = 3.0


def _ollama_lines() -> Iterator[bytes]:
    for text in ("Hel", "lo"):
        message = {"role": "assistant", "content": text}
        yield (json.dumps({"model": "m", "message": message, "done": False}) + "\n").encode()
    last = {"role": "assistant", "content": "!"}  # the done line carries text of its own
    done = {"model": "m", "message": last, "done": True, "done_reason": "stop", "eval_count": 3}
    yield (json.dumps(done) + "\n").encode()


def _responses_terminal(name: str) -> list[bytes]:
    events = list(responses_events(["Hi", "!"]))[:-1]
    response: dict[str, object] = {"status": name.rsplit(".", 1)[1]}
    if name == "response.incomplete":
        response["incomplete_details"] = {"reason": "max_output_tokens"}
    usage = {"input_tokens": 5, "output_tokens": 2, "total_tokens": 7}
    response["usage"] = usage
    return [*events, sse({"type": name, "response": response}, name)]


#: (provider kind, the events of one whole stream, content-type, output text expected)
SHAPES: dict[str, tuple[str, list[bytes], str, str]] = {
    "openai-DONE": (
        "openai_compatible",
        list(openai_events(["Hel", "lo"], usage=oa_usage(3, 2))),
        "text/event-stream",
        "Hello",
    ),
    "anthropic-message_stop": (
        "anthropic",
        list(anthropic_events(["Hel", "lo"])),
        "text/event-stream",
        "Hello",
    ),
    "responses-completed": (
        "openai_responses",
        list(responses_events(["Hi", "!"])),
        "text/event-stream",
        "Hi!",
    ),
    "responses-incomplete": (
        "openai_responses",
        _responses_terminal("response.incomplete"),
        "text/event-stream",
        "Hi!",
    ),
    "ollama-done": ("ollama", list(_ollama_lines()), "application/x-ndjson", "Hello!"),
}


def _held_open(events: list[bytes], content_type: str, framing: str) -> Reply:
    """The whole stream, then nothing: the body neither ends nor closes."""
    if framing == "chunked":
        head = http_head(200, {"content-type": content_type, "transfer-encoding": "chunked"})
        return [head, *(b"%x\r\n%s\r\n" % (len(e), e) for e in events), HOLD]
    # No length, no chunking: a body that would end only when the server closes.
    return [http_head(200, {"content-type": content_type}), *events, HOLD]


def _provider(kind: str, base_url: str, transport: str) -> Provider:
    cls = provider_class(kind)
    data = {
        "id": "p",
        "kind": kind,
        "model": "m",
        "base_url": base_url,
        "transport": transport,
        "timeouts": {"connect": 5.0, "read": READ_TIMEOUT_S, "total": 60.0},
    }
    return cls(cls.settings_model.model_validate(data), api_key="k-stream-end")


def _records(
    server: MisbehavingServer, kind: str, transport: str, recorder: BaseRecorder, n: int = 2
) -> list[RequestRecord]:
    return record_requests(lambda: _provider(kind, server.base_url, transport), recorder, n)


@pytest.mark.parametrize("framing", ["chunked", "until-close"])
@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("host", HOSTS)
@pytest.mark.parametrize("shape", list(SHAPES))
def test_a_stream_held_open_after_its_terminator_is_complete(
    shape: str, host: str, transport: str, framing: str
) -> None:
    kind, events, content_type, text = SHAPES[shape]
    reply = _held_open(events, content_type, framing)
    with MisbehavingServer(lambda _: reply, host=host) as server:
        records = _records(server, kind, transport, StreamRecorder())
        connections = server.connections
    for rec in records:
        assert rec.error is None, rec.error
        assert rec.output_text == text
        assert rec.stop_reason is not None
        assert rec.client.e2e_ms is not None
    # The held connection was not reused: the second request opened its own.
    assert connections == 2


@pytest.mark.parametrize("host", HOSTS)
def test_a_failed_response_held_open_is_its_error_not_a_timeout(host: str) -> None:
    reply = _held_open(_responses_terminal("response.failed"), "text/event-stream", "chunked")
    for transport in TRANSPORTS:
        with MisbehavingServer(lambda _: reply, host=host) as server:
            records = _records(server, "openai_responses", transport, StreamRecorder(), n=1)
        assert records[0].error is not None
        assert records[0].error.kind != ErrorKind.TIMEOUT, records[0].error


@pytest.mark.parametrize("host", HOSTS)
@pytest.mark.parametrize("shape", ["openai-DONE", "anthropic-message_stop", "responses-completed"])
def test_the_sdk_path_stops_at_the_terminator_too(shape: str, host: str) -> None:
    kind, events, content_type, text = SHAPES[shape]
    reply = _held_open(events, content_type, "chunked")
    with MisbehavingServer(lambda _: reply, host=host) as server:
        records = _records(server, kind, "httpx", SDKRecorder())
    for rec in records:
        assert rec.error is None, rec.error
        assert rec.output_text == text and rec.app.client_path == "sdk"


async def _truth_records(
    transport: str, *, n: int, tokens: int, interval_ms: float
) -> list[RequestRecord]:
    """`n` Chat streams of `tokens` tokens recorded one after another from the truth server
    (a well-behaved one: `[DONE]`, then the chunked body's end in a write of its own)."""
    from labkit.providers.fake import FakeSchedule
    from labkit.truth.process import TruthServer

    schedule = FakeSchedule(first_token_ms=1, token_interval_ms=interval_ms, tokens=tokens)
    with TruthServer.of(schedule) as server:
        provider = _provider("openai_compatible", server.base_url + "/v1", transport)
        try:
            recorder = StreamRecorder()
            return [
                await recorder.record(provider, chat(), RecordContext("r", "t")) for _ in range(n)
            ]
        finally:
            await provider.aclose()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_body_that_ends_after_its_terminator_keeps_its_connection(transport: str) -> None:
    # A well-behaved server: `[DONE]`, then the chunked body's end in a write of its own. The
    # rest of the body is drained, so the next request reuses the connection.
    first, second = asyncio.run(_truth_records(transport, n=2, tokens=3, interval_ms=1))
    assert first.error is None and second.error is None
    assert first.client.new_connection and not second.client.new_connection


async def _keep_alive_server(
    events: list[bytes], end_apart_s: float | None
) -> tuple[asyncio.Server, list[int]]:
    """A keep-alive server of chunked streams on 127.0.0.1: `events`, then the body's end in
    the same write as the last event (`end_apart_s` None) or that many seconds later in a
    write of its own. The list counts the connections it accepted."""
    accepted = [0]
    head = http_head(200, {"content-type": "text/event-stream", "transfer-encoding": "chunked"})
    chunks = [b"%x\r\n%s\r\n" % (len(e), e) for e in events]

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted[0] += 1
        try:
            while True:
                await next_request(reader)
                writer.write(head + b"".join(chunks[:-1]))
                if end_apart_s is None:
                    writer.write(chunks[-1] + b"0\r\n\r\n")
                else:
                    writer.write(chunks[-1])
                    await writer.drain()
                    await asyncio.sleep(end_apart_s)
                    writer.write(b"0\r\n\r\n")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the client closed its connection
        finally:
            writer.close()

    return await asyncio.start_server(serve, "127.0.0.1", 0), accepted


@pytest.mark.parametrize("end_apart_s", [None, 0.05], ids=["end-with-terminator", "end-later"])
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_body_is_drained_only_while_it_has_not_ended(
    transport: str, end_apart_s: float | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A body whose end came with its terminator is closed at once; one still open after the
    # terminator is read to its end. Either way the next request reuses the connection.
    from labkit.measurement import recorder as recorder_module

    drained: list[bool] = []
    drain = recorder_module.drain_after_terminator

    async def counted(rest: object) -> None:
        drained.append(True)
        await drain(rest)  # type: ignore[arg-type]

    monkeypatch.setattr(recorder_module, "drain_after_terminator", counted)
    # The drain's own bound is not under test: a busy host must not make it give up early.
    monkeypatch.setattr(recorder_module, "DRAIN_AFTER_TERMINATOR_S", 10.0)
    events = list(openai_events(["Hel", "lo"], usage=oa_usage(3, 2)))

    async def main() -> tuple[list[RequestRecord], int]:
        server, accepted = await _keep_alive_server(events, end_apart_s)
        port = server.sockets[0].getsockname()[1]
        provider = _provider("openai_compatible", f"http://127.0.0.1:{port}/v1", transport)
        try:
            recorder = StreamRecorder()
            records = [
                await recorder.record(provider, chat(), RecordContext("r", "t")) for _ in range(3)
            ]
        finally:
            await provider.aclose()
            server.close()
            await server.wait_closed()
            await asyncio.sleep(0.01)  # let the handler see its connection end
        return records, accepted[0]

    records, connections = asyncio.run(main())
    for rec in records:
        assert rec.error is None, rec.error
        assert rec.output_text == "Hello"
    assert connections == 1
    assert [r.client.new_connection for r in records] == [True, False, False]
    if transport == "lean":
        assert len(drained) == (0 if end_apart_s is None else 3)
    else:  # httpx's own body: labkit cannot see its end, so it always reads on
        assert len(drained) == 3


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_read_stream_leaves_no_body_iterator_for_the_loop_to_close(
    transport: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The body's iterator is left at the first read once the rest is pushed (the lean
    # transport) or at the terminator: closed by the recorder, not by the loop's finalizer
    # hook, which would give every request a task of its own for it.
    from labkit.wire import loopclock

    dropped: list[object] = []
    hook = loopclock._Loop._asyncgen_finalizer_hook

    def counted(self: loopclock._Loop, agen: object) -> None:
        dropped.append(agen)
        hook(self, agen)

    monkeypatch.setattr(loopclock._Loop, "_asyncgen_finalizer_hook", counted)

    records = loopclock.run(_truth_records(transport, n=3, tokens=8, interval_ms=2))
    assert [r.error for r in records] == [None] * 3
    assert all(r.usage.streamed_output_tokens == 8 for r in records)
    assert dropped == []
