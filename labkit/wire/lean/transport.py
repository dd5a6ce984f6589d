"""A lean HTTP/1.1 transport for reading many streams at once (load levels, HTTP and HTTPS).

Why it exists: through httpx/httpcore/anyio each received chunk costs about 100 µs of CPU,
and a chunk is stamped only when the reading task resumes, behind every other ready task.
At 32 streams × 500 events/s one process falls 10–20 ms behind the streams it measures
(`benchmarks/bench_load.py`). Here each connection's socket is read by a loop reader
callback (`loop.add_reader`, `sock.recvmsg`), and each read is queued with its stamps; the
HTTP framing (and TLS decryption) is done by the reading task, off the callback. It plugs
into httpx as a transport, so providers, the recorder and its error handling stay as they
are. Its parts: `stamps`, `tls`, `http11`, `outgoing`; its scope: `LeanTransport`.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import ssl
import time
from typing import Any

import httpx

from labkit.wire.lean.http11 import Body, HeadParser, response_framing
from labkit.wire.lean.outgoing import PREPARED, Outgoing, request_bytes
from labkit.wire.lean.stamps import hold_kernel_stamps
from labkit.wire.lean.tcp import Connection, Origin, Trace
from labkit.wire.lean.tls import TLSConnection
from labkit.wire.proxies import proxy_for

__all__ = ["LeanTransport", "lean_applies"]


_DEFAULT_PORTS = {"http": 80, "https": 443}


def lean_applies(url: str) -> bool:
    """Whether `url` can be read by the lean transport: http or https, and no proxy for it."""
    return httpx.URL(url).scheme in _DEFAULT_PORTS and proxy_for(url) is None


class LeanTransport(httpx.AsyncBaseTransport):
    """httpx transport for HTTP/1.1 streaming over TCP or TLS, stamping every read on arrival.

    `ssl_context` verifies https servers (the provider's; by default httpx's, built on the
    first https connection). Kernel receive stamps are held on (`hold_kernel_stamps`) from
    its first connection, if its owner's set-up has not done so already.

    Scope, deliberately small: HTTP/1.1 over TCP or TLS (no proxies, no HTTP/2, no
    compression — labkit asks for identity), keep-alive, Content-Length, chunked and
    read-until-close bodies, the httpcore trace events labkit reads (the connection-phase
    trace stays as through httpx), and httpx's own exceptions. Everything else goes through
    httpx (`transport: httpx`). A response carries ``extensions["labkit.arrival"]`` (the
    `Body`: ``t_ns``, ``seen_ns``, ``kernel_stamped``), where the recorder takes a chunk's
    arrival stamp from, and ``extensions["labkit.connection"]``: whether the request opened
    its own connection (``"opened"``), took one `preconnect` opened (``"preconnected"``) or
    reused one a previous response left open (``"reused"``).
    """

    def __init__(self, ssl_context: ssl.SSLContext | None = None) -> None:
        self._ssl_context = ssl_context
        self._idle: dict[Origin, list[Connection]] = {}
        self._all: set[Connection] = set()

    def release(self, conn: Connection) -> None:
        """Keep a connection whose response was read to the end, for the next request."""
        self._idle.setdefault(conn.key, []).append(conn)

    def discard(self, conn: Connection) -> None:
        """Close a connection that cannot carry another request."""
        conn.close()
        self._all.discard(conn)

    async def aclose(self) -> None:
        """Close every connection, idle or not."""
        for conn in self._all:
            conn.close()
        self._all.clear()
        self._idle.clear()

    async def preconnect(
        self, url: httpx.URL | str, count: int, *, timeout: float | None = None
    ) -> int:
        """Open connections (TCP, and TLS for https) to `url`'s origin, concurrently, until
        `count` idle usable ones exist; returns how many it opened.

        A request that takes one of them did not open its own connection: it fires no
        ``connection.connect_tcp.complete`` (nor ``start_tls``) trace event, and its
        response's ``extensions["labkit.connection"]`` is ``"preconnected"``. `timeout`
        bounds each connection's TCP connect and TLS handshake together. When a connection
        fails, the ones that opened stay in the pool and the first failure is raised
        (httpx.ConnectError or httpx.ConnectTimeout).
        """
        key = _origin(url if isinstance(url, httpx.URL) else httpx.URL(url))
        idle = self._idle.setdefault(key, [])
        loop = asyncio.get_running_loop()
        if count <= 1:
            # Before each request (`connect_ahead`): only the connection the next request
            # takes (`_take_idle` pops the last) is checked, not the whole pool.
            while idle and not (idle[-1].usable and idle[-1].loop is loop):
                self.discard(idle.pop())
        else:
            for conn in [conn for conn in idle if not (conn.usable and conn.loop is loop)]:
                idle.remove(conn)
                self.discard(conn)
        missing = count - len(idle)
        if missing <= 0:
            return 0
        results = await asyncio.gather(
            *(self._open(key, timeout, None) for _ in range(missing)), return_exceptions=True
        )
        opened = 0
        failure: BaseException | None = None
        for result in results:
            if isinstance(result, BaseException):
                failure = failure or result
                continue
            result.preconnected = True
            idle.append(result)
            opened += 1
        if failure is not None:
            raise failure
        return opened

    async def _open(
        self, key: Origin, timeout: float | None, request: httpx.Request | None
    ) -> Connection:
        """A new connection to `key` (TCP, then TLS for https), in the pool's set."""
        scheme, host, port = key
        hold_kernel_stamps()
        loop = asyncio.get_running_loop()
        conn: Connection | None = None
        stage = "connecting"
        try:
            async with asyncio.timeout(timeout):
                sock = await _tcp_connect(loop, host, port)
                t_tcp = time.perf_counter_ns()
                if scheme == "https":
                    if self._ssl_context is None:
                        self._ssl_context = httpx.create_ssl_context()
                    tls = TLSConnection(key, sock, loop, self._ssl_context, host)
                    conn = tls
                    stage = "in the TLS handshake (TCP connected)"
                    await tls.handshake(None)
                else:
                    conn = Connection(key, sock, loop)
        except TimeoutError:
            if conn is not None:
                conn.close()
            raise httpx.ConnectTimeout(f"timed out {stage}", request=request) from None
        except (OSError, ssl.SSLError) as exc:
            if conn is not None:
                conn.close()
            raise httpx.ConnectError(str(exc) or type(exc).__name__, request=request) from exc
        except BaseException:
            if conn is not None:
                conn.close()
            raise
        conn.t_tcp_ns = t_tcp
        conn.t_tls_ns = time.perf_counter_ns() if scheme == "https" else None
        self._all.add(conn)
        return conn

    def prepare(self, request: httpx.Request) -> Outgoing | None:
        """Make `request` ready to send before its clock starts (`outgoing`): its whole
        HTTP/1.1 bytes built, and an idle connection to its origin taken when the pool has
        one (none is opened here). None where this transport would not send it (a scheme
        it does not read, a body not read yet). The request carries it to
        `handle_async_request`, which then only reads the response."""
        url = request.url
        if url.scheme not in _DEFAULT_PORTS:
            return None
        wire = request_bytes(request)
        if wire is None:
            return None
        pooled = self._take_idle(_origin(url))
        conn, how = pooled if pooled is not None else (None, "opened")
        if conn is not None:
            conn.t_sent_ns = 0
        outgoing = Outgoing(wire, conn, how, self.discard)
        request.extensions[PREPARED] = outgoing
        return outgoing

    def _take_idle(self, key: Origin) -> tuple[Connection, str] | None:
        """An idle usable connection to `key` out of the pool, and how it was had."""
        idle = self._idle.get(key)
        while idle:
            conn = idle.pop()
            if conn.usable and conn.loop is asyncio.get_running_loop():
                how = "preconnected" if conn.preconnected else "reused"
                conn.preconnected = False
                return conn, how
            self.discard(conn)
        return None

    async def _connect(
        self, request: httpx.Request, key: Origin, trace: Trace | None
    ) -> tuple[Connection, str]:
        pooled = self._take_idle(key)
        if pooled is not None:
            return pooled
        timeouts = request.extensions.get("timeout", {})
        t_connecting = time.perf_counter_ns()
        conn = await self._open(key, timeouts.get("connect"), request)
        if trace is not None:
            await trace("connection.connect_tcp.started", {"labkit_t_ns": t_connecting})
            await trace("connection.connect_tcp.complete", {"labkit_t_ns": conn.t_tcp_ns})
            if conn.t_tls_ns is not None:
                await trace("connection.start_tls.complete", {"labkit_t_ns": conn.t_tls_ns})
        return conn, "opened"

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Send `request` and return once the response headers are in; the body streams."""
        url = request.url
        if url.scheme not in _DEFAULT_PORTS:
            raise httpx.UnsupportedProtocol(
                f"the lean transport reads http and https only, not {url.scheme}",
                request=request,
            )
        trace: Trace | None = request.extensions.get("trace")
        # A request prepared before its clock (`prepare`) was written on its pooled
        # connection right after the stamp; otherwise connect, then write its bytes.
        outgoing: Outgoing | None = request.extensions.get(PREPARED)
        taken = outgoing.take() if outgoing is not None else None
        if taken is not None:
            conn, how = taken
        else:
            conn, how = await self._connect(request, _origin(url), trace)
            wire = outgoing.wire if outgoing is not None else request_bytes(request)
            if wire is None:
                await request.aread()
                wire = request_bytes(request) or b""
            conn.t_sent_ns = 0
            conn.write(wire)
        sent_traced = False
        if trace is not None and conn.t_sent_ns:
            sent_traced = True
            await self._trace_sent(trace, conn.t_sent_ns)
        read_timeout = request.extensions.get("timeout", {}).get("read")
        try:
            status, headers, t_head, version = await self._read_head(conn, request, read_timeout)
        except BaseException:
            self.discard(conn)
            raise
        if trace is not None:
            if not sent_traced and conn.t_sent_ns:
                # The socket took the request in several writes: its last byte went after
                # the first read of the response began.
                await self._trace_sent(trace, conn.t_sent_ns)
            await trace("http11.receive_response_headers.complete", {"labkit_t_ns": t_head})
        framing, length = response_framing(request.method, status, headers)
        connection = b",".join(v for k, v in headers if k == b"connection").lower()
        keep_alive = framing != "close" and b"close" not in connection
        if version == b"HTTP/1.0":
            keep_alive = False  # an HTTP/1.0 server closes after its response (RFC 9112 §9.3)
        if b"close" in request.headers.get("connection", "").lower().encode():
            keep_alive = False
        stream = Body(self, conn, request, framing, length, keep_alive, read_timeout)
        return httpx.Response(
            status,
            headers=headers,
            stream=stream,
            extensions={
                "http_version": version,
                "labkit.arrival": stream,
                "labkit.connection": how,
            },
            request=request,
        )

    @staticmethod
    async def _trace_sent(trace: Trace, t_sent_ns: int) -> None:
        """The request-sent trace events, at the hand-over of its last byte to the kernel."""
        await trace("http11.send_request_headers.complete", {"labkit_t_ns": t_sent_ns})
        await trace("http11.send_request_body.complete", {"labkit_t_ns": t_sent_ns})

    @staticmethod
    async def _read_head(
        conn: Connection, request: httpx.Request, read_timeout: float | None
    ) -> tuple[int, list[tuple[bytes, bytes]], int, bytes]:
        """The status, header fields, arrival stamp and HTTP version of the response head
        (h11's reading of it: `HeadParser`); the bytes past it stay in `conn.buffer`."""
        buf = conn.buffer
        stamp = conn.buffer_stamp
        parser = HeadParser(request.method)
        while True:
            head = parser.feed(bytes(buf), request) if buf else None
            buf.clear()
            if head is not None:
                buf += parser.rest
                conn.buffer_stamp = stamp
                return head.status_code, list(head.headers), stamp[0], b"HTTP/" + head.http_version
            try:
                got = await conn.read(read_timeout)
            except TimeoutError:
                raise httpx.ReadTimeout(
                    "timed out waiting for the response headers", request=request
                ) from None
            if got is None:
                raise httpx.RemoteProtocolError(
                    "Server disconnected without sending a response.", request=request
                )
            buf += got[0]
            stamp = got[1:]


def _origin(url: httpx.URL) -> Origin:
    return url.scheme, url.host, url.port or _DEFAULT_PORTS.get(url.scheme, 80)


async def _tcp_connect(loop: asyncio.AbstractEventLoop, host: str, port: int) -> socket.socket:
    """A connected non-blocking TCP socket with TCP_NODELAY; OSError when none connects."""
    try:
        literal = ipaddress.ip_address(host)
    except ValueError:
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        targets: list[tuple[int, Any]] = [(fam, addr) for fam, _, _, _, addr in infos]
    else:
        targets = [(socket.AF_INET6 if literal.version == 6 else socket.AF_INET, (host, port))]
    failure: OSError | None = None
    for family, address in targets:
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            await loop.sock_connect(sock, address)
        except OSError as exc:
            sock.close()
            failure = exc
            continue
        except BaseException:
            sock.close()
            raise
        return sock
    raise failure or OSError(f"no address for {host}")
