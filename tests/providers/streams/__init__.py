"""Small SSE fixture builders and byte streams whose reads the test controls.

Builders yield/return ``data: ...\\n\\n`` events; `ChunkStream` serves chosen byte chunks
(optionally with a scripted clock or real sleeps between them, and an exception at the end)
through a respx route as ``httpx.Response(200, stream=ChunkStream(...))``. The ``*.sse`` files
next to this module are hand-written, recorded-style streams built from docs/providers.md,
but ``llamacpp_forced_call.sse``: the bundled llama-server's reply to a grammar-forced tool call
(`GrammarTools`), as it sent it (the model path in ``model`` cut to the file name).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterable, Iterator
from pathlib import Path
from typing import Any

import httpx

from labkit.measurement.recorder import RecordContext, StreamRecorder
from labkit.providers import ChatRequest, Provider
from labkit.records import RequestRecord

HERE = Path(__file__).parent
SSE_HEADERS = {"content-type": "text/event-stream"}


# --- event builders ---------------------------------------------------------------------


def sse(obj: Any, event: str | None = None) -> bytes:
    """One SSE event: optional ``event:`` line, one ``data:`` line, blank line.

    JSON is written with raw UTF-8 (not ``\\u`` escapes), as the providers send it, so a
    read boundary can fall inside a multi-byte character.
    """
    if isinstance(obj, str):
        data = obj
    else:
        data = json.dumps(obj, separators=(",", ":"), ensure_ascii=False)
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {data}\n\n".encode()


def oa_chunk(
    content: str | None = None,
    *,
    role: str | None = None,
    finish: str | None = None,
    reasoning: str | None = None,
    usage: dict[str, Any] | None = None,
    choices: bool = True,
    rid: str = "chatcmpl-test1",
    fingerprint: str | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """One Chat Completions chunk."""
    obj: dict[str, Any] = {"id": rid, "object": "chat.completion.chunk", "model": "m"}
    if fingerprint:
        obj["system_fingerprint"] = fingerprint
    if choices:
        delta: dict[str, Any] = {}
        if role is not None:
            delta["role"] = role
            delta["content"] = "" if content is None else content
        elif content is not None:
            delta["content"] = content
        if reasoning is not None:
            delta["reasoning_content"] = reasoning
        obj["choices"] = [{"index": 0, "delta": delta, "finish_reason": finish}]
    else:
        obj["choices"] = []
    if usage is not None:
        obj["usage"] = usage
    obj.update(extra)
    return obj


def oa_usage(prompt: int, completion: int, **details: Any) -> dict[str, Any]:
    """A Chat Completions usage object (details: cached_tokens=, reasoning_tokens=)."""
    usage: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
    if "cached_tokens" in details:
        usage["prompt_tokens_details"] = {"cached_tokens": details["cached_tokens"]}
    if "reasoning_tokens" in details:
        usage["completion_tokens_details"] = {"reasoning_tokens": details["reasoning_tokens"]}
    return usage


def openai_events(
    tokens: Iterable[str],
    *,
    finish: str = "stop",
    usage: dict[str, Any] | None = None,
    role_first: bool = True,
    done: bool = True,
    fingerprint: str | None = None,
) -> Iterator[bytes]:
    """A whole Chat Completions stream, one event per token; usage=None sends no usage chunk."""
    if role_first:
        yield sse(oa_chunk(role="assistant", fingerprint=fingerprint))
    for t in tokens:
        yield sse(oa_chunk(t, fingerprint=fingerprint))
    yield sse(oa_chunk(finish=finish, fingerprint=fingerprint))
    if usage is not None:
        yield sse(oa_chunk(choices=False, usage=usage, fingerprint=fingerprint))
    if done:
        yield b"data: [DONE]\n\n"


def anthropic_events(
    tokens: Iterable[str],
    *,
    stop_reason: str = "end_turn",
    input_tokens: int = 12,
    cache_read: int = 0,
    cache_creation: int = 0,
    output_tokens: int | None = None,
    delta_usage: dict[str, Any] | None = None,
    ping: bool = True,
) -> Iterator[bytes]:
    """A whole Messages stream with named events, as Anthropic sends it."""
    tokens = list(tokens)
    yield sse(
        {
            "type": "message_start",
            "message": {
                "id": "msg_test1",
                "type": "message",
                "role": "assistant",
                "model": "claude-test",
                "content": [],
                "stop_reason": None,
                "usage": {
                    "input_tokens": input_tokens,
                    "cache_creation_input_tokens": cache_creation,
                    "cache_read_input_tokens": cache_read,
                    "output_tokens": 1,
                },
            },
        },
        "message_start",
    )
    yield sse(
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        "content_block_start",
    )
    if ping:
        yield sse({"type": "ping"}, "ping")
    for t in tokens:
        yield sse(
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": t}},
            "content_block_delta",
        )
    yield sse({"type": "content_block_stop", "index": 0}, "content_block_stop")
    count = len(tokens) if output_tokens is None else output_tokens
    usage = delta_usage or {"output_tokens": count}
    yield sse(
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason, "stop_sequence": None},
            "usage": usage,
        },
        "message_delta",
    )
    yield sse({"type": "message_stop"}, "message_stop")


def responses_events(tokens: Iterable[str], *, response_id: str = "resp_test1") -> Iterator[bytes]:
    """A short Responses API stream: created, one text delta per token, completed with usage."""
    tokens = list(tokens)
    yield sse({"type": "response.created", "response": {"id": response_id}}, "response.created")
    for t in tokens:
        delta = {"type": "response.output_text.delta", "item_id": "msg_1", "delta": t}
        yield sse(delta, "response.output_text.delta")
    usage = {"input_tokens": 5, "output_tokens": len(tokens), "total_tokens": 5 + len(tokens)}
    done = {"type": "response.completed", "response": {"status": "completed", "usage": usage}}
    yield sse(done, "response.completed")


def load_sse(name: str) -> bytes:
    """A recorded-style stream file from tests/providers/streams/."""
    return (HERE / name).read_bytes()


def split_every(data: bytes, n: int) -> list[bytes]:
    """`data` cut into reads of `n` bytes (cuts land anywhere: inside lines, UTF-8, CRLF)."""
    return [data[i : i + n] for i in range(0, len(data), n)]


# --- byte streams -----------------------------------------------------------------------


class ScriptedClock:
    """A perf_counter_ns stand-in: returns `now`, which the test (or a stream) moves."""

    def __init__(self, start_ns: int = 1_000_000_000) -> None:
        self.start = start_ns
        self.now = start_ns

    def __call__(self) -> int:
        return self.now

    def at_ms(self, ms: float) -> int:
        """The stamp `ms` after the clock's start."""
        return self.start + round(ms * 1_000_000)


class ChunkStream(httpx.AsyncByteStream):
    """Serves chosen byte chunks, each read as the transport would hand it over.

    `times_ms`: with `clock`, sets the scripted clock to start + times_ms[i] before chunk i
    is handed over (exact stamps, no real waiting). `sleep_s`: real sleep before each chunk.
    `raise_at_end`: an exception raised after the last chunk (a dropped connection).
    """

    def __init__(
        self,
        chunks: Iterable[bytes],
        *,
        clock: ScriptedClock | None = None,
        times_ms: Iterable[float] | None = None,
        sleep_s: float | Iterable[float] = 0.0,
        raise_at_end: BaseException | None = None,
    ) -> None:
        self.chunks = list(chunks)
        self.clock = clock
        self.times_ms = list(times_ms) if times_ms is not None else None
        n = len(self.chunks)
        self.sleeps = [sleep_s] * n if isinstance(sleep_s, int | float) else list(sleep_s)
        self.raise_at_end = raise_at_end
        self.closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for i, chunk in enumerate(self.chunks):
            if self.sleeps[i]:
                await asyncio.sleep(self.sleeps[i])
            if self.clock is not None and self.times_ms is not None:
                self.clock.now = self.clock.at_ms(self.times_ms[i])
            yield chunk
        if self.raise_at_end is not None:
            raise self.raise_at_end

    async def aclose(self) -> None:
        self.closed = True


def sse_response(
    chunks: Iterable[bytes], status: int = 200, headers: dict[str, str] | None = None, **kw: Any
) -> httpx.Response:
    """A streaming 200 response that hands over exactly `chunks`, read by read."""
    return httpx.Response(
        status, headers={**SSE_HEADERS, **(headers or {})}, stream=ChunkStream(chunks, **kw)
    )


# --- running one request ------------------------------------------------------------------


def chat(text: str = "Say hi.", system: str | None = None, **params: Any) -> ChatRequest:
    """A one-message chat request."""
    msgs = [{"role": "system", "content": system}] if system else []
    msgs.append({"role": "user", "content": text})
    return ChatRequest(msgs, params, "p1")


def make_provider(kind: str, api_key: str | None = None, **settings: Any) -> Provider:
    """A provider of `kind` from settings given as keyword arguments."""
    from labkit.providers import provider_class

    cls = provider_class(kind)
    data = {"id": f"{kind}-test", "kind": kind, **settings}
    data.setdefault("model", "test-model")
    return cls(cls.settings_model.model_validate(data), api_key=api_key)


def record_one(
    provider: Provider,
    request: ChatRequest | None = None,
    *,
    clock: Any = None,
    ctx: RecordContext | None = None,
) -> RequestRecord:
    """Send one request through a `StreamRecorder`, close the provider, return the record."""

    async def go() -> RequestRecord:
        recorder = StreamRecorder(clock=clock) if clock is not None else StreamRecorder()
        try:
            return await recorder.record(
                provider, request or chat(), ctx or RecordContext(run_id="r", experiment="t")
            )
        finally:
            await provider.aclose()

    return asyncio.run(go())
