"""`client.e2e_ms` is the terminator's arrival, not when labkit finished with the stream.

A server on a real socket sends a whole stream and then holds its body open, so the recorder
drains after the terminator. Whatever the path — httpx, the lean transport, the SDK — the
stream's end must be stamped no later than the moment labkit's parser was handed the
terminator (which is after its bytes were read): never after the parsing that followed, the
drain or the close. Ordering only, never speed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest

from labkit.measurement.recorder import BaseRecorder, RecordContext, StreamRecorder
from labkit.measurement.sdkpath import SDKRecorder
from labkit.providers import EventClass, Provider, StreamParser
from labkit.records import RequestRecord
from tests.measurement.test_stream_end import SHAPES, TRANSPORTS, _held_open, _provider
from tests.providers.streams import chat
from tests.support.misbehaving import MisbehavingServer

pytestmark = pytest.mark.integration

#: The parser's entry points on either path: the wire's events, the SDKs' chunks and objects.
_ENTRY_POINTS = ("on_event", "on_chunk", "on_object")


def _watch_the_end(parser: StreamParser, seen: list[int]) -> StreamParser:
    """`parser`, noting in `seen` the clock when an entry point first returned the end."""

    def watched(method: Callable[..., int]) -> Callable[..., int]:
        def call(*args: Any) -> int:
            cls = method(*args)
            if not seen and (cls == EventClass.DONE or parser.ended):
                seen.append(time.perf_counter_ns())
            return cls

        return call

    for name in _ENTRY_POINTS:
        if hasattr(parser, name):
            setattr(parser, name, watched(getattr(parser, name)))
    return parser


def _record(
    server: MisbehavingServer, kind: str, transport: str, recorder: BaseRecorder
) -> tuple[RequestRecord, list[int]]:
    seen: list[int] = []

    async def main() -> RequestRecord:
        provider: Provider = _provider(kind, server.base_url, transport)
        new_parser = provider.new_parser

        def new_watched_parser() -> StreamParser:
            seen.clear()  # the measured request's parser is the last one made (not a set-up's)
            return _watch_the_end(new_parser(), seen)

        provider.new_parser = new_watched_parser  # type: ignore[method-assign]
        try:
            return await recorder.record(provider, chat(), RecordContext("r", "t"))
        finally:
            if isinstance(recorder, SDKRecorder):
                await recorder.aclose()
            await provider.aclose()

    return asyncio.run(main()), seen


def _assert_ends_at_the_terminator(rec: RequestRecord, seen: list[int]) -> None:
    assert rec.error is None, rec.error
    assert seen, "the parser never saw the stream's end"
    c = rec.client
    assert c.e2e_ms is not None and c.last_token_ms is not None
    assert rec.t_start_mono_ns is not None
    end_ns = rec.t_start_mono_ns + round(c.e2e_ms * 1e6)
    assert end_ns <= seen[0]  # stamped at the terminator's read, not after it
    assert c.last_token_ms <= c.e2e_ms


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("shape", list(SHAPES))
def test_the_wire_path_stamps_the_end_at_the_terminators_read(shape: str, transport: str) -> None:
    kind, events, content_type, _ = SHAPES[shape]
    reply = _held_open(events, content_type, "chunked")
    with MisbehavingServer(lambda _: reply) as server:
        rec, seen = _record(server, kind, transport, StreamRecorder())
    _assert_ends_at_the_terminator(rec, seen)


@pytest.mark.parametrize("shape", ["openai-DONE", "anthropic-message_stop", "responses-completed"])
def test_the_sdk_path_stamps_the_end_when_the_terminator_is_decoded(shape: str) -> None:
    kind, events, content_type, _ = SHAPES[shape]
    reply = _held_open(events, content_type, "chunked")
    with MisbehavingServer(lambda _: reply) as server:
        rec, seen = _record(server, kind, "httpx", SDKRecorder())
    assert rec.app.client_path == "sdk"
    _assert_ends_at_the_terminator(rec, seen)
