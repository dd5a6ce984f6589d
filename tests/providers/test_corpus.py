"""Every corpus shape replayed over a real socket on 127.0.0.1, through the wire recorder
and through the official SDK (openai / anthropic, for the kinds that have one), and checked
against its sidecar.

A small asyncio HTTP server answers any POST with the fixture's bytes, written event by
event and each event in two writes (so reads end inside events, inside UTF-8 characters
and between them), with a short pause between writes.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from labkit.measurement.recorder import RecordContext, StreamRecorder
from labkit.measurement.sdkpath import SDKRecorder
from labkit.providers import Provider, sdk_available
from labkit.records import RequestRecord
from labkit.wire.lean import kernel_stamps_available
from tests.providers.streams import chat, make_provider
from tests.providers.streams.corpus import Fixture, check_record, load_corpus

pytestmark = pytest.mark.integration

CORPUS = load_corpus()
IDS = [f.name for f in CORPUS]
#: The shapes of kinds with an official SDK adapter (Ollama's client has none: ollama.py).
SDK_CORPUS = [f for f in CORPUS if sdk_available(f.kind)]


def _writes(fixture: Fixture) -> list[bytes]:
    """Each event in two writes, cut in its middle byte."""
    out = []
    for event in fixture.events():
        mid = len(event) // 2
        out += [event[:mid], event[mid:]]
    return out


@asynccontextmanager
async def serve(fixture: Fixture, pause_s: float = 0.001) -> AsyncIterator[str]:
    """Serve `fixture` to every POST; yields the server root URL."""
    extra = "".join(f"{k}: {v}\r\n" for k, v in fixture.headers.items())
    head = (
        f"HTTP/1.1 200 OK\r\ncontent-type: {fixture.content_type}\r\ncache-control: no-cache\r\n"
        f"connection: close\r\n{extra}\r\n"
    ).encode()
    writes = _writes(fixture)

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            headers = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in headers.decode("latin-1").split("\r\n"):
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value)
            await reader.readexactly(length)
            writer.write(head)
            for piece in writes:
                writer.write(piece)
                await writer.drain()
                await asyncio.sleep(pause_s)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client hung up (the SDK stops reading at an error)
        finally:
            writer.close()

    answering: set[asyncio.Task[None]] = set()

    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        answering.add(task)
        await answer(reader, writer)

    server = await asyncio.start_server(on_connect, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.close()
        # Let an answer the client stopped reading finish its writes (they fail fast).
        await asyncio.gather(*answering, return_exceptions=True)
        await server.wait_closed()


def provider_for(fixture: Fixture, root: str, transport: str = "auto") -> Provider:
    """A provider of the fixture's kind pointed at the local server."""
    base = root if fixture.kind in ("llamacpp", "ollama") else root + "/v1"
    key = None if fixture.kind in ("openai_compatible", "llamacpp", "ollama") else "sk-corpus"
    return make_provider(
        fixture.kind, api_key=key, base_url=base, model="corpus-model", transport=transport
    )


def replay(fixture: Fixture, path: str, transport: str = "auto") -> RequestRecord:
    """Record the fixture once through the `wire` or `sdk` path (the wire path through
    `transport`)."""

    async def go() -> RequestRecord:
        async with serve(fixture) as root:
            provider = provider_for(fixture, root, transport)
            ctx = RecordContext(run_id="corpus", experiment=fixture.name)
            request = chat(max_tokens=64)
            try:
                if path == "wire":
                    return await StreamRecorder().record(provider, request, ctx)
                sdk = SDKRecorder()
                try:
                    return await sdk.record(provider, request, ctx)
                finally:
                    await sdk.aclose()
            finally:
                await provider.aclose()

    return asyncio.run(go())


def test_corpus_has_the_shapes_asked_for() -> None:
    assert len(CORPUS) >= 30
    assert {f.kind for f in CORPUS} == {
        "openai",
        "openai_compatible",
        "llamacpp",
        "anthropic",
        "ollama",
        "openai_responses",
    }
    for f in CORPUS:
        assert f.source and f.shape and "error_kind" in f.expect, f.name


def test_every_tool_call_shape_pins_its_calls() -> None:
    # A reply that ends for a tool call names the calls it expects (ids, names and the
    # arguments' complete text), so every path is checked for what a session sends back.
    calling = [f for f in CORPUS if f.expect.get("stop_reason") == "tool_call"]
    assert len(calling) >= 8
    for f in calling:
        assert f.expect.get("tool_calls"), f.name


@pytest.mark.parametrize("fixture", CORPUS, ids=IDS)
def test_wire_path_reads_the_shape(fixture: Fixture) -> None:
    record = replay(fixture, "wire")
    assert record.app.client_path == "wire"
    check_record(record, fixture.expect)


@pytest.mark.parametrize("fixture", CORPUS, ids=IDS)
def test_the_lean_transport_reads_the_shape(fixture: Fixture) -> None:
    # Load levels read through labkit's own socket reader (kernel stamps): every documented
    # shape, each event split mid-byte over two writes, must come out as on httpx.
    record = replay(fixture, "wire", transport="lean")
    if record.client.event_offsets_ms:  # read through lean: stamped by the kernel where it can
        assert record.client.stamp_source == ("kernel" if kernel_stamps_available() else "user")
    check_record(record, fixture.expect)


# The SDKs build their chunk models without validation, so a field can hold another type
# than declared (Mistral's content parts, a numeric id); labkit reads the objects as they are
# (`model_view`), never dumping them, so pydantic's serializer warnings must not appear.
@pytest.mark.filterwarnings("error:Pydantic serializer warnings:UserWarning")
@pytest.mark.parametrize("fixture", SDK_CORPUS, ids=[f.name for f in SDK_CORPUS])
def test_sdk_path_reads_the_shape_or_fails_as_documented(fixture: Fixture) -> None:
    record = replay(fixture, "sdk")
    assert record.app.client_path == "sdk"
    check_record(record, fixture.sdk_expect())
