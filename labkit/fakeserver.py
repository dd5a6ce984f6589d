"""The fake provider's schedule served over real sockets: an OpenAI-compatible server.

A minimal HTTP/1.1 server on asyncio streams (keep-alive, chunked responses, one chunk
written and drained per SSE piece) that answers ``POST .../chat/completions`` with
`labkit.providers.fake.fake_stream`. It exists to measure labkit against a known schedule
on real sockets (`labkit fake-server`, and the real-socket test), so it does as little as
possible per token.
"""

from __future__ import annotations

import asyncio
import contextlib
import json

from labkit.providers.fake import FakeDrop, FakeSchedule, error_body, fake_stream

__all__ = ["FakeServer"]


class FakeServer:
    """Serves one schedule on 127.0.0.1; `async with FakeServer(s) as srv: srv.base_url`."""

    def __init__(self, schedule: FakeSchedule, host: str = "127.0.0.1", port: int = 0) -> None:
        self.schedule = schedule
        self.host = host
        self.port = port
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    @property
    def base_url(self) -> str:
        """The OpenAI-style API root, e.g. ``http://127.0.0.1:PORT/v1``."""
        return f"http://{self.host}:{self.port}/v1"

    async def start(self) -> None:
        """Bind and start accepting connections."""
        self._server = await asyncio.start_server(self._handle, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        """Stop accepting and close the listener."""
        if self._server is not None:
            self._server.close()
            for writer in list(self._writers):  # open keep-alive connections too
                writer.transport.abort()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
            self._server = None

    async def serve_forever(self) -> None:
        """Run until cancelled."""
        if self._server is None:
            await self.start()
        assert self._server is not None
        await self._server.serve_forever()

    async def __aenter__(self) -> FakeServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                request_line, *header_lines = head.decode("latin-1").split("\r\n")
                headers = {}
                for line in header_lines:
                    if ":" in line:
                        k, v = line.split(":", 1)
                        headers[k.strip().lower()] = v.strip()
                length = int(headers.get("content-length", "0"))
                body = await reader.readexactly(length) if length else b""
                method, path, _ = request_line.split(" ", 2)
                if method == "POST" and path.endswith("/chat/completions"):
                    await self._chat(writer, json.loads(body or b"{}"))
                else:
                    await _send_simple(writer, 404, b'{"error":{"message":"not found"}}')
                if headers.get("connection", "").lower() == "close":
                    break
        except (asyncio.IncompleteReadError, ConnectionError, FakeDrop):
            pass
        finally:
            self._writers.discard(writer)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _chat(self, writer: asyncio.StreamWriter, payload: dict[str, object]) -> None:
        s = self.schedule
        if s.fail == "http_status":
            headers, body = error_body(s)
            await _send_simple(writer, s.fail_status, body, headers)
            return
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"cache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n"
        )
        await writer.drain()
        try:
            async for piece in fake_stream(s, payload):
                writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                await writer.drain()
        except FakeDrop:
            writer.transport.abort()
            raise
        writer.write(b"0\r\n\r\n")
        await writer.drain()


async def _send_simple(
    writer: asyncio.StreamWriter, status: int, body: bytes, headers: dict[str, str] | None = None
) -> None:
    extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items() if k != "content-type")
    writer.write(
        f"HTTP/1.1 {status} X\r\ncontent-type: application/json\r\n{extra}"
        f"content-length: {len(body)}\r\n\r\n".encode()
        + body
    )
    await writer.drain()
