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
from typing import Any

from labkit.providers.fake import (
    FakeDrop,
    FakeSchedule,
    error_body,
    fake_stream,
    queue_before_headers,
    timing_headers,
)

__all__ = ["FakeServer"]


class FakeServer:
    """Serves one schedule on 127.0.0.1; `async with FakeServer(s) as srv: srv.base_url`."""

    def __init__(self, schedule: FakeSchedule, host: str = "127.0.0.1", port: int = 0) -> None:
        self.schedule = schedule
        self.host = host
        self.port = port
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._slots = schedule.new_slots()
        #: The headers of every chat request served, in order (what a server's tracing sees).
        self.request_headers: list[dict[str, str]] = []

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
                length = _content_length(headers.get("content-length", "0"))
                parts = request_line.split(" ", 2)
                if length is None or len(parts) != 3:
                    await _send_simple(writer, 400, _error_json("malformed HTTP request"))
                    break
                body = await reader.readexactly(length) if length else b""
                method, path, _ = parts
                if method == "POST" and path.endswith("/chat/completions"):
                    payload, problem = _chat_payload(body)
                    self.request_headers.append(headers)
                    if payload is None:
                        await _send_simple(writer, 400, _error_json(problem))
                    else:
                        await self._chat(writer, payload, headers.get("x-request-id"))
                else:
                    await _send_simple(writer, 404, _error_json("not found"))
                if headers.get("connection", "").lower() == "close":
                    break
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError, FakeDrop):
            pass
        finally:
            self._writers.discard(writer)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _chat(
        self, writer: asyncio.StreamWriter, payload: dict[str, Any], request_id: str | None
    ) -> None:
        s = self.schedule
        if s.fail == "http_status":
            headers, body = error_body(s)
            await _send_simple(writer, s.fail_status, body, headers)
            return
        wait = queue_before_headers(s)
        if wait:  # the scripted queue: nothing is sent until the request is "scheduled"
            await asyncio.sleep(wait)
        echoed = {"x-request-id": request_id} if request_id else {}  # as vLLM echoes it
        extra = "".join(
            f"{k}: {v}\r\n" for k, v in {**timing_headers(s, payload), **echoed}.items()
        )
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"cache-control: no-cache\r\ntransfer-encoding: chunked\r\n" + extra.encode() + b"\r\n"
        )
        await writer.drain()
        try:
            async for piece in fake_stream(s, payload, self._slots):
                writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                await writer.drain()
        except FakeDrop:
            writer.transport.abort()
            raise
        writer.write(b"0\r\n\r\n")
        await writer.drain()


_MAX_BODY = 16 * 1024 * 1024


def _content_length(value: str) -> int | None:
    """The body length a request announced, or None when it is not a sane number."""
    if not value.isdigit() or int(value) > _MAX_BODY:
        return None
    return int(value)


def _chat_payload(body: bytes) -> tuple[dict[str, Any] | None, str]:
    """The request as a JSON object, or None and why it cannot be served."""
    try:
        payload = json.loads(body or b"{}")
    except ValueError:
        return None, "the body is not JSON"
    if not isinstance(payload, dict):
        return None, "the body is not a JSON object"
    messages = payload.get("messages", [])
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        return None, "messages must be a list of objects"
    for key in ("max_tokens", "max_completion_tokens"):
        cap = payload.get(key)
        if cap is not None and (not isinstance(cap, int) or isinstance(cap, bool) or cap < 0):
            return None, f"{key} must be a non-negative integer"
    return payload, ""


def _error_json(message: str) -> bytes:
    return json.dumps({"error": {"message": message}}).encode()


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
