"""A real HTTP server on 127.0.0.1 (or ::1) that answers each request with scripted raw bytes.

Each reply is a list of steps: `bytes` written as they are (status line and headers
included, so any framing can be sent), a float, seconds to sleep before the next write
(slow drips), or `HOLD`: keep the connection open, unread, until the server stops.
`MisbehavingServer.requests` keeps every request's head, so a test can see
what labkit sent (paths, headers). Used by the fault tests of the recorder and the runner.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from types import TracebackType

from labkit.measurement.recorder import BaseRecorder, RecordContext
from labkit.measurement.sdkpath import SDKRecorder
from labkit.providers import Provider
from labkit.records import RequestRecord
from tests.providers.streams import chat

Reply = Iterable[bytes | float | None]
#: A reply step: hold the connection open (send nothing more, never close) until the end.
HOLD = None


def http_head(status: int, headers: dict[str, str], reason: str = "X") -> bytes:
    """A status line and headers (with the blank line that ends them)."""
    lines = [f"HTTP/1.1 {status} {reason}", *(f"{k}: {v}" for k, v in headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def sse_reply(events: Iterable[bytes], *, close: bool = True) -> list[bytes | float]:
    """A 200 event stream read until the server closes the connection."""
    head = http_head(200, {"content-type": "text/event-stream", "connection": "close"})
    return [head, *events]


def body_reply(status: int, body: bytes, content_type: str, **headers: str) -> list[bytes | float]:
    """A complete response with a Content-Length body."""
    hdrs = {"content-type": content_type, "content-length": str(len(body)), **headers}
    hdrs["connection"] = "close"
    return [http_head(status, hdrs), body]


class MisbehavingServer:
    """Serves `reply(request_head)` for every connection, one request per connection."""

    def __init__(self, reply: Callable[[bytes], Reply], host: str = "127.0.0.1") -> None:
        self._reply = reply
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._sock = socket.create_server((host, 0), family=family)
        self._sock.settimeout(0.2)
        self.port = self._sock.getsockname()[1]
        self.base_url = f"http://{f'[{host}]' if ':' in host else host}:{self.port}"
        self.connections = 0
        self.requests: list[bytes] = []
        self.bytes_sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self) -> MisbehavingServer:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._sock.close()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            head = b""
            conn.settimeout(5)
            try:
                # Read the body too: closing with unread bytes would reset the connection.
                request = read_request(conn, b"")
                if request is None:
                    return
                head = request[0] + b"\r\n\r\n" + request[1]
                self.requests.append(head)
                for step in self._reply(head):
                    if step is HOLD:
                        self._stop.wait()
                    elif isinstance(step, float):
                        time.sleep(step)
                    else:
                        conn.sendall(step)
                        self.bytes_sent += len(step)
            except OSError:
                return  # the client hung up: what a bounded reader does


def read_request(conn: socket.socket, buf: bytes) -> tuple[bytes, bytes, bytes] | None:
    """One HTTP/1.1 request read from `conn` after the bytes already in `buf`: (head, body,
    what follows it on the connection), or None when the peer closes first."""
    while b"\r\n\r\n" not in buf:
        data = conn.recv(65536)
        if not data:
            return None
        buf += data
    head, _, buf = buf.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(buf) < length:
        data = conn.recv(65536)
        if not data:
            return None
        buf += data
    return head, buf[:length], buf[length:]


async def next_request(reader: asyncio.StreamReader) -> bytes:
    """The head of the next HTTP/1.1 request on a kept-alive connection of an asyncio server,
    its body read past; `asyncio.IncompleteReadError` once the client has closed."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    await reader.readexactly(length)
    return head


def repeat(block: bytes, times: int) -> Iterator[bytes]:
    """`block` written `times` times (a huge body without holding it in memory)."""
    for _ in range(times):
        yield block


def record_requests(
    make_provider: Callable[[], Provider], recorder: BaseRecorder, n: int
) -> list[RequestRecord]:
    """`n` chats in a row through `recorder` on one provider (made inside the event loop),
    then the recorder's SDK clients and the provider closed."""

    async def main() -> list[RequestRecord]:
        provider = make_provider()
        try:
            return [
                await recorder.record(provider, chat(), RecordContext("r", "t")) for _ in range(n)
            ]
        finally:
            if isinstance(recorder, SDKRecorder):
                await recorder.aclose()
            await provider.aclose()

    return asyncio.run(main())
