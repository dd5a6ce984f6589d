"""The lean HTTP/1.1 transport (`labkit.lean`) over real loopback sockets.

Small asyncio servers send exactly the bytes under test: chunked bodies split anywhere,
Content-Length and read-until-close bodies, keep-alive, a server that dies mid-body. The
recorder must get the same records through it as through httpx, with arrival stamps.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable

import httpx
import pytest

from labkit.measurement.recorder import RecordContext, StreamRecorder
from labkit.providers import provider_class
from labkit.providers.base import Provider
from labkit.providers.fake import FakeSchedule
from labkit.records import ErrorKind, RequestRecord
from labkit.truth.process import TruthServer
from labkit.wire.lean import LeanTransport, lean_applies
from labkit.wire.lean.http11 import _Chunked
from tests.providers.streams import chat

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@contextlib.asynccontextmanager
async def serve(handler: Handler, context: ssl.SSLContext | None = None) -> AsyncIterator[str]:
    """A server on 127.0.0.1 (TLS with `context`) running `handler` per connection; its
    root URL. Connections still open are aborted on exit."""
    writers: list[asyncio.StreamWriter] = []

    async def tracked(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.append(writer)
        with contextlib.suppress(ConnectionError, ssl.SSLError, asyncio.IncompleteReadError):
            await handler(reader, writer)

    server = await asyncio.start_server(tracked, "127.0.0.1", 0, ssl=context)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"{'https' if context else 'http'}://127.0.0.1:{port}"
    finally:
        server.close()
        for writer in writers:
            writer.transport.abort()
        with contextlib.suppress(Exception):
            await server.wait_closed()
        await asyncio.sleep(0.01)  # let the handlers see their connections end


async def read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    return head + (await reader.readexactly(length) if length else b"")


@pytest.mark.unit
def test_chunked_decoding_survives_any_split() -> None:
    body = b"4\r\nWiki\r\n6;ext=1\r\npedia \r\nE\r\nin \r\n\r\nchunks.\r\n0\r\nX-T: 1\r\n\r\nNEXT"
    for step in (1, 2, 3, 5, 7, len(body)):
        decoder = _Chunked()
        out = b""
        rest = b""
        done = False
        for i in range(0, len(body), step):
            payload, rest, done = decoder.feed(body[i : i + step])
            out += payload
            if done:
                rest += body[i + step :]
                break
        assert done and out == b"Wikipedia in \r\n\r\nchunks." and rest == b"NEXT", step


@pytest.mark.unit
def test_lean_applies_to_http_and_https_without_a_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy",
                "ALL_PROXY", "no_proxy", "NO_PROXY"):  # fmt: skip
        monkeypatch.delenv(var, raising=False)
    assert lean_applies("http://127.0.0.1:8080/v1")
    assert lean_applies("https://api.openai.com/v1")
    assert not lean_applies("ws://127.0.0.1:8080/v1")
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy:3128")
    assert not lean_applies("https://api.openai.com/v1")
    monkeypatch.setenv("HTTP_PROXY", "http://proxy:3128")
    assert not lean_applies("http://10.0.0.5:8000/v1")
    monkeypatch.setenv("NO_PROXY", "10.0.0.5")
    assert lean_applies("http://10.0.0.5:8000/v1")


def _get(url: str, **kw: object) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=url, transport=LeanTransport(), **kw)  # type: ignore[arg-type]


@pytest.mark.integration
def test_content_length_close_delimited_and_keep_alive() -> None:
    connections = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            while True:
                request = await read_request(reader)
                if b"/close" in request:
                    writer.write(b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\nuntil-close")
                    await writer.drain()
                    break
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello")
                await writer.drain()
        writer.close()

    async def main() -> None:
        async with serve(handler) as url, _get(url) as client:
            for _ in range(3):  # one connection, kept alive
                response = await client.get("/len")
                assert response.status_code == 200 and response.text == "hello"
            assert connections == 1
            response = await client.get("/close")
            assert response.text == "until-close"
            response = await client.get("/len")  # the closed connection is not reused
            assert response.text == "hello" and connections == 2

    asyncio.run(main())


@pytest.mark.integration
def test_errors_are_httpx_errors() -> None:
    async def dies_mid_body(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhel")
        await writer.drain()
        writer.transport.abort()

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.transport.abort()

    async def main() -> None:
        async with serve(dies_mid_body) as url, _get(url) as client:
            with pytest.raises(httpx.RemoteProtocolError, match="complete message body"):
                await client.get("/")
        async with serve(silent) as url, _get(url) as client:
            with pytest.raises(httpx.RemoteProtocolError, match="without sending a response"):
                await client.get("/")
        async with serve(silent) as url:
            dead = url
        async with _get(dead) as client:
            with pytest.raises(httpx.ConnectError):
                await client.get("/")
        with pytest.raises(httpx.UnsupportedProtocol):
            await LeanTransport().handle_async_request(httpx.Request("GET", "ws://127.0.0.1:1/"))

    asyncio.run(main())


def _provider(url: str, transport: str, pool_size: int | None = 4) -> Provider:
    """An OpenAI-compatible provider on `url`; a `pool_size` is a load level's."""
    cls = provider_class("openai_compatible")
    settings = cls.settings_model.model_validate(
        {
            "id": "s",
            "kind": "openai_compatible",
            "model": "m",
            "base_url": url,
            "transport": transport,
        }
    )
    return cls(settings, pool_size=pool_size)


@pytest.mark.integration
def test_the_recorder_reads_the_same_stream_through_both_transports() -> None:
    schedule = FakeSchedule(first_token_ms=20, token_interval_ms=5, tokens=12)

    async def main() -> tuple[list[RequestRecord], list[RequestRecord]]:
        with TruthServer.of(schedule) as server:
            out: dict[str, list[RequestRecord]] = {}
            for transport in ("lean", "httpx"):
                provider = _provider(server.base_url, transport)
                assert provider.connections.lean is (transport == "lean")
                recorder = StreamRecorder()
                ctx = RecordContext("t", "t")
                out[transport] = [await recorder.record(provider, chat(), ctx) for _ in range(3)]
                await provider.aclose()
            return out["lean"], out["httpx"]

    lean, plain = asyncio.run(main())
    for a, b in zip(lean, plain, strict=True):
        assert a.error is None and b.error is None
        assert a.usage == b.usage and a.stop_reason == b.stop_reason
        assert a.output_text == b.output_text
        assert len(a.client.event_offsets_ms) == len(b.client.event_offsets_ms) == 12
        assert a.client.loop_lag_ms is None  # the 5 ms loop probe is retired
    first = lean[0].client
    # A fresh connection: every phase observed, in order, then the schedule's 20 ms. The
    # connect stamp and the request's are taken in user space, one after the other; the
    # headers' and the tokens' are the kernel's arrival stamps, and the headers can only
    # arrive after the connect. The request-sent stamp is read after send() returns: on a busy
    # host it may come after the answer's headers arrived, so it is ordered with the connect.
    assert first.connect_ms is not None and first.request_sent_ms is not None
    assert first.connect_ms <= first.request_sent_ms
    assert first.connect_ms <= (first.headers_ms or 0) < (first.ttft_ms or 0)
    # 20 ms, then 5 ms a token, on the schedule's absolute times: a stamp is never before the
    # server sent (how late it can be is the machine's load, not behaviour).
    assert (first.ttft_ms or 0) >= 20.0
    assert (first.last_token_ms or 0) >= 20.0 + 11 * 5.0
    assert (first.decode_ms_per_token or 0) > 0
    # The next requests reuse the kept-alive connection: no connect phase.
    assert lean[1].client.connect_ms is None and lean[2].client.connect_ms is None


@pytest.mark.integration
def test_a_failure_mid_stream_is_recorded_through_the_lean_transport() -> None:
    drop = FakeSchedule(first_token_ms=5, token_interval_ms=2, tokens=10, fail="drop",
                        fail_after_tokens=3)  # fmt: skip

    async def main() -> RequestRecord:
        with TruthServer.of(drop) as server:
            provider = _provider(server.base_url, "lean")
            try:
                return await StreamRecorder().record(provider, chat(), RecordContext("t", "t"))
            finally:
                await provider.aclose()

    record = asyncio.run(main())
    assert record.error is not None and record.error.kind == ErrorKind.CONNECTION
    assert "mid-stream" in record.error.message
    assert len(record.client.event_offsets_ms) == 3


@pytest.mark.unit
def test_transport_lean_behind_a_proxy_is_refused_with_one_message(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from labkit.errors import ProviderUnavailable

    for var in ("no_proxy", "NO_PROXY", "all_proxy", "ALL_PROXY", "https_proxy"):
        monkeypatch.delenv(var, raising=False)
    assert _provider("https://example.invalid/v1", "lean").connections.lean
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.invalid:3128")
    with pytest.raises(ProviderUnavailable, match="http:// and https:// only, without a proxy"):
        _provider("https://example.invalid/v1", "lean")
    assert not _provider("https://example.invalid/v1", "auto").connections.lean


@pytest.mark.unit
@pytest.mark.parametrize(
    ("url", "transport", "lean"),
    [
        ("http://127.0.0.1:8080/v1", "auto", True),  # a server on this machine
        ("http://localhost:11434", "auto", True),
        ("https://[::1]:8443/v1", "auto", True),
        ("http://127.0.0.1:8080/v1", "httpx", False),  # asked for: kept
        ("https://api.example.invalid/v1", "auto", False),  # hosted, outside a load level
        ("http://gpu-box.invalid:8000/v1", "auto", True),  # a server on the LAN, plain http
        ("https://gpu-box.invalid:8443/v1", "auto", False),
    ],
    ids=["loopback", "localhost", "ipv6-loopback-https", "httpx-asked", "hosted", "lan", "lan-tls"],
)
def test_auto_reads_a_near_server_through_lean(url: str, transport: str, lean: bool) -> None:
    # httpx stamps the request sent after its own return path, on loopback after the server
    # has read it; a near server (this machine, or plain http on a LAN) is where that share
    # of the first token shows. Building
    # the provider opens no socket (the unit tier refuses one): the kernel-stamp probe
    # waits for the set-up or the first connection.
    assert _provider(url, transport, pool_size=None).connections.lean is lean


@pytest.mark.integration
def test_kernel_stamps_are_held_on_for_connections_opened_one_after_another() -> None:
    # Linux switches receive timestamping on for the whole stack only a moment after the
    # first socket asks, and off when the last closes: without a socket holding it on, about
    # one fresh connection in five on this host got its first bytes with no kernel stamp
    # (CI saw two corpus replays stamped in user space). After hold_kernel_stamps, none may.
    from labkit.wire.lean import (
        hold_kernel_stamps,
        kernel_stamps_available,
        loopback_pair,
        read_is_stamped,
    )

    if not kernel_stamps_available():
        assert hold_kernel_stamps() is False
        return
    assert hold_kernel_stamps() is True
    unstamped = 0
    for _ in range(200):
        with loopback_pair(timeout=5) as (sender, receiver):
            unstamped += not read_is_stamped(sender, receiver, b"first byte")
    assert unstamped == 0
