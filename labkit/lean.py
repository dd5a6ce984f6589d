"""A lean HTTP/1.1 transport for reading many streams at once (load levels on plain HTTP).

Why it exists: through httpx/httpcore/anyio each received chunk costs about 100 µs of CPU,
and a chunk is stamped only when the reading task resumes, behind every other ready task.
At 32 streams × 500 events/s one process falls 10–20 ms behind the streams it measures
(`benchmarks/bench_load.py`). Here each read is stamped in `data_received` — the first
moment user code sees the bytes — and queued with its stamp; the HTTP framing is parsed by
the reader, off the callback. It plugs into httpx as a transport, so providers, the
recorder, its error handling and the connection-phase trace stay as they are; the recorder
takes a chunk's arrival stamp from ``response.extensions["labkit.arrival"]``.

Scope, deliberately small: plain HTTP/1.1 (no TLS, no proxies, no HTTP/2, no compression —
labkit asks for identity), keep-alive, Content-Length, chunked and read-until-close bodies,
the httpcore trace events labkit reads, and httpx's own exceptions. Everything else goes
through httpx (`transport: httpx`).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx

from labkit.proxies import proxy_for

__all__ = ["LeanTransport", "lean_applies"]

Trace = Callable[[str, dict[str, Any]], Awaitable[None]]

_MAX_HEAD = 64 * 1024


def lean_applies(url: str) -> bool:
    """Whether `url` can be read by the lean transport: plain HTTP and no proxy for it."""
    return httpx.URL(url).scheme == "http" and proxy_for(url) is None


class _Reader(asyncio.Protocol):
    """One connection's bytes, each read stamped on arrival. The callbacks only queue."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.inbox: deque[tuple[bytes, int]] = deque()
        self.closed = False
        self._waiter: asyncio.Future[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.inbox.append((data, time.perf_counter_ns()))
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def eof_received(self) -> bool:
        return False  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def read(self, timeout: float | None) -> tuple[bytes, int] | None:
        """The next read and its arrival stamp; None once the peer has closed."""
        while not self.inbox:
            if self.closed:
                return None
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                async with asyncio.timeout(timeout):
                    await self._waiter
            finally:
                self._waiter = None
        return self.inbox.popleft()

    def close(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.close()
        self.closed = True


class _Connection:
    """A connection to one host and port, reused while the server keeps it open."""

    def __init__(self, key: tuple[str, int], reader: _Reader) -> None:
        self.key = key
        self.reader = reader
        self.buffer = bytearray()  # bytes read past the last response
        self.buffer_t_ns = 0

    @property
    def usable(self) -> bool:
        return not self.reader.closed and not self.buffer and not self.reader.inbox


class _Body(httpx.AsyncByteStream):
    """A response body as it arrives; `t_ns` is the arrival stamp of the last chunk given."""

    def __init__(
        self,
        transport: LeanTransport,
        conn: _Connection,
        request: httpx.Request,
        framing: str,
        length: int,
        keep_alive: bool,
        read_timeout: float | None,
    ) -> None:
        self.t_ns = 0
        self._transport = transport
        self._conn = conn
        self._request = request
        self._framing = framing  # "chunked", "length", "close" or "none"
        self._left = length
        self._keep_alive = keep_alive
        self._read_timeout = read_timeout
        self._complete = framing == "none" or (framing == "length" and length == 0)
        self._released = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        conn = self._conn
        buf = conn.buffer
        t = conn.buffer_t_ns
        chunked = _Chunked() if self._framing == "chunked" else None
        while not self._complete:
            if buf:
                data = bytes(buf)
                buf.clear()
            else:
                got = await self._read()
                if got is None:
                    if self._framing == "close":
                        self._complete = True
                        break
                    raise httpx.RemoteProtocolError(
                        "peer closed connection without sending complete message body",
                        request=self._request,
                    )
                data, t = got
            if chunked is not None:
                payload, rest, done = chunked.feed(data)
                if done:
                    buf += rest
                    self._complete = True
            elif self._framing == "length":
                payload, rest = data[: self._left], data[self._left :]
                self._left -= len(payload)
                if self._left == 0:
                    buf += rest
                    self._complete = True
            else:
                payload = data
            if payload:
                self.t_ns = t
                yield payload
        conn.buffer_t_ns = t
        await self.aclose()

    async def _read(self) -> tuple[bytes, int] | None:
        try:
            return await self._conn.reader.read(self._read_timeout)
        except TimeoutError:
            raise httpx.ReadTimeout(
                "timed out reading the response", request=self._request
            ) from None

    async def aclose(self) -> None:
        if self._released:
            return
        self._released = True
        if self._complete and self._keep_alive and self._conn.usable:
            self._transport.release(self._conn)
        else:
            self._conn.reader.close()


class _Chunked:
    """Decodes ``Transfer-Encoding: chunked`` incrementally."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self._left = 0  # payload bytes left in the current chunk
        self._state = "size"  # size | data | crlf | trailer

    def feed(self, data: bytes) -> tuple[bytes, bytes, bool]:
        """(payload, bytes past the body, whether the body ended)."""
        buf = self._buf
        buf += data
        out = bytearray()
        while True:
            if self._state == "data":
                take = min(self._left, len(buf))
                out += buf[:take]
                del buf[:take]
                self._left -= take
                if self._left:
                    return bytes(out), b"", False
                self._state = "crlf"
            if self._state == "crlf":
                if len(buf) < 2:
                    return bytes(out), b"", False
                del buf[:2]
                self._state = "size"
            if self._state == "size":
                end = buf.find(b"\r\n")
                if end < 0:
                    return bytes(out), b"", False
                size = int(bytes(buf[:end]).split(b";", 1)[0].strip() or b"0", 16)
                del buf[: end + 2]
                if size == 0:
                    self._state = "trailer"
                else:
                    self._left = size
                    self._state = "data"
                    continue
            if self._state == "trailer":
                if buf.startswith(b"\r\n"):
                    rest = bytes(buf[2:])
                    buf.clear()
                    return bytes(out), rest, True
                end = buf.find(b"\r\n\r\n")
                if end < 0:
                    return bytes(out), b"", False
                rest = bytes(buf[end + 4 :])
                buf.clear()
                return bytes(out), rest, True


class LeanTransport(httpx.AsyncBaseTransport):
    """httpx transport for plain-HTTP streaming, stamping every read on arrival."""

    def __init__(self) -> None:
        self._idle: dict[tuple[str, int], list[_Connection]] = {}
        self._all: set[_Connection] = set()

    def release(self, conn: _Connection) -> None:
        """Keep a connection whose response was read to the end, for the next request."""
        self._idle.setdefault(conn.key, []).append(conn)

    async def preconnect(
        self, url: httpx.URL | str, count: int, *, timeout: float | None = None
    ) -> int:
        """Open connections to `url`'s origin until `count` idle usable ones exist.

        Returns how many it opened. A request that later takes one of them did not open its
        own connection: it fires no ``connection.connect_tcp.complete`` trace event.
        """
        url = httpx.URL(url)
        key = (url.host, url.port or 80)
        idle = self._idle.setdefault(key, [])
        idle[:] = [conn for conn in idle if conn.usable]
        missing = max(0, count - len(idle))
        loop = asyncio.get_running_loop()
        opened = 0
        for _ in range(missing):
            try:
                async with asyncio.timeout(timeout):
                    _, reader = await loop.create_connection(_Reader, key[0], key[1])
            except TimeoutError:
                raise httpx.ConnectTimeout("timed out connecting") from None
            except OSError as exc:
                raise httpx.ConnectError(str(exc) or type(exc).__name__) from exc
            conn = _Connection(key, reader)
            self._all.add(conn)
            idle.append(conn)
            opened += 1
        return opened

    async def aclose(self) -> None:
        for conn in self._all:
            conn.reader.close()
        self._all.clear()
        self._idle.clear()

    async def _connect(
        self, request: httpx.Request, key: tuple[str, int], trace: Trace | None
    ) -> _Connection:
        idle = self._idle.get(key)
        while idle:
            conn = idle.pop()
            if conn.usable:
                return conn
            conn.reader.close()
            self._all.discard(conn)
        timeouts = request.extensions.get("timeout", {})
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeouts.get("connect")):
                _, reader = await loop.create_connection(_Reader, key[0], key[1])
        except TimeoutError:
            raise httpx.ConnectTimeout("timed out connecting", request=request) from None
        except OSError as exc:
            raise httpx.ConnectError(str(exc) or type(exc).__name__, request=request) from exc
        if trace is not None:
            await trace("connection.connect_tcp.complete", {"labkit_t_ns": time.perf_counter_ns()})
        conn = _Connection(key, reader)
        self._all.add(conn)
        return conn

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Send `request` and return once the response headers are in; the body streams."""
        url = request.url
        if url.scheme != "http":
            raise httpx.UnsupportedProtocol(
                f"the lean transport reads plain HTTP only, not {url.scheme}", request=request
            )
        trace: Trace | None = request.extensions.get("trace")
        key = (url.host, url.port or 80)
        conn = await self._connect(request, key, trace)
        try:
            body = request.content
        except httpx.RequestNotRead:
            body = await request.aread()
        target = url.raw_path
        head = bytearray(request.method.encode() + b" " + target + b" HTTP/1.1\r\n")
        for name, value in request.headers.raw:
            head += name + b": " + value + b"\r\n"
        head += b"\r\n"
        assert conn.reader.transport is not None
        conn.reader.transport.write(bytes(head) + body)
        if trace is not None:
            now = time.perf_counter_ns()
            await trace("http11.send_request_headers.complete", {"labkit_t_ns": now})
            await trace("http11.send_request_body.complete", {"labkit_t_ns": now})
        read_timeout = request.extensions.get("timeout", {}).get("read")
        try:
            status, headers, t_head = await self._read_head(conn, request, read_timeout)
        except BaseException:
            conn.reader.close()
            self._all.discard(conn)
            raise
        if trace is not None:
            await trace("http11.receive_response_headers.complete", {"labkit_t_ns": t_head})
        framing, length = _framing(request.method, status, headers)
        connection = b",".join(v for k, v in headers if k == b"connection").lower()
        keep_alive = framing != "close" and b"close" not in connection
        if b"close" in request.headers.get("connection", "").lower().encode():
            keep_alive = False
        stream = _Body(self, conn, request, framing, length, keep_alive, read_timeout)
        return httpx.Response(
            status,
            headers=headers,
            stream=stream,
            extensions={"http_version": b"HTTP/1.1", "labkit.arrival": stream},
            request=request,
        )

    @staticmethod
    async def _read_head(
        conn: _Connection, request: httpx.Request, read_timeout: float | None
    ) -> tuple[int, list[tuple[bytes, bytes]], int]:
        buf = conn.buffer
        t = conn.buffer_t_ns
        while True:
            end = buf.find(b"\r\n\r\n")
            if end >= 0:
                head = bytes(buf[:end])
                del buf[: end + 4]
                lines = head.split(b"\r\n")
                parts = lines[0].split(b" ", 2)
                if len(parts) < 2 or not parts[0].startswith(b"HTTP/1."):
                    raise httpx.RemoteProtocolError(
                        f"malformed status line {lines[0][:80]!r}", request=request
                    )
                status = int(parts[1])
                if 100 <= status < 200 and status != 101:
                    continue  # an interim response (100 Continue): the real one follows
                headers = []
                for line in lines[1:]:
                    name, _, value = line.partition(b":")
                    headers.append((name.strip().lower(), value.strip()))
                conn.buffer_t_ns = t
                return status, headers, t
            if len(buf) > _MAX_HEAD:
                raise httpx.RemoteProtocolError("response headers too large", request=request)
            try:
                got = await conn.reader.read(read_timeout)
            except TimeoutError:
                raise httpx.ReadTimeout(
                    "timed out waiting for the response headers", request=request
                ) from None
            if got is None:
                raise httpx.RemoteProtocolError(
                    "Server disconnected without sending a response.", request=request
                )
            data, t = got
            buf += data


def _framing(method: str, status: int, headers: list[tuple[bytes, bytes]]) -> tuple[str, int]:
    """How the body ends: ("none"|"chunked"|"length"|"close", content length)."""
    if method == "HEAD" or status in (204, 304):
        return "none", 0
    for name, value in headers:
        if name == b"transfer-encoding" and b"chunked" in value.lower():
            return "chunked", 0
    for name, value in headers:
        if name == b"content-length":
            return "length", int(value)
    return "close", 0
