"""A lean HTTP/1.1 transport for reading many streams at once (load levels, HTTP and HTTPS).

Why it exists: through httpx/httpcore/anyio each received chunk costs about 100 µs of CPU,
and a chunk is stamped only when the reading task resumes, behind every other ready task.
At 32 streams × 500 events/s one process falls 10–20 ms behind the streams it measures
(`benchmarks/bench_load.py`). Here each connection's socket is read by a loop reader
callback (`loop.add_reader`, `sock.recvmsg`), and each read is queued with its stamps; the
HTTP framing (and TLS decryption) is done by the reading task, off the callback. It plugs
into httpx as a transport, so providers, the recorder, its error handling and the
connection-phase trace stay as they are; the recorder takes a chunk's arrival stamp from
``response.extensions["labkit.arrival"]`` (the `_Body`: ``t_ns``, ``seen_ns``,
``kernel_stamped``).

Stamps. Each socket asks the kernel for receive timestamps (``SO_TIMESTAMPNS`` on Linux;
``SO_TIMESTAMP``, µs, where the platform's `socket` module has it and not the former). A
read then carries the kernel's CLOCK_REALTIME stamp of the *last* TCP segment it returned
(Linux gives the stamp of the last skb a recvmsg consumed; one read of up to 64 KiB may hold
several segments, so an SSE event is rarely split, and a read that holds several events
stamps them all at the arrival of the last: no smaller read could do better, as the kernel
merges segments that queue while the reader is away and keeps the newest stamp). It is put
on labkit's clock (`time.perf_counter_ns`, CLOCK_MONOTONIC) with the offset
``time.time_ns() - perf_counter_ns()`` read at that read (two clock reads, tens of ns
apart): a realtime clock step between the segment's arrival and the read shifts that one
read's stamp by the step, never later ones; a stamp is never after the read itself
(``seen_ns``) nor before the connection's previous stamp. A read without a kernel stamp (the
option unavailable) is stamped when the callback reads it, as ``seen_ns``: late by however
long the loop was busy elsewhere, which the kernel stamp is not.

TLS (https) runs on the same reader: an `ssl.SSLObject` over a pair of `ssl.MemoryBIO`, with
the provider's `ssl.SSLContext` (hostname checked, SNI sent). Decrypted bytes carry the
stamps of the raw read that completed them. Like httpcore, a connection the server closes
without close_notify ends the stream as a close would, and none is sent on close.

Scope, deliberately small: HTTP/1.1 over TCP or TLS (no proxies, no HTTP/2, no compression —
labkit asks for identity), keep-alive, Content-Length, chunked and read-until-close bodies,
the httpcore trace events labkit reads, and httpx's own exceptions. Everything else goes
through httpx (`transport: httpx`). `LeanTransport.preconnect` opens connections ahead of
the requests that will use them; ``response.extensions["labkit.connection"]`` says whether a
request opened its own connection (``"opened"``), took one `preconnect` opened
(``"preconnected"``) or reused one a previous response left open (``"reused"``).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import ipaddress
import platform
import socket
import ssl
import struct
import sys
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import httpx

from labkit.proxies import proxy_for

__all__ = [
    "LeanTransport",
    "hold_kernel_stamps",
    "kernel_stamps_available",
    "lean_applies",
    "loopback_pair",
    "read_is_stamped",
]

Trace = Callable[[str, dict[str, Any]], Awaitable[None]]
#: One read: (bytes, arrival stamp t_ns, seen_ns, kernel_stamped).
Read = tuple[bytes, int, int, bool]
#: A pool key: (scheme, host, port).
Origin = tuple[str, str, int]

_MAX_HEAD = 64 * 1024
_READ_SIZE = 64 * 1024
_DEFAULT_PORTS = {"http": 80, "https": 443}


def _kernel_stamp_option() -> tuple[int, int, struct.Struct, int] | None:
    """(socket option, cmsg type, struct of its data, ns per fraction unit), or None here."""
    nanos = getattr(socket, "SO_TIMESTAMPNS", None)
    if nanos is None and sys.platform.startswith("linux") and struct.calcsize("l") == 8:
        # Python does not export it; SO_TIMESTAMPNS_OLD (= SCM_TIMESTAMPNS) on the generic
        # 64-bit Linux ABIs, where its cmsg is a struct timespec of two longs.
        generic = {"x86_64", "amd64", "aarch64", "arm64", "riscv64", "ppc64le", "ppc64", "s390x"}
        if platform.machine().lower() in generic:
            nanos = 35
    if nanos is not None:
        return nanos, nanos, struct.Struct("@ll"), 1
    micros = getattr(socket, "SO_TIMESTAMP", None)
    if micros is not None:  # struct timeval; tv_usec is an int on macOS, a long elsewhere
        layout = "@li" if sys.platform == "darwin" else "@ll"
        return micros, getattr(socket, "SCM_TIMESTAMP", micros), struct.Struct(layout), 1000
    return None


_KERNEL_STAMPS = _kernel_stamp_option()
_ANC_SIZE = socket.CMSG_SPACE(16) if _KERNEL_STAMPS is not None else 0
_STAMP_TYPE, _STAMP, _STAMP_UNIT = (
    _KERNEL_STAMPS[1:] if _KERNEL_STAMPS is not None else (-1, struct.Struct("@ll"), 1)
)


def kernel_stamps_available() -> bool:
    """Whether this platform gives the lean transport kernel receive stamps."""
    return _KERNEL_STAMPS is not None


#: The socket that keeps the kernel's receive timestamping on for this process (see
#: `hold_kernel_stamps`); None until the first lean transport, or where there are no stamps.
_stamp_holder: socket.socket | None = None


def hold_kernel_stamps(wait_s: float = 0.2) -> bool:
    """Keep kernel receive stamps on for this process; whether a probe saw them arrive.

    Linux stamps received packets only while some socket asks for stamps (a stack-wide
    switch), and turns that on when the first socket asks and off when the last one closes,
    each change applied a moment later by a kernel work queue: packets that arrive meanwhile
    carry no stamp, so on a busy host the first reads of a run (or of each test, as one
    level's connections close before the next opens) were stamped in user space. One
    socket that asks and stays open for the process keeps the switch on between
    connections; a loopback TCP probe (up to `wait_s`) waits until a stamp really arrives,
    so connections opened after this call are stamped from their first byte. Idempotent.
    """
    global _stamp_holder
    if _KERNEL_STAMPS is None:
        return False
    if _stamp_holder is not None:
        return True
    try:
        holder = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        holder.setsockopt(socket.SOL_SOCKET, _KERNEL_STAMPS[0], 1)
    except OSError:
        return False
    _stamp_holder = holder
    atexit.register(holder.close)
    try:
        return _probe_kernel_stamps(wait_s)
    except OSError:  # no loopback to probe on (an unconfigured namespace): stamps as they come
        return False


@contextlib.contextmanager
def loopback_pair(timeout: float = 1.0) -> Iterator[tuple[socket.socket, socket.socket]]:
    """A connected TCP pair on 127.0.0.1, (sender, receiver), the receiver asking for
    kernel receive stamps (the platform must have them)."""
    assert _KERNEL_STAMPS is not None
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        with socket.create_connection(listener.getsockname(), timeout=timeout) as sender:
            receiver, _ = listener.accept()
            with receiver:
                receiver.settimeout(timeout)
                receiver.setsockopt(socket.SOL_SOCKET, _KERNEL_STAMPS[0], 1)
                yield sender, receiver


def read_is_stamped(sender: socket.socket, receiver: socket.socket, data: bytes) -> bool:
    """Send `data` over a `loopback_pair` and say whether its read came with a kernel stamp."""
    sender.sendall(data)
    _, ancillary, _, _ = receiver.recvmsg(len(data), _ANC_SIZE)
    return bool(ancillary)


def _probe_kernel_stamps(wait_s: float) -> bool:
    deadline = time.monotonic() + wait_s
    with loopback_pair() as (sender, receiver):
        while not read_is_stamped(sender, receiver, b"x"):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.002)
        return True


def lean_applies(url: str) -> bool:
    """Whether `url` can be read by the lean transport: http or https, and no proxy for it."""
    return httpx.URL(url).scheme in _DEFAULT_PORTS and proxy_for(url) is None


class _Connection:
    """One connection's socket, read by a loop reader callback that only stamps and queues.

    The connection to one origin, reused while the server keeps it open. `read` gives the
    reads in order; `buffer` holds bytes read past the last response.
    """

    def __init__(self, key: Origin, sock: socket.socket, loop: asyncio.AbstractEventLoop) -> None:
        self.key = key
        self.sock = sock
        self.inbox: deque[Read] = deque()
        self.closed = False  # no more bytes will arrive (peer closed, error, or closed here)
        self.buffer = bytearray()
        self.buffer_stamp: tuple[int, int, bool] = (0, 0, False)
        self.preconnected = False  # opened by preconnect and not yet used by a request
        self.t_tcp_ns = 0  # when the TCP connect completed
        self.t_tls_ns: int | None = None  # when the TLS handshake completed
        self.loop = loop
        self._fd = sock.fileno()
        self._waiter: asyncio.Future[None] | None = None
        self._unsent = bytearray()
        self._last_t = 0
        self._deadline = 0.0  # loop.time() by which the read being awaited must come
        self._timer: asyncio.TimerHandle | None = None
        self._ancillary_size = 0  # room for the timestamp cmsg, once the kernel sends one
        if _KERNEL_STAMPS is not None:
            try:
                sock.setsockopt(socket.SOL_SOCKET, _KERNEL_STAMPS[0], 1)
                self._ancillary_size = _ANC_SIZE
            except OSError:
                pass
        loop.add_reader(self._fd, self._on_readable)

    def _on_readable(self) -> None:
        try:
            data, ancillary, _, _ = self.sock.recvmsg(_READ_SIZE, self._ancillary_size)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self.close()
            return
        seen = time.perf_counter_ns()
        if not data:
            self.close()
            return
        t = seen
        kernel = False
        if ancillary:
            _, kind, cdata = ancillary[0]
            if kind == _STAMP_TYPE and len(cdata) >= _STAMP.size:
                wall = time.time_ns()
                sec, frac = _STAMP.unpack_from(cdata)
                t = sec * 1_000_000_000 + frac * _STAMP_UNIT - (wall - seen)
                if t > seen:
                    t = seen
                elif t < self._last_t:
                    t = self._last_t
                kernel = True
        self._last_t = t
        self.inbox.append((data, t, seen, kernel))
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def read_raw(self, timeout: float | None) -> Read | None:
        """The next read off the socket and its stamps; None once the peer has closed."""
        while not self.inbox:
            if self.closed:
                return None
            loop = self.loop
            waiter = self._waiter = loop.create_future()
            if timeout is not None:
                # One lazy timer per connection, not one per wait: a wait only moves the
                # deadline, and the timer, when it fires early, re-arms for the latest one.
                # A timer made and cancelled on every read cost about 8% of a read's CPU.
                self._deadline = deadline = loop.time() + timeout
                if self._timer is None:
                    self._timer = loop.call_at(deadline, self._check_deadline)
            try:
                await waiter
            finally:
                self._waiter = None
        return self.inbox.popleft()

    def _check_deadline(self) -> None:
        self._timer = None
        waiter = self._waiter
        if waiter is None or waiter.done() or self.closed:
            return  # no wait in progress: the next one arms a timer of its own
        if self.loop.time() >= self._deadline:
            waiter.set_exception(TimeoutError())
        else:
            self._timer = self.loop.call_at(self._deadline, self._check_deadline)

    read = read_raw

    def write(self, data: bytes) -> None:
        """Send `data`; what the socket does not take now goes when it is writable.

        A failed write closes the connection: the reader then sees the close.
        """
        if self.closed:
            return
        if self._unsent:
            self._unsent += data
            return
        try:
            sent = self.sock.send(data)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError:
            self.close()
            return
        if sent < len(data):
            self._unsent += data[sent:]
            self.loop.add_writer(self._fd, self._on_writable)

    def _on_writable(self) -> None:
        try:
            sent = self.sock.send(self._unsent)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self.close()
            return
        del self._unsent[:sent]
        if not self._unsent:
            self.loop.remove_writer(self._fd)

    @property
    def usable(self) -> bool:
        """Whether a new request can go on this connection (open, nothing unread)."""
        return not self.closed and not self.buffer and not self.inbox

    def close(self) -> None:
        """Close the socket and wake its reader."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._fd >= 0:
            self.loop.remove_reader(self._fd)
            if self._unsent:
                self.loop.remove_writer(self._fd)
                self._unsent.clear()
            self.sock.close()
            self._fd = -1
        self.closed = True
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


class _TLSConnection(_Connection):
    """A connection over TLS: the raw reads are decrypted by the reading task, each
    decrypted run carrying the stamps of the raw read that completed it."""

    def __init__(
        self,
        key: Origin,
        sock: socket.socket,
        loop: asyncio.AbstractEventLoop,
        context: ssl.SSLContext,
        server_hostname: str,
    ) -> None:
        super().__init__(key, sock, loop)
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._tls = context.wrap_bio(
            self._incoming, self._outgoing, server_side=False, server_hostname=server_hostname
        )
        self._tls_closed = False  # close_notify received

    async def handshake(self, timeout: float | None) -> None:
        """Run the TLS handshake; ssl.SSLError or OSError when it fails."""
        while True:
            try:
                self._tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                pass
            self._flush()
            got = await self.read_raw(timeout)
            if got is None:
                raise ConnectionResetError("connection closed during the TLS handshake")
            self._incoming.write(got[0])
        self._flush()

    def _flush(self) -> None:
        if self._outgoing.pending:
            super().write(self._outgoing.read())

    def _decrypt(self, raw: bytes) -> bytes:
        """Application bytes that `raw` completes (none for a session ticket or a partial
        record); a close_notify marks the stream closed."""
        incoming = self._incoming
        incoming.write(raw)
        tls = self._tls
        out = b""
        try:
            # A read of the SSL object gives one record's bytes and takes from the BIO no
            # more than that record: once the BIO is empty, no further read can give any
            # (skipping the call saves raising SSLWantReadError, half the cost of a read).
            while True:
                chunk = tls.read(_READ_SIZE)
                if not chunk:  # close_notify
                    self._tls_closed = True
                    break
                out = out + chunk if out else chunk
                if not incoming.pending and not tls.pending():
                    break
        except ssl.SSLWantReadError:
            pass
        if self._outgoing.pending:  # e.g. the reply to a key update
            self._flush()
        return out

    async def read(self, timeout: float | None) -> Read | None:
        """The next decrypted bytes and the stamps of the read that completed them."""
        while not self._tls_closed:
            got = await self.read_raw(timeout)
            if got is None:
                return None  # closed without close_notify: an end, as httpcore takes it
            try:
                data = self._decrypt(got[0])
            except ssl.SSLError as exc:
                self.close()
                raise httpx.ReadError(f"TLS: {exc}") from exc
            if data:
                return data, got[1], got[2], got[3]
        return None

    def write(self, data: bytes) -> None:
        """Encrypt and send `data`."""
        if self.closed:
            return
        try:
            self._tls.write(data)
        except ssl.SSLError:
            self.close()
            return
        self._flush()

    @property
    def usable(self) -> bool:
        """Open and nothing unread; reads that carry no application data (TLS 1.3 session
        tickets) are consumed here, before the connection is taken."""
        while self.inbox and not self.closed:
            raw = self.inbox.popleft()[0]
            try:
                if self._decrypt(raw):
                    return False
            except ssl.SSLError:
                return False
        return not self.closed and not self._tls_closed and not self.buffer and not self.inbox


class _Body(httpx.AsyncByteStream):
    """A response body as it arrives, and the stamps of the last chunk given: `t_ns` its
    arrival (the kernel's when `kernel_stamped`), `seen_ns` when labkit's code read it."""

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
        self.t_ns, self.seen_ns, self.kernel_stamped = conn.buffer_stamp
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
        t, seen, kernel = conn.buffer_stamp
        chunked = _Chunked() if self._framing == "chunked" else None
        while not self._complete:
            if buf:
                data = bytes(buf)
                buf.clear()
            else:
                try:
                    got = await conn.read(self._read_timeout)
                except TimeoutError:
                    raise httpx.ReadTimeout(
                        "timed out reading the response", request=self._request
                    ) from None
                if got is None:
                    if self._framing == "close":
                        self._complete = True
                        break
                    raise httpx.RemoteProtocolError(
                        "peer closed connection without sending complete message body",
                        request=self._request,
                    )
                data, t, seen, kernel = got
            if chunked is not None:
                try:
                    payload, rest, done = chunked.feed(data)
                except ValueError as exc:
                    self._conn.close()
                    raise httpx.RemoteProtocolError(
                        f"broken chunked framing: {exc}", request=self._request
                    ) from None
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
                self.seen_ns = seen
                self.kernel_stamped = kernel
                yield payload
        conn.buffer_stamp = (t, seen, kernel)
        await self.aclose()

    async def aclose(self) -> None:
        if self._released:
            return
        self._released = True
        if self._complete and self._keep_alive and self._conn.usable:
            self._transport.release(self._conn)
        else:
            self._transport.discard(self._conn)


_HEX_DIGITS = frozenset(b"0123456789abcdefABCDEF")


class _Chunked:
    """Decodes ``Transfer-Encoding: chunked`` incrementally."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self._left = 0  # payload bytes left in the current chunk
        self._state = "size"  # size | data | crlf | trailer

    def feed(self, data: bytes) -> tuple[bytes, bytes, bool]:
        """(payload, bytes past the body, whether the body ended); ValueError when the
        framing is broken (a chunk size that is not hex, no CRLF after a chunk)."""
        buf = self._buf
        if not buf and self._state == "size":
            # The common read: exactly one whole chunk (a server writes each event as one).
            end = data.find(b"\r\n", 0, 18)
            if end > 0:
                head = data[:end]
                if head.isalnum() and head.isascii():
                    size = int(head, 16)  # alnum and ascii: hex digits or a ValueError
                    stop = end + 2 + size
                    if size and len(data) == stop + 2 and data.endswith(b"\r\n"):
                        return data[end + 2 : stop], b"", False
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
                if buf[:2] != b"\r\n":
                    raise ValueError(f"no CRLF after a chunk's data but {bytes(buf[:2])!r}")
                del buf[:2]
                self._state = "size"
            if self._state == "size":
                end = buf.find(b"\r\n")
                if end < 0:
                    return bytes(out), b"", False
                field = bytes(buf[:end]).split(b";", 1)[0].strip()
                if not field or not all(c in _HEX_DIGITS for c in field):
                    raise ValueError(f"malformed chunk size {field[:20]!r}")
                size = int(field, 16)
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
    """httpx transport for HTTP/1.1 streaming over TCP or TLS, stamping every read on arrival.

    `ssl_context` verifies https servers (the provider's; by default httpx's, built on the
    first https connection).
    """

    def __init__(self, ssl_context: ssl.SSLContext | None = None) -> None:
        hold_kernel_stamps()
        self._ssl_context = ssl_context
        self._idle: dict[Origin, list[_Connection]] = {}
        self._all: set[_Connection] = set()

    def release(self, conn: _Connection) -> None:
        """Keep a connection whose response was read to the end, for the next request."""
        self._idle.setdefault(conn.key, []).append(conn)

    def discard(self, conn: _Connection) -> None:
        """Close a connection that cannot carry another request."""
        conn.close()
        self._all.discard(conn)

    async def aclose(self) -> None:
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
    ) -> _Connection:
        """A new connection to `key` (TCP, then TLS for https), in the pool's set."""
        scheme, host, port = key
        loop = asyncio.get_running_loop()
        conn: _Connection | None = None
        try:
            async with asyncio.timeout(timeout):
                sock = await _tcp_connect(loop, host, port)
                t_tcp = time.perf_counter_ns()
                if scheme == "https":
                    if self._ssl_context is None:
                        self._ssl_context = httpx.create_ssl_context()
                    tls = _TLSConnection(key, sock, loop, self._ssl_context, host)
                    conn = tls
                    await tls.handshake(None)
                else:
                    conn = _Connection(key, sock, loop)
        except TimeoutError:
            if conn is not None:
                conn.close()
            raise httpx.ConnectTimeout("timed out connecting", request=request) from None
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

    async def _connect(
        self, request: httpx.Request, key: Origin, trace: Trace | None
    ) -> tuple[_Connection, str]:
        idle = self._idle.get(key)
        while idle:
            conn = idle.pop()
            if conn.usable and conn.loop is asyncio.get_running_loop():
                how = "preconnected" if conn.preconnected else "reused"
                conn.preconnected = False
                return conn, how
            self.discard(conn)
        timeouts = request.extensions.get("timeout", {})
        conn = await self._open(key, timeouts.get("connect"), request)
        if trace is not None:
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
        conn, how = await self._connect(request, _origin(url), trace)
        try:
            body = request.content
        except httpx.RequestNotRead:
            body = await request.aread()
        target = url.raw_path
        head = bytearray(request.method.encode() + b" " + target + b" HTTP/1.1\r\n")
        for name, value in request.headers.raw:
            head += name + b": " + value + b"\r\n"
        head += b"\r\n"
        conn.write(bytes(head) + body)
        if trace is not None:
            now = time.perf_counter_ns()
            await trace("http11.send_request_headers.complete", {"labkit_t_ns": now})
            await trace("http11.send_request_body.complete", {"labkit_t_ns": now})
        read_timeout = request.extensions.get("timeout", {}).get("read")
        try:
            status, headers, t_head = await self._read_head(conn, request, read_timeout)
        except BaseException:
            self.discard(conn)
            raise
        if trace is not None:
            await trace("http11.receive_response_headers.complete", {"labkit_t_ns": t_head})
        try:
            framing, length = _framing(request.method, status, headers, request)
        except httpx.RemoteProtocolError:
            self.discard(conn)
            raise
        connection = b",".join(v for k, v in headers if k == b"connection").lower()
        keep_alive = framing != "close" and b"close" not in connection
        if b"close" in request.headers.get("connection", "").lower().encode():
            keep_alive = False
        stream = _Body(self, conn, request, framing, length, keep_alive, read_timeout)
        return httpx.Response(
            status,
            headers=headers,
            stream=stream,
            extensions={
                "http_version": b"HTTP/1.1",
                "labkit.arrival": stream,
                "labkit.connection": how,
            },
            request=request,
        )

    @staticmethod
    async def _read_head(
        conn: _Connection, request: httpx.Request, read_timeout: float | None
    ) -> tuple[int, list[tuple[bytes, bytes]], int]:
        buf = conn.buffer
        stamp = conn.buffer_stamp
        while True:
            end = buf.find(b"\r\n\r\n")
            if end >= 0:
                head = bytes(buf[:end])
                del buf[: end + 4]
                lines = head.split(b"\r\n")
                parts = lines[0].split(b" ", 2)
                if (
                    len(parts) < 2
                    or not parts[0].startswith(b"HTTP/1.")
                    or len(parts[1]) != 3
                    or not parts[1].isdigit()
                ):
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
                conn.buffer_stamp = stamp
                return status, headers, stamp[0]
            if len(buf) > _MAX_HEAD:
                raise httpx.RemoteProtocolError("response headers too large", request=request)
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


def _framing(
    method: str, status: int, headers: list[tuple[bytes, bytes]], request: httpx.Request
) -> tuple[str, int]:
    """How the body ends: ("none"|"chunked"|"length"|"close", content length)."""
    if method == "HEAD" or status in (204, 304):
        return "none", 0
    for name, value in headers:
        if name == b"transfer-encoding" and b"chunked" in value.lower():
            return "chunked", 0
    for name, value in headers:
        if name == b"content-length":
            if not value.isdigit():
                raise httpx.RemoteProtocolError(
                    f"malformed content-length {value[:40]!r}", request=request
                )
            return "length", int(value)
    return "close", 0
