"""A llama.cpp-shaped chat server on 127.0.0.1 with a simulated prefix cache.

A prompt's tokens are its words (each message as ``<role>`` and its content's words). The
server keeps every prompt it served followed by its own answer, and with ``cache_prompt``
on (llama.cpp's default) reports the longest prefix a new prompt shares with any of them as
``timings.cache_n``; only the rest is "prefilled", at `prefill_s_per_token`. Every answer is
``max_tokens`` words long and starts with a serial number, so a test can tell which answer a
later prompt carried. `bodies` keeps every chat request body. ``/tokenize`` counts words.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any


def prompt_tokens(messages: list[dict[str, str]]) -> list[str]:
    """The simulated tokens of a chat prompt."""
    out: list[str] = []
    for m in messages:
        out.append(f"<{m['role']}>")
        out.extend(m["content"].split())
    return out


def _common_prefix(a: list[str], b: list[str]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


class PrefixCacheServer:
    """`async with PrefixCacheServer() as srv: srv.base_url` (the server root)."""

    def __init__(self, prefill_s_per_token: float = 0.0001) -> None:
        self.prefill_s_per_token = prefill_s_per_token
        self.bodies: list[dict[str, Any]] = []
        self.answers: list[str] = []
        self._cache: list[list[str]] = []
        self._server: asyncio.Server | None = None
        self.port = 0

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT``."""
        return f"http://127.0.0.1:{self.port}"

    async def __aenter__(self) -> PrefixCacheServer:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            length = 0
            for line in lines[1:]:
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value.strip())
            body = await reader.readexactly(length) if length else b""
            if lines[0].startswith("POST /tokenize"):
                words = json.loads(body)["content"].split()
                reply = json.dumps({"tokens": list(range(len(words)))}).encode()
                head_lines = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                head_lines += b"connection: close\r\ncontent-length: %d\r\n\r\n" % len(reply)
                writer.write(head_lines + reply)
                await writer.drain()
                return
            if not lines[0].startswith("POST") or "chat/completions" not in lines[0]:
                writer.write(
                    b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                )
                await writer.drain()
                return
            await self._chat(json.loads(body), writer)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def _chat(self, body: dict[str, Any], writer: asyncio.StreamWriter) -> None:
        self.bodies.append(body)
        tokens = prompt_tokens(body["messages"])
        cached = 0
        if body.get("cache_prompt", True):
            cached = max((_common_prefix(tokens, c) for c in self._cache), default=0)
            cached = min(cached, len(tokens) - 1)  # llama.cpp always evaluates one token
        prefill = len(tokens) - cached
        serial = len(self.answers)
        n_out = int(body.get("max_tokens", 4))
        words = [f"answer{serial}"] + [f"w{i}" for i in range(1, n_out)]
        self.answers.append(" ".join(words))
        self._cache.append([*tokens, "<assistant>", *words])
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n"
        )
        await asyncio.sleep(prefill * self.prefill_s_per_token)
        for i, word in enumerate(words):
            text = word if i == 0 else " " + word
            writer.write(_event({"choices": [{"index": 0, "delta": {"content": text}}]}))
            await writer.drain()
        timings = {
            "cache_n": cached,
            "prompt_n": prefill,
            "prompt_ms": prefill * self.prefill_s_per_token * 1000,
            "predicted_n": n_out,
            "predicted_ms": 1.0,
        }
        usage = {"prompt_tokens": len(tokens), "completion_tokens": n_out}
        writer.write(
            _event({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]})
            + _event({"choices": [], "usage": usage, "timings": timings})
            + b"data: [DONE]\n\n"
        )
        await writer.drain()


def _event(payload: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps({"object": "chat.completion.chunk", **payload}).encode() + b"\n\n"
