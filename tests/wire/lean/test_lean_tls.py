"""The lean transport over TLS, its kernel receive stamps and `preconnect`, on real sockets.

Certificates come from a throwaway CA (`trustme`). The servers are asyncio TLS servers
writing exactly the bytes under test, or a thread with a blocking socket where the test must
send while the client's loop is blocked.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator

import httpx
import pytest
import trustme

from labkit.measurement.recorder import RecordContext, StreamRecorder
from labkit.providers import provider_class
from labkit.providers.base import Provider
from labkit.providers.fake import FakeSchedule
from labkit.records import ErrorKind, RequestRecord
from labkit.truth.process import TruthServer
from labkit.wire.lean import LeanTransport, kernel_stamps_available
from tests.providers.streams import chat
from tests.wire.lean.test_lean import read_request, serve

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


def server_context(ca: trustme.CA, *names: str) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert(*(names or ("127.0.0.1", "localhost"))).configure_cert(context)
    return context


def client_context(ca: trustme.CA) -> ssl.SSLContext:
    context = httpx.create_ssl_context(trust_env=False)
    ca.configure_trust(context)
    return context


def lean_client(url: str, ca: trustme.CA) -> httpx.AsyncClient:
    transport = LeanTransport(ssl_context=client_context(ca))
    return httpx.AsyncClient(base_url=url, transport=transport)


def test_streams_read_right_over_tls(ca: trustme.CA) -> None:
    connections = 0
    chunked = b"5\r\nhello\r\n1\r\n \r\n5\r\nworld\r\n0\r\n\r\n"

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        while True:
            request = await read_request(reader)
            if b"/chunked" in request:
                writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
                for i in range(0, len(chunked), 3):  # TLS records cut anywhere in the framing
                    writer.write(chunked[i : i + 3])
                    await writer.drain()
                    await asyncio.sleep(0.001)
            elif b"/close" in request:
                writer.write(b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\nuntil-close")
                await writer.drain()
                writer.close()  # with close_notify
                return
            else:
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello")
                await writer.drain()

    async def main() -> None:
        async with serve(handler, server_context(ca)) as url, lean_client(url, ca) as client:
            for _ in range(3):  # one connection, kept alive (session tickets read while idle)
                response = await client.get("/len")
                assert response.text == "hello"
                assert response.extensions["labkit.arrival"].t_ns > 0
            assert connections == 1
            response = await client.get("/chunked")
            assert response.text == "hello world" and connections == 1
            response = await client.get("/close")
            assert response.text == "until-close"
            response = await client.get("/len")  # the closed connection is not reused
            assert response.text == "hello" and connections == 2
            assert response.extensions["labkit.connection"] == "opened"

    asyncio.run(main())


def test_a_server_closing_without_close_notify(ca: trustme.CA) -> None:
    connections = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        request = await read_request(reader)
        if b"/length" in request:
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello")
        elif b"/cut" in request:
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 50\r\n\r\nhello")
        else:
            writer.write(b"HTTP/1.1 200 OK\r\n\r\nread-until-close")
        await writer.drain()
        writer.transport.abort()  # TCP close, no close_notify

    async def main() -> None:
        async with serve(handler, server_context(ca)) as url, lean_client(url, ca) as client:
            assert (await client.get("/length")).text == "hello"
            await asyncio.sleep(0.05)  # the close reaches the idle connection
            assert (await client.get("/length")).text == "hello"  # not the dead connection
            assert connections == 2
            # A close-delimited body ends at the close, as httpx/httpcore take it.
            await asyncio.sleep(0.05)
            assert (await client.get("/close")).text == "read-until-close"
            with pytest.raises(httpx.RemoteProtocolError, match="complete message body"):
                await client.get("/cut")
            assert connections == 4

    asyncio.run(main())


def test_untrusted_certificates_and_wrong_hostnames_are_refused(ca: trustme.CA) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
        await writer.drain()

    async def main() -> None:
        other = trustme.CA()
        async with serve(handler, server_context(ca)) as url, lean_client(url, other) as client:
            with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
                await client.get("/")
        named = server_context(ca, "labkit.test")
        async with serve(handler, named) as url, lean_client(url, ca) as client:
            with pytest.raises(httpx.ConnectError, match="mismatch"):
                await client.get("/")

    asyncio.run(main())


def _provider(url: str) -> Provider:
    cls = provider_class("openai_compatible")
    settings = cls.settings_model.model_validate(
        {"id": "s", "kind": "openai_compatible", "model": "m", "base_url": url}
    )
    return cls(settings, pool_size=4)


def test_the_recorder_over_tls_measures_the_handshake_then_reuses(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    schedule = FakeSchedule(first_token_ms=20, token_interval_ms=5, tokens=8)

    async def main() -> list[RequestRecord]:
        with TruthServer.of(schedule, tls=True) as server:
            # Providers built now trust the server's throw-away CA (httpx reads SSL_CERT_FILE).
            monkeypatch.setenv("SSL_CERT_FILE", str(server.ca_file))
            provider = _provider(server.tls_base_url)
            assert provider.connections.lean  # a load level on https reads through lean
            recorder = StreamRecorder()
            ctx = RecordContext("t", "t")
            try:
                return [await recorder.record(provider, chat(), ctx) for _ in range(2)]
            finally:
                await provider.aclose()

    first, second = asyncio.run(main())
    assert first.error is None and second.error is None
    assert len(first.client.event_offsets_ms) == 8 and first.output_text == second.output_text
    c = first.client
    assert c.connect_ms is not None and c.tls_ms is not None and c.request_sent_ms is not None
    # User-space stamps in their order, kernel arrival stamps in theirs; the headers arrive
    # after the handshake (the request-sent stamp, read after send() returns, may come later
    # than the headers' arrival on a busy host).
    assert c.connect_ms <= c.tls_ms <= c.request_sent_ms
    assert c.tls_ms <= (c.headers_ms or 0) < (c.ttft_ms or 0)
    # The schedule's 20 ms run from the request's arrival, which comes after the handshake
    # the client stamped: a floor, whatever the host adds.
    assert (c.ttft_ms or 0) - c.tls_ms >= 20.0
    assert second.client.connect_ms is None and second.client.tls_ms is None


def test_an_untrusted_server_is_a_connection_record() -> None:
    schedule = FakeSchedule(first_token_ms=1, token_interval_ms=1, tokens=2)

    async def main() -> RequestRecord:
        with TruthServer.of(schedule, tls=True) as server:
            provider = _provider(server.tls_base_url)  # the system's CAs: not this one
            try:
                return await StreamRecorder().record(provider, chat(), RecordContext("t", "t"))
            finally:
                await provider.aclose()

    record = asyncio.run(main())
    assert record.error is not None and record.error.kind == ErrorKind.CONNECTION
    assert "ConnectError" in record.error.message
    assert "CERTIFICATE_VERIFY_FAILED" in record.error.message


@contextlib.contextmanager
def held_event_server(
    context: ssl.SSLContext | None,
) -> Iterator[tuple[int, threading.Event, threading.Event]]:
    """A one-request server in a thread: it sends the headers at once, then one event after
    `release` is set, then sets `sent` (loopback: the bytes are in the client's receive
    queue when send returns)."""
    release = threading.Event()
    sent = threading.Event()
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def run() -> None:
        raw, _ = listener.accept()
        conn = context.wrap_socket(raw, server_side=True) if context else raw
        with conn:
            received = b""
            while b"\r\n\r\n" not in received:
                received += conn.recv(4096)
            conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                         b"transfer-encoding: chunked\r\n\r\n")  # fmt: skip
            release.wait(10)
            conn.sendall(b"d\r\ndata: token\n\n\r\n")
            sent.set()
            conn.sendall(b"0\r\n\r\n")
            with contextlib.suppress(OSError):
                conn.recv(4096)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield port, release, sent
    finally:
        release.set()
        listener.close()
        thread.join(5)


@pytest.mark.parametrize("tls", [False, True], ids=["tcp", "tls"])
def test_kernel_stamps_show_when_bytes_arrived_not_when_the_busy_loop_read_them(
    ca: trustme.CA, tls: bool
) -> None:
    with held_event_server(server_context(ca) if tls else None) as (port, release, sent):
        scheme = "https" if tls else "http"

        async def main() -> tuple[int, int, bool, bytes]:
            url = f"{scheme}://127.0.0.1:{port}"
            async with lean_client(url, ca) as client, client.stream("GET", "/") as response:
                arrival = response.extensions["labkit.arrival"]
                release.set()
                assert sent.wait(10)
                time.sleep(0.030)  # labkit's loop is busy while the event waits in the kernel
                chunks = response.aiter_bytes()
                first = await anext(chunks)
                stamps = (arrival.t_ns, arrival.seen_ns, arrival.kernel_stamped)
                async for _ in chunks:
                    pass
                return (*stamps, first)

        t_ns, seen_ns, kernel, first = asyncio.run(main())
    assert first == b"data: token\n\n"
    if kernel_stamps_available():
        assert kernel
        assert seen_ns - t_ns >= 25_000_000  # the 30 ms the loop was blocked
    else:
        assert not kernel and t_ns == seen_ns


@pytest.mark.parametrize("tls", [False, True], ids=["tcp", "tls"])
def test_preconnect_opens_the_missing_connections_and_a_request_reuses_one(
    ca: trustme.CA, tls: bool
) -> None:
    accepted = 0
    gate = asyncio.Event()  # bound to main's loop on first wait (Python 3.10+)

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal accepted
        accepted += 1
        while True:
            request = await read_request(reader)
            if b"/slow" in request:
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\n")
                await writer.drain()
                await gate.wait()
                writer.write(b"slow")
            else:
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello")
            await writer.drain()

    async def until(predicate: Callable[[], bool]) -> None:
        for _ in range(500):
            if predicate():
                return
            await asyncio.sleep(0.01)

    async def main() -> None:
        async with serve(handler, server_context(ca) if tls else None) as url:
            transport = LeanTransport(ssl_context=client_context(ca))
            async with httpx.AsyncClient(base_url=url, transport=transport) as client:
                assert await transport.preconnect(url, 3, timeout=10) == 3
                await until(lambda: accepted == 3)
                assert accepted == 3
                assert await transport.preconnect(httpx.URL(url), 3) == 0
                phases: list[str] = []

                async def trace(name: str, info: dict[str, object]) -> None:
                    phases.append(name)

                response = await client.get("/", extensions={"trace": trace})
                assert response.text == "hello"
                assert response.extensions["labkit.connection"] == "preconnected"
                assert "connection.connect_tcp.complete" not in phases
                assert "connection.start_tls.complete" not in phases
                assert "http11.receive_response_headers.complete" in phases
                # Back in the pool: a kept-alive connection, no longer counted as opened ahead.
                response = await client.get("/")
                assert response.extensions["labkit.connection"] in ("preconnected", "reused")
                async with client.stream("GET", "/slow") as slow:  # one taken, two idle
                    assert await transport.preconnect(url, 3) == 1
                    gate.set()
                    assert await slow.aread() == b"slow"
                await until(lambda: accepted == 4)
                assert accepted == 4
                phases.clear()
                for _ in range(4):  # all four idle now: none opened
                    await client.get("/", extensions={"trace": trace})
                assert "connection.connect_tcp.complete" not in phases and accepted == 4

    asyncio.run(main())


def test_preconnect_to_nothing_raises_a_connect_error() -> None:
    async def main() -> None:
        listener = socket.create_server(("127.0.0.1", 0))
        port = listener.getsockname()[1]
        listener.close()
        transport = LeanTransport()
        with pytest.raises(httpx.ConnectError):
            await transport.preconnect(f"http://127.0.0.1:{port}", 2, timeout=5)
        await transport.aclose()

    asyncio.run(main())


@pytest.mark.parametrize("tls", [False, True], ids=["tcp", "tls"])
def test_a_large_request_body_is_sent_whole_and_a_stalled_stream_times_out(
    ca: trustme.CA, tls: bool
) -> None:
    big = bytes(range(256)) * 16384  # 4 MiB: more than a socket takes in one send

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            request = await read_request(reader)
            if b"/stall" in request:
                writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n")
                await writer.drain()
                await asyncio.sleep(30)
            echoed = b"%d" % request.endswith(big)
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\n" + echoed)
            await writer.drain()

    async def main() -> None:
        context = server_context(ca) if tls else None
        async with serve(handler, context) as url, lean_client(url, ca) as client:
            response = await client.post("/echo", content=big)
            assert response.text == "1"
            with pytest.raises(httpx.ReadTimeout):
                await client.get("/stall", timeout=httpx.Timeout(5.0, read=0.2))

    asyncio.run(main())


def test_a_connection_left_idle_by_another_event_loop_is_not_reused() -> None:
    accepted: list[socket.socket] = []
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve_forever() -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = listener.accept()
                accepted.append(conn)
                threading.Thread(target=keep_alive, args=(conn,), daemon=True).start()

    def keep_alive(conn: socket.socket) -> None:
        with contextlib.suppress(OSError), conn:
            while conn.recv(65536):
                conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")

    threading.Thread(target=serve_forever, daemon=True).start()
    transport = LeanTransport()

    async def get(close: bool) -> str:
        client = httpx.AsyncClient(transport=transport)
        response = await client.get(f"http://127.0.0.1:{port}/")
        if close:
            await transport.aclose()
        return str(response.extensions["labkit.connection"])

    try:
        assert asyncio.run(get(close=False)) == "opened"
        assert asyncio.run(get(close=True)) == "opened"  # the first loop's one is not taken
        assert len(accepted) == 2
    finally:
        listener.close()


@pytest.mark.parametrize("tls", [False, True], ids=["tcp", "tls"])
def test_the_read_timeout_counts_from_the_last_read_not_the_first(
    ca: trustme.CA, tls: bool
) -> None:
    # One lazy timer per connection: reads that keep coming move the deadline on, and the
    # timeout fires once a read has been awaited for `read` seconds.
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
        for _ in range(12):  # 1.2 s of chunks 0.1 s apart, each well within the 0.5 s timeout
            writer.write(b"1\r\nx\r\n")
            await writer.drain()
            await asyncio.sleep(0.1)
        await asyncio.sleep(30)  # then a stall

    async def main() -> tuple[int, float]:
        context = server_context(ca) if tls else None
        got = 0
        async with serve(handler, context) as url, lean_client(url, ca) as client:
            timeout = httpx.Timeout(5.0, read=0.5)
            async with client.stream("GET", "/drip", timeout=timeout) as response:
                last = time.monotonic()
                with pytest.raises(httpx.ReadTimeout):
                    async for chunk in response.aiter_bytes():
                        got += len(chunk)
                        last = time.monotonic()
                return got, time.monotonic() - last

    got, waited = asyncio.run(main())
    assert got == 12
    # Never before `read` seconds without a byte (less the loop's clock granularity); that it
    # fired at all, and not at the stall's end 30 s later, is the ReadTimeout raised above.
    assert waited >= 0.45
