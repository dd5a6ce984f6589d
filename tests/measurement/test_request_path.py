"""The request path: from ``t_start`` to the request's last byte (lean transport, and httpx).

A server on 127.0.0.1, in a thread of its own, stamps when it began and finished reading each
request. labkit's own preparation — the JSON body, the HTTP/1.1 head, the pooled connection,
any import — must be done before ``t_start``; after the stamp the request is written at once
(before the client's send runs), and ``client.request_sent_ms`` is when its last byte was
handed to the kernel. Ordering of stamps, never speed.
"""

from __future__ import annotations

import asyncio
import socket
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest

from labkit.measurement.recorder import RecordContext, StreamRecorder
from labkit.records import RequestRecord
from labkit.wire.client import MeasuredClient
from labkit.wire.lean import tcp, transport
from tests.providers.streams import chat, make_provider
from tests.support.misbehaving import read_request

pytestmark = pytest.mark.integration

_CHUNK = '{"id":"c1","object":"chat.completion.chunk","created":0,"model":"m","choices":[%s]%s}'
BODY = "".join(
    f"data: {event}\n\n"
    for event in [
        _CHUNK % ('{"index":0,"delta":{"content":"one"},"finish_reason":null}', ""),
        _CHUNK % ('{"index":0,"delta":{},"finish_reason":"stop"}', ""),
        _CHUNK % ("", ',"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}'),
        "[DONE]",
    ]
).encode()
RESPONSE = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: %d\r\n\r\n%s" % (
    len(BODY),
    BODY,
)


class StampingServer:
    """Keep-alive HTTP/1.1 server in a thread: per request, when its first bytes were read
    (`began_ns`) and when its last body byte was (`read_ns`); it waits `hold_s` after
    accepting each connection before reading anything."""

    def __init__(self, hold_s: float = 0.0) -> None:
        self.hold_s = hold_s
        self.began_ns: list[int] = []
        self.read_ns: list[int] = []
        self._listener = socket.socket()
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(8)
        self.port = self._listener.getsockname()[1]
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            time.sleep(self.hold_s)
            buf = b""
            while True:
                if not buf:
                    buf = conn.recv(1 << 20)
                    if not buf:
                        return
                began = time.perf_counter_ns()
                request = read_request(conn, buf)
                if request is None:
                    return
                buf = request[2]
                self.read_ns.append(time.perf_counter_ns())
                self.began_ns.append(began)
                conn.sendall(RESPONSE)

    def __enter__(self) -> StampingServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._listener.close()


class _ImportStamps:
    """A finder that finds nothing: it stamps each module Python looks for the first time."""

    def __init__(self) -> None:
        self.stamps: list[tuple[int, str]] = []

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        self.stamps.append((time.perf_counter_ns(), name))


@contextmanager
def stamped(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, list[int]]]:
    """Stamps of labkit's steps on the lean path, by name: the request built (body
    serialised), its bytes built, its write begun and returned, the client's send entered;
    ``imports`` the modules looked for meanwhile."""
    stamps: dict[str, list[int]] = {}

    def note(name: str) -> None:
        stamps.setdefault(name, []).append(time.perf_counter_ns())

    build_bytes = transport.request_bytes

    def request_bytes(request: httpx.Request) -> bytes | None:
        note("bytes_built")
        return build_bytes(request)

    write = tcp.Connection.write

    def timed_write(self: tcp.Connection, data: bytes) -> None:
        note("write_began")
        write(self, data)
        note("write_returned")

    send = MeasuredClient.send

    async def timed_send(self: MeasuredClient, request: httpx.Request, **kw: Any) -> Any:
        note("client_send")
        return await send(self, request, **kw)

    monkeypatch.setattr(transport, "request_bytes", request_bytes)
    monkeypatch.setattr(tcp.Connection, "write", timed_write)
    monkeypatch.setattr(MeasuredClient, "send", timed_send)
    finder = _ImportStamps()
    sys.meta_path.insert(0, finder)
    try:
        yield stamps
    finally:
        sys.meta_path.remove(finder)
        stamps["imports"] = [t for t, _ in finder.stamps]


async def _record(
    port: int, requests: int, text: str = "Say hi.", transport: str = "lean"
) -> list[RequestRecord]:
    provider = make_provider(
        "openai_compatible", base_url=f"http://127.0.0.1:{port}/v1", transport=transport
    )
    built: list[int] = []
    build = provider.build_request

    def build_request(request: Any, params: Any) -> httpx.Request:
        http_request = build(request, params)
        http_request.content  # noqa: B018 -- the body is serialised here (raises if not)
        built.append(time.perf_counter_ns())
        return http_request

    provider.build_request = build_request  # type: ignore[method-assign]
    recorder = StreamRecorder()
    records = []
    try:
        for _ in range(requests):
            ctx = RecordContext(run_id="r", experiment="request-path")
            record = await recorder.record(provider, chat(text, max_tokens=4), ctx)
            record.tags["built_ns"] = built[-1]
            records.append(record)
    finally:
        await provider.aclose()
    return records


def _window(record: RequestRecord) -> tuple[int, int]:
    t_start = record.t_start_mono_ns or 0
    sent = record.client.request_sent_ms
    assert sent is not None
    return t_start, t_start + round(sent * 1e6)


def test_a_pooled_request_is_ready_before_t_start_and_written_at_once_after_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with StampingServer() as server, stamped(monkeypatch) as stamps:
        records = asyncio.run(_record(server.port, 3))
    assert [r.error for r in records] == [None, None, None]
    for k, record in enumerate(records):
        t_start, t_sent = _window(record)
        # The body was serialised and the whole request's bytes built before the clock.
        assert int(record.tags["built_ns"]) < t_start
        assert all(not t_start <= t <= t_sent for t in stamps["bytes_built"])
        # Nothing was imported between the stamp and the last byte handed to the kernel.
        assert [t for t in stamps["imports"] if t_start <= t <= t_sent] == []
        # The server read the request after t_start.
        assert t_start < server.read_ns[k]
        c = record.client
        assert c.send_ms is not None and c.request_sent_ms is not None
        if k == 0:
            # The first request opened its connection inside its measurement: the connect
            # is the network's, not the client's side of the request path.
            assert c.new_connection is True and c.connect_ms is not None
            assert c.send_ms < c.request_sent_ms
            continue
        assert c.send_ms == c.request_sent_ms
        # On a pooled connection the write began after the stamp and before the client's send
        # machinery ran; request_sent was stamped inside the write: the kernel's transmit
        # stamp of the last byte, taken inside the `send` (where the kernel stamps sends),
        # or the clock as the `send` returned.
        assert record.client.new_connection is False
        write_began = next(t for t in stamps["write_began"] if t >= t_start)
        write_returned = next(t for t in stamps["write_returned"] if t >= write_began)
        send_entered = next(t for t in stamps["client_send"] if t >= t_start)
        assert t_start <= write_began < send_entered
        assert write_began <= t_sent <= write_returned
        # One write for head and body.
        assert len([t for t in stamps["write_began"] if t_start <= t <= t_sent]) == 1


def test_request_sent_is_the_hand_over_of_the_last_byte_not_the_write_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A request larger than the socket buffers goes in several writes as the server reads:
    its last byte can be handed to the kernel only after the server began reading (it waits
    before reading anything), so request_sent comes after that, never at the first write."""
    big = "x" * (24 * 1024 * 1024)
    with StampingServer(hold_s=0.2) as server:
        (record,) = asyncio.run(_record(server.port, 1, big))
    assert record.error is None
    t_start, t_sent = _window(record)
    assert t_start < server.began_ns[0] < t_sent
    assert record.client.headers_ms is not None
    assert t_sent <= t_start + round(record.client.headers_ms * 1e6)


def test_on_httpx_the_body_is_serialised_before_t_start_and_nothing_imported_inside(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """httpx writes the request itself after the stamp; labkit's part (the body, headers and
    trace context in the built request) is done before, and no import falls inside."""
    with StampingServer() as server, stamped(monkeypatch) as stamps:
        records = asyncio.run(_record(server.port, 2, transport="httpx"))
    assert [r.error for r in records] == [None, None]
    for k, record in enumerate(records):
        t_start, t_sent = _window(record)
        assert int(record.tags["built_ns"]) < t_start < server.read_ns[k]
        assert [t for t in stamps["imports"] if t_start <= t <= t_sent] == []
        assert record.client.send_ms is not None
    assert records[1].client.send_ms == records[1].client.request_sent_ms
