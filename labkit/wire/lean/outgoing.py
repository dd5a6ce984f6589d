"""A request made ready to send before its clock starts: its bytes, and its connection.

What the lean transport would otherwise do between ``t_start`` and the write — build the
HTTP/1.1 head from the request's headers, join it to the body, take a pooled connection —
is labkit's own preparation, not the request's trip. `LeanTransport.prepare` does it before
the recorder starts the clock (`Outgoing`); after the stamp, `Outgoing.send` is one
``sock.send`` of those bytes, and the transport's `handle_async_request` then finds the
request sent and only reads the response. A request with no idle connection opens its own
inside the measurement as before (``connect_ms``), then writes the same ready bytes.
"""

from __future__ import annotations

from collections.abc import Callable

import httpx

from labkit.wire.lean.tcp import Connection

__all__ = ["PREPARED", "Outgoing", "request_bytes"]

#: The `httpx.Request` extension that carries its `Outgoing` to the transport.
PREPARED = "labkit.outgoing"


def request_bytes(request: httpx.Request) -> bytes | None:
    """The whole HTTP/1.1 request as written on the wire, head and body; None when the
    body is a stream not read yet (it is then read and written by the transport)."""
    try:
        body = request.content
    except httpx.RequestNotRead:
        return None
    parts = [request.method.encode(), b" ", request.url.raw_path, b" HTTP/1.1\r\n"]
    for name, value in request.headers.raw:
        parts += (name, b": ", value, b"\r\n")
    parts += (b"\r\n", body)
    return b"".join(parts)


class Outgoing:
    """One request's bytes (`wire`) and, when the pool had one idle, the connection it goes
    out on (`conn`, how it was had: ``"reused"`` or ``"preconnected"``). `send` writes it
    (once); the transport takes the connection with `take`, or hands it back with
    `discard_unsent` when the request never reached it."""

    __slots__ = ("_discard", "conn", "how", "sent", "wire")

    def __init__(
        self,
        wire: bytes,
        conn: Connection | None,
        how: str,
        discard: Callable[[Connection], None],
    ) -> None:
        self.wire = wire
        self.conn = conn
        self.how = how
        self.sent = False
        self._discard = discard

    def send(self) -> None:
        """Hand the request's bytes to the kernel now, on the connection taken before the
        clock (nothing when there is none: the transport connects, then writes them)."""
        conn = self.conn
        if conn is not None and not self.sent:
            self.sent = True
            conn.write(self.wire)

    def take(self) -> tuple[Connection, str] | None:
        """The connection taken for this request, written to (`send`), for the transport
        to read the response on; None when there is none. Taken once: a request sent again
        (a stale connection) connects anew."""
        conn = self.conn
        if conn is None:
            return None
        self.conn = None
        self.send()
        return conn, self.how

    def discard_unsent(self) -> None:
        """Close the connection of a request that never reached the transport, which would
        otherwise be out of the pool and never closed until the transport is."""
        conn = self.conn
        if conn is not None:
            self.conn = None
            self._discard(conn)
