"""The wire recorder against a real HTTP server on 127.0.0.1 that sends mutated streams, one
write per read boundary, in chunked transfer encoding (a dropped connection is a body cut
before its last chunk): the same properties as over the mock transport, through httpx's real
connection handling and through labkit's own reader (`labkit.lean`). Few examples: each one
starts a server and a provider."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from labkit.measurement.recorder import RecordContext, StreamRecorder
from labkit.records import RequestRecord
from tests.providers.streams import chat, make_provider
from tests.support.fuzz_checks import assert_one_valid_record
from tests.support.fuzz_streams import (
    KINDS,
    PLANTED_KEY,
    PROVIDER_SETTINGS,
    MutatedStream,
    mutated_streams,
)

pytestmark = pytest.mark.integration

HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


async def _read_request(reader: asyncio.StreamReader) -> None:
    head = await reader.readuntil(b"\r\n\r\n")
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            await reader.readexactly(int(value))


def _settings_for(kind: str, root: str) -> dict[str, Any]:
    base_url = f"{root}/v1" if kind in ("openai", "openai_compatible") else root
    return {**PROVIDER_SETTINGS[kind], "base_url": base_url}


async def _record_over_a_socket(
    kind: str, stream: MutatedStream, transport: str
) -> tuple[RequestRecord, list[RequestRecord]]:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await _read_request(reader)
            writer.write(HEAD)
            for chunk in stream.chunks:
                writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                await writer.drain()
            if not stream.drop:
                writer.write(b"0\r\n\r\n")
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client gave up first: its record says why
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    settings = _settings_for(kind, f"http://127.0.0.1:{port}")
    provider = make_provider(kind, api_key=PLANTED_KEY, **{**settings, "transport": transport})
    cancelled: list[RequestRecord] = []
    try:
        recorder = StreamRecorder(on_cancelled=cancelled.append)
        rec = await recorder.record(provider, chat(), RecordContext(run_id="r", experiment="t"))
    finally:
        await provider.aclose()
        server.close()
        await server.wait_closed()
    return rec, cancelled


@pytest.mark.parametrize("transport", ["httpx", "lean"])
@pytest.mark.parametrize("kind", KINDS)
@settings(max_examples=5)
@given(data=st.data())
def test_every_mutated_stream_over_a_socket_is_one_valid_record_without_the_key(
    kind: str, transport: str, data: st.DataObject
) -> None:
    # Through httpx and through labkit's own HTTP/1.1 reader, which load levels use.
    stream = data.draw(mutated_streams(kind), label="stream")
    rec, cancelled = asyncio.run(_record_over_a_socket(kind, stream, transport))
    assert_one_valid_record(rec, cancelled, stream)
