"""An in-process provider with a scripted schedule, for demos and tests.

It speaks OpenAI's Chat Completions stream through an in-process httpx transport, so the
whole recorder path runs: first token after `first_token_ms`, then one token every
`token_interval_ms`, `tokens` in all, then the chosen finish reason — or a chosen failure.
The same stream is served over real sockets by `labkit.fakeserver`.

With `server_timings` the stream also carries one server's own account of itself, in that
server's documented shape (`labkit.providers.server_timings`), with the schedule's values:
queue = `queue_ms` (a wait before the response starts; DeepSeek's shape sends the headers
first and `: keep-alive` comments during it), prefill = `first_token_ms`, decode = the
gaps between the output events, total = their sum.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from typing import Any, ClassVar, Literal

import httpx
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
)

from labkit.providers.base import (
    Provider,
    ProviderSettings,
    SDKAdapter,
    TokenCount,
    connections_for,
    register,
)
from labkit.providers.openai_compatible import (
    OpenAICompatibleProvider,
    OpenAICompatibleSettings,
)
from labkit.tokenizers import Tokenized
from labkit.wire.connections import Connections

__all__ = [
    "FakeDrop",
    "FakeProvider",
    "FakeSchedule",
    "FakeServerTimings",
    "FakeSettings",
    "FakeTransport",
    "fake_stream",
    "loopback_reader",
    "queue_before_headers",
    "timing_headers",
]

#: The server timing shapes the fake can emit (`FakeSchedule.server_timings`).
FakeServerTimings = Literal[
    "none", "groq", "cerebras", "fireworks", "vllm", "tgi", "llamacpp", "deepseek"
]

_WORDS = [
    "tokens",
    "are",
    "the",
    "pieces",
    "a",
    "model",
    "reads",
    "and",
    "writes",
    "one",
    "at",
    "a",
    "time",
    "while",
    "the",
    "clock",
    "runs",
]


class FakeSchedule(BaseModel):
    """When each token is sent, how the stream ends, and what can go wrong."""

    model_config = ConfigDict(extra="forbid")

    first_token_ms: NonNegativeFloat = Field(default=50.0, description="Delay of token 1.")
    token_interval_ms: NonNegativeFloat = Field(default=10.0, description="Gap between tokens.")
    tokens: NonNegativeInt = Field(default=16, description="Tokens to send (capped by max_tokens).")
    tokens_per_event: int = Field(default=1, ge=1, description="Tokens carried by each event.")
    finish_reason: str = Field(default="stop", description="OpenAI finish_reason to send.")
    usage: bool = Field(default=True, description="Send the usage chunk.")
    fail: Literal["none", "http_status", "stream_error", "drop"] = Field(
        default="none", description="Failure to inject."
    )
    fail_status: int = Field(default=500, ge=400, le=599, description="Status for http_status.")
    fail_after_tokens: NonNegativeInt = Field(
        default=0, description="Tokens sent before a stream_error or drop."
    )
    retry_after_s: float | None = Field(default=None, description="retry-after on a 429.")
    server_timings: FakeServerTimings = Field(
        default="none",
        description="Which server's own timings the stream carries, in its documented shape.",
    )
    queue_ms: NonNegativeFloat = Field(
        default=0.0,
        description="A wait before the response starts, reported as the server's queue time.",
    )
    keepalive_interval_ms: PositiveFloat = Field(
        default=100.0, description="`: keep-alive` comment period during the queue (deepseek)."
    )

    def decode_ms(self, events: int) -> float:
        """The scripted time from the first output event to the last."""
        return max(events - 1, 0) * self.token_interval_ms

    def total_ms(self, events: int) -> float:
        """Queue, prefill and decode: the whole scripted request."""
        return self.queue_ms + self.first_token_ms + self.decode_ms(events)

    slots: PositiveInt | None = Field(
        default=None,
        description="Requests decoded at once; the rest wait, in arrival order, for a free "
        "slot before their first token's delay starts (null: no limit). Its capacity is "
        "1000 × slots / (first_token_ms + (tokens - 1) × token_interval_ms) requests/s.",
    )

    # --- tool calls (`session` experiments) ---
    tool_calls: NonNegativeInt = Field(
        default=0,
        description="A request offering `tools` (and no `tool_choice: none`) is answered "
        "with tool calls while its history holds fewer than this many tool results (role "
        "`tool` messages), then with text: a session of this many tool steps.",
    )
    parallel_tool_calls: PositiveInt = Field(
        default=1, description="Tool calls in one reply (their arguments share its events)."
    )

    def new_slots(self) -> asyncio.Semaphore | None:
        """The slots one server shares between its requests (None: unlimited)."""
        return None if self.slots is None else asyncio.Semaphore(self.slots)


class FakeDrop(Exception):
    """Raised by `fake_stream` where the connection should be cut."""


def _chunk(obj: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


def requested_tokens(schedule: FakeSchedule, body: dict[str, Any]) -> int:
    """Tokens to send for a request body: the schedule's, capped by its max_tokens."""
    cap = body.get("max_tokens") or body.get("max_completion_tokens")
    return min(schedule.tokens, int(cap)) if cap else schedule.tokens


def _events(schedule: FakeSchedule, body: dict[str, Any]) -> tuple[int, int]:
    n_tokens = requested_tokens(schedule, body)
    return n_tokens, -(-n_tokens // schedule.tokens_per_event)


def scripted_tool_calls(schedule: FakeSchedule, body: dict[str, Any]) -> int:
    """How many tool calls the reply to `body` makes (0: a text answer)."""
    if not body.get("tools") or body.get("tool_choice") == "none":
        return 0
    results = sum(1 for m in body.get("messages", []) if m.get("role") == "tool")
    return schedule.parallel_tool_calls if results < schedule.tool_calls else 0


def _tool_delta(event: int, n_events: int, calls: int, step: int, name: str) -> dict[str, Any]:
    """Event `event`'s piece of the reply's `calls` tool calls: each call's first event
    carries its id and name, the rest pieces of its arguments."""
    index = event * calls // max(n_events, 1)
    first = event == -(-index * n_events // calls)
    piece: dict[str, Any] = {"index": index, "function": {"arguments": "" if first else " "}}
    if first:
        piece["id"] = f"call_{step}_{index}"
        piece["type"] = "function"
        piece["function"] = {"name": name, "arguments": '{"query": "q'}
    if event == n_events - 1 or (event + 1) * calls // max(n_events, 1) != index:
        piece["function"]["arguments"] += '"}'
    return {"tool_calls": [piece]}


def queue_before_headers(schedule: FakeSchedule) -> float:
    """Seconds to wait before sending the response headers (the scripted queue, except in
    DeepSeek's shape, which answers at once and keeps the stream alive while it waits)."""
    return 0.0 if schedule.server_timings == "deepseek" else schedule.queue_ms / 1000.0


def timing_headers(schedule: FakeSchedule, body: dict[str, Any]) -> dict[str, str]:
    """The response headers of the chosen shape: TGI's timings (whole ms), Fireworks' TTFT
    (seconds)."""
    s = schedule
    _, n_events = _events(s, body)
    if s.server_timings == "tgi":
        total = f"{s.total_ms(n_events):.0f}"
        per_token = s.token_interval_ms / s.tokens_per_event
        return {
            "x-compute-time": total,
            "x-total-time": total,
            "x-queue-time": f"{s.queue_ms:.0f}",
            "x-inference-time": f"{s.first_token_ms + s.decode_ms(n_events):.0f}",
            "x-time-per-token": f"{per_token:.0f}",
        }
    if s.server_timings == "fireworks":
        return {"fireworks-server-time-to-first-token": f"{s.first_token_ms / 1000:.6f}"}
    return {}


def _seconds_split(s: FakeSchedule, n_events: int) -> dict[str, float]:
    return {
        "queue_time": s.queue_ms / 1000,
        "prompt_time": s.first_token_ms / 1000,
        "completion_time": s.decode_ms(n_events) / 1000,
        "total_time": s.total_ms(n_events) / 1000,
    }


def _llamacpp_timings(s: FakeSchedule, sent: int, events_sent: int, prompt_n: int) -> Any:
    decode = s.decode_ms(events_sent)
    return {
        "cache_n": 0,
        "prompt_n": prompt_n,
        "prompt_ms": s.first_token_ms,
        "predicted_n": sent,
        "predicted_ms": decode,
        "predicted_per_token_ms": s.token_interval_ms / s.tokens_per_event,
        "predicted_per_second": 1000.0 * s.tokens_per_event / s.token_interval_ms
        if s.token_interval_ms
        else None,
    }


def _final_fields(s: FakeSchedule, n_events: int, sent: int, prompt_n: int) -> dict[str, Any]:
    """The last chunk's timing fields of the chosen shape."""
    kind = s.server_timings
    if kind == "groq":
        usage: dict[str, float] = {"prompt_tokens": prompt_n, "completion_tokens": sent}
        usage.update(_seconds_split(s, n_events))
        return {"x_groq": {"id": "req_fake", "usage": usage}}
    if kind == "cerebras":
        return {"time_info": {**_seconds_split(s, n_events), "created": 0}}
    if kind == "fireworks":
        return {
            "perf_metrics": {
                "fireworks-prompt-tokens": prompt_n,
                "fireworks-server-time-to-first-token": s.first_token_ms / 1000,
                "fireworks-server-processing-time": s.total_ms(n_events) / 1000,
            }
        }
    if kind == "vllm":
        decode = s.decode_ms(n_events)
        return {
            "metrics": {
                "queue_time_ms": s.queue_ms,
                "time_to_first_token_ms": s.first_token_ms,
                "generation_time_ms": decode,
                "mean_itl_ms": s.token_interval_ms / s.tokens_per_event,
                "tokens_per_second": 1000.0 * (sent - 1) / decode if decode else None,
            }
        }
    if kind == "llamacpp":
        return {"timings": _llamacpp_timings(s, sent, n_events, prompt_n)}
    return {}


async def fake_stream(
    schedule: FakeSchedule, body: dict[str, Any], slots: asyncio.Semaphore | None = None
) -> AsyncIterator[bytes]:
    """The SSE bytes of one response, each piece sent at its scheduled time; with `slots`,
    the schedule starts once a slot is free and the slot is held to the stream's end."""
    if slots is None:
        async for piece in _scheduled(schedule, body):
            yield piece
        return
    async with slots:
        async for piece in _scheduled(schedule, body):
            yield piece


async def _scheduled(schedule: FakeSchedule, body: dict[str, Any]) -> AsyncIterator[bytes]:
    loop = asyncio.get_running_loop()
    n_tokens, n_events = _events(schedule, body)
    if schedule.server_timings == "deepseek" and schedule.queue_ms:
        end = loop.time() + schedule.queue_ms / 1000.0
        while (left := end - loop.time()) > 0:
            yield b": keep-alive\n\n"
            await asyncio.sleep(min(left, schedule.keepalive_interval_ms / 1000.0))
    t0 = loop.time()
    prompt = " ".join(str(m.get("content") or "") for m in body.get("messages", []))
    calls = scripted_tool_calls(schedule, body)
    step = sum(1 for m in body.get("messages", []) if m.get("role") == "tool")
    tool_name = str(((body.get("tools") or [{}])[0].get("function") or {}).get("name", "tool"))
    prompt_n = len(prompt.split())
    per_token = schedule.server_timings == "llamacpp"
    rid = "chatcmpl-fake-" + uuid.uuid4().hex[:12]
    base = {"id": rid, "object": "chat.completion.chunk", "model": body.get("model", "fake")}

    def at(ms: float) -> float:
        return t0 + ms / 1000.0

    sent = 0
    for i in range(n_events):
        delay = at(schedule.first_token_ms + i * schedule.token_interval_ms) - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        if schedule.fail in ("stream_error", "drop") and sent >= schedule.fail_after_tokens:
            break
        if i == 0:
            role = {"index": 0, "delta": {"role": "assistant", "content": ""}}
            yield _chunk({**base, "choices": [role]})
        k = min(schedule.tokens_per_event, n_tokens - sent)
        words = [_WORDS[(sent + j) % len(_WORDS)] for j in range(k)]
        text = "".join((" " if sent + j else "") + w for j, w in enumerate(words))
        sent += k
        delta = _tool_delta(i, n_events, calls, step, tool_name) if calls else {"content": text}
        chunk: dict[str, Any] = {**base, "choices": [{"index": 0, "delta": delta}]}
        if per_token:  # llama.cpp's timings_per_token: cumulative timings on every chunk
            chunk["timings"] = _llamacpp_timings(schedule, sent, i + 1, prompt_n)
        yield _chunk(chunk)
    if schedule.fail == "stream_error":
        yield _chunk({"error": {"type": "server_error", "message": "scripted failure"}})
        yield b"data: [DONE]\n\n"
        return
    if schedule.fail == "drop":
        raise FakeDrop
    finish = "tool_calls" if calls else schedule.finish_reason
    if n_tokens < schedule.tokens and not calls:
        finish = "length"
    final = _final_fields(schedule, n_events, sent, prompt_n)
    on_finish = not schedule.usage or schedule.server_timings in ("groq", "fireworks")
    finish_chunk = {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]}
    yield _chunk({**finish_chunk, **final} if on_finish else finish_chunk)
    if schedule.usage:
        usage: dict[str, float] = {"prompt_tokens": prompt_n, "completion_tokens": sent}
        usage_chunk = {**base, "choices": [], "usage": usage}
        yield _chunk(usage_chunk if on_finish else {**usage_chunk, **final})
    yield b"data: [DONE]\n\n"


def error_body(schedule: FakeSchedule) -> tuple[dict[str, str], bytes]:
    """Headers and JSON body of the scripted HTTP error."""
    headers = {"content-type": "application/json"}
    if schedule.retry_after_s is not None:
        headers["retry-after"] = f"{schedule.retry_after_s:g}"
    body = {"error": {"type": "scripted_error", "message": f"scripted HTTP {schedule.fail_status}"}}
    return headers, json.dumps(body).encode()


class _Stream(httpx.AsyncByteStream):
    def __init__(self, source: AsyncIterator[bytes]) -> None:
        self._source = source

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for piece in self._source:
                yield piece
        except FakeDrop:
            raise httpx.RemoteProtocolError("peer closed connection (scripted drop)") from None

    async def aclose(self) -> None:
        aclose = getattr(self._source, "aclose", None)
        if aclose is not None:
            await aclose()


class FakeTransport(httpx.AsyncBaseTransport):
    """Serves the schedule in-process: no sockets, no network."""

    def __init__(self, schedule: FakeSchedule) -> None:
        self.schedule = schedule
        self._slots = schedule.new_slots()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """One scripted response."""
        if self.schedule.fail == "http_status":
            headers, body = error_body(self.schedule)
            return httpx.Response(self.schedule.fail_status, headers=headers, content=body)
        payload = json.loads(request.content or b"{}")
        wait = queue_before_headers(self.schedule)
        if wait:
            await asyncio.sleep(wait)
        return httpx.Response(
            200,
            headers={
                "content-type": "text/event-stream",
                "x-request-id": uuid.uuid4().hex,
                **timing_headers(self.schedule, payload),
            },
            stream=_Stream(fake_stream(self.schedule, payload, self._slots)),
        )


class FakeSettings(ProviderSettings):
    """A fake provider entry: a model label and a schedule."""

    model: str = Field(default="fake-model", min_length=1, description="Label only.")
    schedule: FakeSchedule = Field(default_factory=FakeSchedule)

    default_base_url: ClassVar[str | None] = "http://fake.labkit.invalid/v1"
    in_process: ClassVar[bool] = True


@register
class FakeProvider(OpenAICompatibleProvider):
    """The scripted provider; the recorder reads it exactly like a real one."""

    kind: ClassVar[str] = "fake"
    settings_model: ClassVar[type[ProviderSettings]] = FakeSettings
    #: Its stream lives in an in-process transport that an SDK's own HTTP client cannot reach.
    sdk: ClassVar[SDKAdapter | None] = None

    def count_locally(self, text: str) -> TokenCount | None:
        """None: a scripted stream has no tokenizer."""
        return None

    async def tokenized(self, text: str) -> Tokenized | None:
        """None: a scripted stream has no tokenizer."""
        return None

    def __init__(
        self,
        settings: ProviderSettings,
        *,
        api_key: str | None = None,
        pool_size: int | None = None,
        connections: Connections | None = None,
    ) -> None:
        assert isinstance(settings, FakeSettings)
        schedule = settings.schedule

        def serve_in_process() -> httpx.AsyncClient:
            return httpx.AsyncClient(
                base_url=settings.resolved_base_url(), transport=FakeTransport(schedule)
            )

        connections = connections or connections_for(
            settings, pool_size, client_factory=serve_in_process
        )
        super().__init__(settings, api_key=api_key, connections=connections)


def loopback_reader(base_url: str, streams: int) -> Provider:
    """A provider that reads a `labkit.fakeserver` at `base_url` as a load level reads a
    plain-HTTP server (`transport: auto`, a pool of `streams`): how `labkit.measurement.capacity`
    measures what one process can read on this host."""
    settings = OpenAICompatibleSettings(
        id="capacity", kind=OpenAICompatibleProvider.kind, model="fake-model", base_url=base_url
    )
    return OpenAICompatibleProvider(settings, pool_size=streams)
