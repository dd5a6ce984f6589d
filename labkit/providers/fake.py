"""An in-process provider with a scripted schedule, for demos and tests.

It speaks OpenAI's Chat Completions stream through an in-process httpx transport, so the
whole recorder path runs. Its schedule is the truth server's (`labkit.truth.schedule`,
``FakeSchedule`` is `TruthSchedule`) and its replies are the truth server's
(`labkit.truth.reply` plans them, `labkit.truth.shapes` frames them): the same request gets
the same stream in-process as from ``labkit fake-server`` over a socket, which also logs
when it sent each event. Only the timing differs: here asyncio sleeps, there a scheduler
loop in its own process.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import ClassVar

import httpx
from pydantic import Field

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
from labkit.truth.reply import Reply, Responder, read_request
from labkit.truth.schedule import ServerTimings, TruthSchedule
from labkit.truth.shapes import Render, Timings, error_body, timing_headers
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
]

#: The fake's schedule: the truth server's (`labkit.truth.schedule.TruthSchedule`).
FakeSchedule = TruthSchedule
#: The server timing shapes the fake can emit (`FakeSchedule.server_timings`).
FakeServerTimings = ServerTimings

_DEEPSEEK_KEEPALIVE_S = 0.1  # DeepSeek's comment period during its queue, when unset


class FakeDrop(Exception):
    """Raised by `fake_stream` where the connection should be cut."""


def _planned(reply: Reply) -> Timings:
    """The timings the reply's headers carry: the plan's (no slot's wait)."""
    return Timings(reply.schedule.queue_ms, reply.plan.first_ms, reply.plan.decode_ms)


async def fake_stream(
    reply: Reply, slots: asyncio.Semaphore | None = None, t_admit: float | None = None
) -> AsyncIterator[bytes]:
    """The SSE payloads of one reply, each yielded at its scheduled time: the schedule's
    queue (DeepSeek's shape: keep-alive comments during it), a slot (with `slots`, held to
    the stream's end), then the output events from the start of service; `t_admit`: the
    loop time the server's clock started (default: now)."""
    loop = asyncio.get_running_loop()
    s = reply.schedule
    admit = loop.time() if t_admit is None else t_admit
    due = admit + s.queue_ms / 1000.0
    if s.server_timings == "deepseek" and s.queue_ms:
        period = s.keepalive_ms / 1000.0 or _DEEPSEEK_KEEPALIVE_S
        while (left := due - loop.time()) > period:
            await asyncio.sleep(period)
            yield b": keep-alive\n\n"
    if (left := due - loop.time()) > 0:
        await asyncio.sleep(left)
    if slots is None:
        async for piece in _served(reply, due, 0.0):
            yield piece
        return
    async with slots:
        start = max(due, loop.time())
        async for piece in _served(reply, start, (start - due) * 1000.0):
            yield piece


async def _served(reply: Reply, t_start: float, wait_ms: float) -> AsyncIterator[bytes]:
    loop = asyncio.get_running_loop()
    s = reply.schedule
    render = Render(reply)
    for piece in render.head():
        yield piece
    first = t_start + reply.plan.first_ms / 1000.0
    if s.keepalive_ms > 0:
        comment = t_start + s.keepalive_ms / 1000.0
        while comment < first:
            await asyncio.sleep(max(0.0, comment - loop.time()))
            yield b": keep-alive\n\n"
            comment += s.keepalive_ms / 1000.0
    due, sent = first, 0
    failing = s.fail in ("stream_error", "drop")
    for i, n in enumerate(reply.plan.event_tokens):
        if i:
            due += reply.plan.gaps_ms[i - 1] / 1000.0
        delay = due - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        if failing and sent >= s.fail_after_tokens:
            break
        if i == 0:
            for piece in render.opening():
                yield piece
        yield render.event(i)
        sent += n
    if s.fail == "stream_error":
        for piece in render.error():
            yield piece
        return
    if s.fail == "drop":
        raise FakeDrop
    planned = reply.plan
    if planned.event_tokens:
        end = due + planned.end_gap_ms / 1000.0
    else:  # nothing streamed: the end at once, or the end token's time
        end = first if planned.end_token else t_start
    if (delay := end - loop.time()) > 0:
        await asyncio.sleep(delay)
    timings = Timings(s.queue_ms + wait_ms, reply.plan.first_ms, reply.plan.decode_ms)
    for piece in render.end(timings):
        yield piece


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
        self._slots = asyncio.Semaphore(schedule.slots) if schedule.slots else None
        self._responder = Responder("fake-" + uuid.uuid4().hex[:8], model="fake-model")

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """One scripted response."""
        loop = asyncio.get_running_loop()
        t_read = loop.time()
        reply = self._responder.reply(self.schedule, read_request("chat", request.content))
        s = reply.schedule
        t_admit = t_read + s.frontend_ms / 1000.0
        if (wait := t_admit - loop.time()) > 0:
            await asyncio.sleep(wait)  # the front end: nothing sent, no timing reports it
        headers = {"x-request-id": reply.rid}
        if s.fail == "http_status":
            if s.retry_after_s is not None:
                headers["retry-after"] = f"{s.retry_after_s:g}"
            headers["content-type"] = "application/json"
            return httpx.Response(s.fail_status, headers=headers, content=error_body(reply))
        source = fake_stream(reply, self._slots, t_admit)
        if s.queue_ms and s.server_timings != "deepseek":
            await asyncio.sleep(max(0.0, t_admit + s.queue_ms / 1000.0 - loop.time()))
        return httpx.Response(
            200,
            headers={
                "content-type": "text/event-stream",
                **headers,
                **timing_headers(reply, _planned(reply)),
            },
            stream=_Stream(source),
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
    """A provider that reads the fake server (`labkit.truth`) at `base_url` as a load level
    reads a plain-HTTP server (`transport: auto`, a pool of `streams`): how
    `labkit.measurement.capacity` measures what one process can read on this host."""
    settings = OpenAICompatibleSettings(
        id="capacity", kind=OpenAICompatibleProvider.kind, model="fake-model", base_url=base_url
    )
    return OpenAICompatibleProvider(settings, pool_size=streams)
