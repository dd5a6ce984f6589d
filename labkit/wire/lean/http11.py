"""HTTP/1.1 response framing for the lean transport: the head, and the body as it arrives.

Content-Length, chunked and read-until-close bodies; each chunk handed on keeps the stamps of
the read that brought it (`Body.t_ns`, `seen_ns`, `kernel_stamped`, which the recorder reads
from ``response.extensions["labkit.arrival"]``). Errors are httpx's own exceptions.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol

import httpx

from labkit.wire.lean.tcp import Connection
from labkit.wire.readpath import whole_chunks

__all__ = ["MAX_HEAD", "Body", "ConnectionOwner", "response_framing"]


class OnPayload(Protocol):
    """What `Body.deliver` hands each read to: its payload and stamps (`t_ns`, `seen_ns`,
    `kernel_stamped`); True once no more is wanted. With ``framed``, the read as it came
    (chunk framing and all), offered first: None back leaves it, to come again de-chunked."""

    def __call__(
        self, data: bytes, t_ns: int, seen_ns: int, kernel: bool, framed: bool = False, /
    ) -> bool | None: ...


class ConnectionOwner(Protocol):
    """Where a body hands its connection back when the response is over (the pool)."""

    def release(self, conn: Connection) -> None:
        """Keep `conn` for the next request."""

    def discard(self, conn: Connection) -> None:
        """Close `conn`."""


MAX_HEAD = 64 * 1024


class Body(httpx.AsyncByteStream):
    """A response body as it arrives, and the stamps of the last chunk given: `t_ns` its
    arrival (the kernel's when `kernel_stamped`), `seen_ns` when labkit's code read it."""

    def __init__(
        self,
        transport: ConnectionOwner,
        conn: Connection,
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
        self._chunked = _Chunked() if framing == "chunked" else None
        self._last = conn.buffer_stamp  # the stamps of the latest read taken

    async def __aiter__(self) -> AsyncIterator[bytes]:
        conn = self._conn
        buf = conn.buffer
        while not self._complete:
            if buf:
                data = bytes(buf)
                buf.clear()
                t, seen, kernel = self._last
            else:
                try:
                    got = await conn.read(self._read_timeout)
                except TimeoutError:
                    raise httpx.ReadTimeout(
                        "timed out reading the response", request=self._request
                    ) from None
                if got is None:
                    self._closed_early()
                    break
                data, t, seen, kernel = got
            payload = self._take(data, t, seen, kernel)
            if payload:
                yield payload
        await self.aclose()

    @property
    def pushes(self) -> bool:
        """Whether `deliver` hands this body's reads over in the reader callback: plain TCP
        (TLS decrypts in the reading task) whose reads the kernel stamps (a read stamped in
        the callback would wait for the work of the reads before it in the same turn)."""
        conn = self._conn
        return type(conn) is Connection and conn.kernel_stamping

    async def deliver(self, on_payload: OnPayload) -> None:
        """Hand the rest of the body to `on_payload` (payload, `t_ns`, `seen_ns`,
        `kernel_stamped`), each payload as its read arrives, in the connection's reader
        callback (`Connection.push`: no task wake-up per read); until the body ends or
        `on_payload` returns True. The same payloads, stamps and errors as iterating; where
        it stopped, iterating goes on. Only where `pushes`.

        A chunked body first offers each pushed read as it came, while no chunk is
        part-read (``on_payload(read, t, seen, kernel, True)``); a reader that takes it (True
        or False back) does the framing's common case and its own in one call. None back:
        the read is de-chunked here and handed over as always."""
        conn = self._conn
        buf = conn.buffer
        while not self._complete:  # what is in already
            if buf:
                data = bytes(buf)
                buf.clear()
                t, seen, kernel = self._last
            elif conn.inbox:
                data, t, seen, kernel = conn.inbox.popleft()
            else:
                break
            payload = self._take(data, t, seen, kernel)
            if payload and on_payload(payload, t, seen, kernel):
                return
        if not self._complete:
            stopped = False
            chunked = self._chunked

            def sink(data: bytes, t: int, seen: int, kernel: bool) -> bool:
                nonlocal stopped
                if chunked is not None and not chunked.buf and chunked.state == "size":
                    taken = on_payload(data, t, seen, kernel, True)
                    if taken is not None:  # whole non-empty chunks: the body goes on
                        self._last = (t, seen, kernel)
                        self.t_ns, self.seen_ns, self.kernel_stamped = t, seen, kernel
                        if taken:
                            stopped = True
                        return stopped
                payload = self._take(data, t, seen, kernel)
                if payload and on_payload(payload, t, seen, kernel):
                    stopped = True
                return stopped or self._complete

            try:
                await conn.push(sink, self._read_timeout)
            except TimeoutError:
                raise httpx.ReadTimeout(
                    "timed out reading the response", request=self._request
                ) from None
            if stopped:
                return
            if not self._complete:  # the peer closed
                self._closed_early()
        await self.aclose()

    def _take(self, data: bytes, t: int, seen: int, kernel: bool) -> bytes:
        """The payload of one read (its stamps kept); marks the body complete at its end."""
        self._last = (t, seen, kernel)
        chunked = self._chunked
        if chunked is not None:
            try:
                payload, rest, done = chunked.feed(data)
            except ValueError as exc:
                self._conn.close()
                raise httpx.RemoteProtocolError(
                    f"broken chunked framing: {exc}", request=self._request
                ) from None
            if done:
                self._conn.buffer += rest
                self._complete = True
        elif self._framing == "length":
            payload, rest = data[: self._left], data[self._left :]
            self._left -= len(payload)
            if self._left == 0:
                self._conn.buffer += rest
                self._complete = True
        else:
            payload = data
        if payload:
            self.t_ns = t
            self.seen_ns = seen
            self.kernel_stamped = kernel
        return payload

    def _closed_early(self) -> None:
        """The peer closed: the end of a read-until-close body, else a broken one."""
        if self._framing == "close":
            self._complete = True
            return
        raise httpx.RemoteProtocolError(
            "peer closed connection without sending complete message body",
            request=self._request,
        )

    @property
    def complete(self) -> bool:
        """Whether the body has ended: nothing more of it can arrive (closing it then keeps
        the connection for the next request, as reading it to its end would)."""
        return self._complete

    async def aclose(self) -> None:
        if self._released:
            return
        self._released = True
        # Bytes read past the body wait for the next response with the stamps they came with.
        self._conn.buffer_stamp = self._last
        if self._complete and self._keep_alive and self._conn.usable:
            self._transport.release(self._conn)
        else:
            self._transport.discard(self._conn)


_HEX_DIGITS = frozenset(b"0123456789abcdefABCDEF")


class _Chunked:
    """Decodes ``Transfer-Encoding: chunked`` incrementally."""

    def __init__(self) -> None:
        self.buf = bytearray()  # bytes of a chunk head, data or trailer not yet whole
        self._left = 0  # payload bytes left in the current chunk
        self.state = "size"  # size | data | crlf | trailer: what the next byte starts

    def feed(self, data: bytes) -> tuple[bytes, bytes, bool]:
        """(payload, bytes past the body, whether the body ended); ValueError when the
        framing is broken (a chunk size that is not hex, no CRLF after a chunk)."""
        buf = self.buf
        if not buf and self.state == "size":
            # The common read: whole chunks (a server writes each event as one; a read that
            # came late holds several). Anything else goes the general way below.
            payload = whole_chunks(data)
            if payload is not None:
                return payload, b"", False
        buf += data
        out = bytearray()
        while True:
            if self.state == "data":
                take = min(self._left, len(buf))
                out += buf[:take]
                del buf[:take]
                self._left -= take
                if self._left:
                    return bytes(out), b"", False
                self.state = "crlf"
            if self.state == "crlf":
                if len(buf) < 2:
                    return bytes(out), b"", False
                if buf[:2] != b"\r\n":
                    raise ValueError(f"no CRLF after a chunk's data but {bytes(buf[:2])!r}")
                del buf[:2]
                self.state = "size"
            if self.state == "size":
                end = buf.find(b"\r\n")
                if end < 0:
                    return bytes(out), b"", False
                field = bytes(buf[:end]).split(b";", 1)[0].strip()
                if not field or not all(c in _HEX_DIGITS for c in field):
                    raise ValueError(f"malformed chunk size {field[:20]!r}")
                size = int(field, 16)
                del buf[: end + 2]
                if size == 0:
                    self.state = "trailer"
                else:
                    self._left = size
                    self.state = "data"
                    continue
            if self.state == "trailer":
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


def response_framing(
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
