"""HTTP/1.1 response framing for the lean transport: the head, and the body as it arrives.

Content-Length, chunked and read-until-close bodies; each chunk handed on keeps the stamps of
the read that brought it (`Body.t_ns`, `seen_ns`, `kernel_stamped`, which the recorder reads
from ``response.extensions["labkit.arrival"]``). Errors are httpx's own exceptions.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterable
from typing import NamedTuple, Protocol

import h11
import httpx

from labkit.wire.lean.tcp import Connection
from labkit.wire.readpath import CommonPush, whole_chunks

__all__ = [
    "MAX_HEAD",
    "Body",
    "ConnectionOwner",
    "HeadParser",
    "ResponseHead",
    "response_framing",
]


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


#: The longest unfinished head or framing line (a response head, a chunk size line, a
#: trailer) before the response is refused: httpcore's bound for h11 (``Receive buffer too
#: long``).
MAX_HEAD = 100 * 1024


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
        # Broken framing found after a payload decoded from the same read: raised once that
        # payload is handed on.
        self._broken: httpx.RemoteProtocolError | None = None

    async def __aiter__(self) -> AsyncIterator[bytes]:
        conn = self._conn
        buf = conn.buffer
        while not self._complete:
            if self._broken is not None:
                raise self._broken
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

    async def deliver(self, on_payload: OnPayload, common: CommonPush | None = None) -> None:
        """Hand the rest of the body to `on_payload` (payload, `t_ns`, `seen_ns`,
        `kernel_stamped`), each payload as its read arrives, in the connection's reader
        callback (`Connection.push`: no task wake-up per read); until the body ends or
        `on_payload` returns True. The same payloads, stamps and errors as iterating; where
        it stopped, iterating goes on. Only where `pushes`.

        A chunked body first offers each pushed read as it came, while no chunk is
        part-read (``on_payload(read, t, seen, kernel, True)``); a reader that takes it (True
        or False back) does the framing's common case and its own in one call. None back:
        the read is de-chunked here and handed over as always. `common`, where given, reads
        the socket and takes each common read instead (`Connection.push`), as `on_payload`
        would have taken it."""
        conn = self._conn
        buf = conn.buffer
        while not self._complete:  # what is in already
            if self._broken is not None:
                raise self._broken
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
        if self._broken is not None:
            raise self._broken
        if not self._complete:
            stopped = False
            chunked = self._chunked

            def at_chunk_start() -> bool:
                return chunked is not None and not chunked.buf and chunked.state == "size"

            def sink(data: bytes, t: int, seen: int, kernel: bool) -> bool:
                nonlocal stopped
                conn.framed_stamp = None
                payload = self._take(data, t, seen, kernel)
                if payload and on_payload(payload, t, seen, kernel):
                    stopped = True
                if self._broken is not None and not stopped:
                    raise self._broken
                # The next read is offered as it came again once no chunk is part-read.
                conn.framed_sink = on_payload if at_chunk_start() else None
                return stopped or self._complete

            try:
                # Each read is offered to `on_payload` as it came, straight from the reader
                # callback, while no chunk is part-read; one it leaves comes to `sink`.
                await conn.push(
                    sink,
                    self._read_timeout,
                    on_payload if at_chunk_start() else None,
                    common if chunked is not None else None,
                )
            except TimeoutError:
                raise httpx.ReadTimeout(
                    "timed out reading the response", request=self._request
                ) from None
            finally:
                # A read taken as it came (whole non-empty chunks: the body goes on) was the
                # latest: its stamps are the body's.
                stamp = conn.framed_stamp
                if stamp is not None:
                    conn.framed_stamp = None
                    self._last = stamp
                    self.t_ns, self.seen_ns, self.kernel_stamped = stamp
                    stopped = stopped or conn.framed_stopped
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
            except FramingError as exc:
                self._conn.close()
                error = httpx.RemoteProtocolError(
                    f"broken chunked framing: {exc}", request=self._request
                )
                if not exc.payload:
                    raise error from None
                self._broken = error
                payload, rest, done = exc.payload, b"", False
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
        """Release the connection: kept for the next request where the body ended on a usable
        keep-alive connection, else discarded."""
        if self._released:
            return
        self._released = True
        # Bytes read past the body wait for the next response with the stamps they came with.
        self._conn.buffer_stamp = self._last
        if self._complete and self._keep_alive and self._conn.usable:
            self._transport.release(self._conn)
        else:
            self._transport.discard(self._conn)


# h11's patterns (h11/_abnf.py, 0.16), copied: h11 keeps them private, and the chunked body
# is framed here, not by h11 (tests/wire/lean/test_http_parity.py holds the copies to h11's).
_FIELD_VALUE = rb"(?:[^\x00\s]+(?:[ \t]+[^\x00\s]+)*)?"
HEADER_FIELD = re.compile(rb"[-!#$%&'*+.^_`|~0-9a-zA-Z]+:[ \t]*" + _FIELD_VALUE + rb"[ \t]*")
CHUNK_HEADER = re.compile(rb"([0-9A-Fa-f]{1,20})(?:;.*)?[ \t]*\r\n")
_OBS_FOLD = re.compile(rb"[ \t]+")
_BLANK_LINE = re.compile(rb"\n\r?\n")


class FramingError(ValueError):
    """Broken chunked framing; `payload` is what the same read decoded before it."""

    def __init__(self, message: str, payload: bytes = b"") -> None:
        super().__init__(message)
        self.payload = payload


def check_field_lines(lines: Iterable[bytes]) -> None:
    """ValueError unless `lines` are header fields as h11 reads them: obsolete line folding
    (a line starting with SP or HTAB continues the one before) joined first, then each
    ``token ":" OWS value OWS``, the value without NUL or whitespace other than SP and HTAB
    inside it."""
    joined: list[bytes] = []
    for line in lines:
        fold = _OBS_FOLD.match(line)
        if fold:
            if not joined:
                raise ValueError("continuation line at start of headers")
            joined[-1] += b" " + line[fold.end() :]
        else:
            joined.append(line)
    for line in joined:
        if not HEADER_FIELD.fullmatch(line):
            raise ValueError(f"illegal header line: {line[:40]!r}")


class _Chunked:
    """Decodes ``Transfer-Encoding: chunked`` incrementally, by h11's rules: a chunk header
    is 1 to 20 hex digits, an optional ``;`` extension, optional trailing SP/HTAB and CRLF
    (a bare LF does not end it); each chunk's data is followed by exactly CRLF; the trailer
    ends at a blank line (LF or CRLF line ends) and each of its lines is a header field."""

    def __init__(self) -> None:
        self.buf = bytearray()  # bytes of a chunk head, data or trailer not yet whole
        self._left = 0  # payload bytes left in the current chunk
        self.state = "size"  # size | data | crlf | trailer: what the next byte starts

    def feed(self, data: bytes) -> tuple[bytes, bytes, bool]:
        """(payload, bytes past the body, whether the body ended); FramingError (a
        ValueError carrying the payload decoded before it) when the framing is broken."""
        buf = self.buf
        if not buf and self.state == "size":
            # The common read: whole chunks (a server writes each event as one; a read that
            # came late holds several). Anything else goes the general way below.
            payload = whole_chunks(data)
            if payload is not None:
                return payload, b"", False
        buf += data
        out = bytearray()
        try:
            return self._decode(buf, out)
        except ValueError as exc:
            raise FramingError(str(exc), bytes(out)) from None

    def _decode(self, buf: bytearray, out: bytearray) -> tuple[bytes, bytes, bool]:
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
                if buf[:2] != b"\r\n"[: len(buf[:2])]:
                    raise ValueError(f"no CRLF after a chunk's data but {bytes(buf[:2])!r}")
                if len(buf) < 2:
                    return bytes(out), b"", False
                del buf[:2]
                self.state = "size"
            if self.state == "size":
                end = buf.find(b"\r\n")
                if end < 0:
                    self._bound(buf, "chunk size line")
                    return bytes(out), b"", False
                head = CHUNK_HEADER.fullmatch(buf, 0, end + 2)
                if head is None:
                    raise ValueError(f"malformed chunk size line {bytes(buf[: min(end, 40)])!r}")
                size = int(head[1], 16)
                del buf[: end + 2]
                if size == 0:
                    self.state = "trailer"
                else:
                    self._left = size
                    self.state = "data"
                    continue
            if self.state == "trailer":
                if buf[:1] == b"\n" or buf[:2] == b"\r\n":
                    skip = 1 if buf[:1] == b"\n" else 2
                    rest = bytes(buf[skip:])
                    buf.clear()
                    return bytes(out), rest, True
                blank = _BLANK_LINE.search(buf)
                if blank is None:
                    self._bound(buf, "trailer")
                    return bytes(out), b"", False
                lines = bytes(buf[: blank.start()]).split(b"\n")
                check_field_lines(line.removesuffix(b"\r") for line in lines)
                rest = bytes(buf[blank.end() :])
                buf.clear()
                return bytes(out), rest, True

    @staticmethod
    def _bound(buf: bytearray, what: str) -> None:
        if len(buf) > MAX_HEAD:
            raise ValueError(f"{what} longer than {MAX_HEAD} bytes")


#: The h11 request event `HeadParser` reads a response after, per method (a few at most).
_H11_REQUESTS: dict[str, h11.Request] = {}
_H11_REQUESTS_KEPT = 16

#: A head `HeadParser` reads without h11 (`_plain_head`): an HTTP/1.1 final status line and
#: header fields of printable ASCII, each line ending CRLF, and the blank line. Every head it
#: matches h11 matches the same way (h11's own patterns, `h11._abnf`, narrowed: a field's
#: characters ``[\x21-\x7e]`` where h11 takes ``[^\x00\s]``, no obsolete line folding, no
#: 1xx, version 1.1 only), and one field per match of `_PLAIN_FIELD` as h11 splits them.
_PLAIN_HEAD = re.compile(
    rb"HTTP/1\.1 ([2-9][0-9][0-9])(?: [ \t\x21-\x7e]*)?\r\n"
    rb"((?:[-!#$%&'*+.^_`|~0-9a-zA-Z]+:[ \t]*(?:[\x21-\x7e]+(?:[ \t]+[\x21-\x7e]+)*)?[ \t]*\r\n)*)"
    rb"\r\n"
)
_PLAIN_FIELD = re.compile(
    rb"([-!#$%&'*+.^_`|~0-9a-zA-Z]+):[ \t]*((?:[\x21-\x7e]+(?:[ \t]+[\x21-\x7e]+)*)?)[ \t]*\r\n"
)
#: The longest head read without h11 (a longer one is h11's to read, as before).
_PLAIN_HEAD_MAX = 16 * 1024
_CONTENT_LENGTH = re.compile(rb"[0-9]{1,20}")


class ResponseHead(NamedTuple):
    """A response head as `HeadParser` read it: the status, the header fields (names
    lowercased, values as h11 keeps them) and the HTTP version (``b"1.1"``)."""

    status_code: int
    headers: list[tuple[bytes, bytes]]
    http_version: bytes


def _plain_head(data: bytes) -> tuple[ResponseHead, int] | None:
    """The head at the start of `data` and where it ends, when it is a plain one
    (`_PLAIN_HEAD`) whose Content-Length and Transfer-Encoding fields h11 keeps as they are
    (one of each at most; digits, ``chunked``); None: h11 is to read it."""
    end = data.find(b"\r\n\r\n", 0, _PLAIN_HEAD_MAX)
    if end < 0:
        return None
    end += 4
    match = _PLAIN_HEAD.fullmatch(data, 0, end)
    if match is None:
        return None
    headers: list[tuple[bytes, bytes]] = []
    framing = 0
    for name, value in _PLAIN_FIELD.findall(match.group(2)):
        name = name.lower()
        if name == b"content-length":
            if framing & 1 or _CONTENT_LENGTH.fullmatch(value) is None:
                return None
            framing |= 1
        elif name == b"transfer-encoding":
            value = value.lower()
            if framing & 2 or value != b"chunked":
                return None
            framing |= 2
        headers.append((name, value))
    return ResponseHead(int(match.group(1)), headers, b"1.1"), end


class HeadParser:
    """A response head read as h11, the parser httpx reads HTTP/1.1 with, reads it: the
    status line, the header fields (obsolete line folding, bare LF line ends, NUL and other
    controls, Content-Length and Transfer-Encoding values as h11 takes or refuses them),
    interim 1xx responses skipped, `MAX_HEAD` bytes at most while unfinished.

    A plain head that arrives whole in the first read (the common one: `_plain_head`) is
    read by one pattern, without h11, to the same fields; any other by h11 itself."""

    def __init__(self, method: str) -> None:
        self._method = method
        self._h11: h11.Connection | None = None
        self._rest = b""

    def _start_h11(self) -> h11.Connection:
        conn = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEAD)
        # h11 reads a response only after a request (its method decides a HEAD's framing,
        # an Upgrade what a 101 means); none of these bytes are sent. The request event is
        # made once per method (h11's events are frozen): building and validating it was
        # half of this set-up, paid once per response.
        method = self._method
        request = _H11_REQUESTS.get(method)
        if request is None:
            request = h11.Request(
                method=method, target=b"/", headers=[(b"host", b"_"), (b"content-length", b"0")]
            )
            if len(_H11_REQUESTS) < _H11_REQUESTS_KEPT:
                _H11_REQUESTS[method] = request
        conn.send(request)
        self._h11 = conn
        return conn

    def feed(self, data: bytes, request: httpx.Request) -> ResponseHead | None:
        """The final response's head once `data` completes it, else None (more is needed);
        httpx.RemoteProtocolError for a head httpx would refuse."""
        conn = self._h11
        if conn is None:
            if self._method != "CONNECT" and (plain := _plain_head(data)) is not None:
                head, end = plain
                self._rest = data[end:]
                return head
            conn = self._start_h11()
        conn.receive_data(data)
        while True:
            try:
                event = conn.next_event()
            except h11.RemoteProtocolError as exc:
                raise httpx.RemoteProtocolError(str(exc)[:200], request=request) from None
            if event is h11.NEED_DATA:
                return None
            if isinstance(event, h11.Response):
                return ResponseHead(event.status_code, list(event.headers), event.http_version)
            if not isinstance(event, h11.InformationalResponse):  # pragma: no cover
                raise httpx.RemoteProtocolError(f"unexpected {event!r}"[:200], request=request)

    @property
    def rest(self) -> bytes:
        """The bytes read past the head (the body's start)."""
        if self._h11 is None:
            return self._rest
        return bytes(self._h11.trailing_data[0])


def response_framing(
    method: str, status: int, headers: list[tuple[bytes, bytes]]
) -> tuple[str, int]:
    """How the body ends: ("none"|"chunked"|"length"|"close", content length), from headers
    h11 has checked (`HeadParser`: Transfer-Encoding is ``chunked`` alone, Content-Length one
    decimal value of at most 20 digits)."""
    if method == "HEAD" or status in (204, 304):
        return "none", 0
    for name, _ in headers:
        if name == b"transfer-encoding":
            return "chunked", 0
    for name, value in headers:
        if name == b"content-length":
            return "length", int(value)
    return "close", 0
