"""The SDK path: the same request sent through the official `openai` / `anthropic` SDK.

labkit normally reads the wire itself (`client_path = "wire"`). Sending a request through
the provider's own SDK instead (`client_path = "sdk"`) shows what the SDK costs: its HTTP
stack (`httpx2`), its SSE decoder and its pydantic models. Each event is stamped when the
SDK hands it to user code, with the same clock and the same derivation as the wire path, so
``sdk − wire`` of TTFT and decode is the SDK's overhead. The SDKs' retries are off.

Connection phases are measured as on the wire path: the SDK gets an `httpx2.AsyncClient` of
labkit's whose request hook puts httpcore2's ``trace`` extension on every request, stamping
``connection.connect_tcp.complete``, ``http11.send_request_body.complete``,
``http11.receive_response_headers.complete`` and the rest for the request being measured (a
context variable that `SDKRecorder.record` sets: the SDK sends from the caller's task). Mock
transports emit no trace events; there ``headers_ms`` falls back to when `create()` returned.
The raw response headers (request id, ``openai-processing-ms``, rate limits) go to the same
parser as on the wire.

Each object the SDK yields is turned back into its JSON and classified by the wire path's
parser, so both paths count and classify alike; that re-reading is labkit's, not the SDK's,
and is kept out of ``app.cpu_ms``. ``app.parse_cpu_ms`` stays null here: the SDK decodes
inside its iterator, interleaved with the wait for the socket. This is the only module that
imports `httpx2` and the SDKs.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any

from labkit.providers.anthropic import AnthropicProvider
from labkit.providers.base import ChatRequest, EventClass, Provider, StreamParser
from labkit.providers.openai import OpenAIProvider
from labkit.proxies import proxy_for
from labkit.recorder import (
    BaseRecorder,
    Clock,
    LoopLagMonitor,
    RecordContext,
    _exc_message,
    _redactor,
    http_error,
)
from labkit.records import (
    AppTimings,
    ErrorKind,
    RecordError,
    RequestRecord,
)
from labkit.sse import SSEEvent

__all__ = ["SDKRecorder", "sdk_supported"]

HttpClientFactory = Callable[..., Any]

_HEADERS_DONE = "http11.receive_response_headers.complete"

#: The phase stamps of the request the current task is measuring, and the clock to use.
_MEASURING: ContextVar[tuple[dict[str, int], Clock] | None] = ContextVar(
    "labkit_sdk_measuring", default=None
)


async def _attach_trace(request: Any) -> None:
    """httpx2 request hook: trace the request that `SDKRecorder.record` is measuring."""
    measuring = _MEASURING.get()
    if measuring is None:
        return
    phases, clock = measuring

    async def trace(name: str, info: dict[str, Any]) -> None:
        phases[name] = clock()

    request.extensions["trace"] = trace


def sdk_supported(provider: Provider) -> bool:
    """Whether an official SDK can send this provider's requests."""
    return provider.has_sdk and isinstance(provider, OpenAIProvider | AnthropicProvider)


class SDKRecorder(BaseRecorder):
    """Measures streaming requests sent through the official SDKs."""

    def __init__(
        self,
        *,
        clock: Clock = time.perf_counter_ns,
        http_client_factory: HttpClientFactory | None = None,
        lag_monitor: LoopLagMonitor | None = None,
        on_cancelled: Callable[[RequestRecord], None] | None = None,
    ) -> None:
        super().__init__(clock=clock, lag_monitor=lag_monitor, on_cancelled=on_cancelled)
        self._factory = http_client_factory
        self._clients: dict[str, Any] = {}

    def _http_client(self, provider: Provider) -> Any:
        """The SDK's HTTP client: the wire path's timeouts and pool size, and the trace hook."""
        import httpx2

        t = provider.settings.timeouts
        timeout = httpx2.Timeout(connect=t.connect, read=t.read, write=t.read, pool=t.total)
        if self._factory is not None:
            client = self._factory(timeout=timeout)
        else:
            n = provider.pool_size
            proxy = proxy_for(provider.settings.resolved_base_url())  # loopback: never
            client = httpx2.AsyncClient(
                timeout=timeout,
                limits=httpx2.Limits(max_connections=n, max_keepalive_connections=n),
                proxy=proxy.url if proxy else None,
                trust_env=False,  # proxies decided above; the CA variables still read here:
                verify=httpx2.create_ssl_context(trust_env=True),
            )
        hooks = client.event_hooks
        client.event_hooks = {**hooks, "request": [*hooks["request"], _attach_trace]}
        return client

    def _sdk_client(self, provider: Provider) -> Any:
        client = self._clients.get(provider.id)
        if client is not None:
            return client
        base = provider.settings.resolved_base_url()
        key = provider.secrets()[0] if provider.secrets() else None
        if isinstance(provider, AnthropicProvider):
            import anthropic

            client = anthropic.AsyncAnthropic(
                api_key=key or "none",
                base_url=base.removesuffix("/v1"),
                max_retries=0,
                http_client=self._http_client(provider),
            )
        else:
            import openai

            # llama.cpp's base_url is the server root; the SDK wants the /v1 root.
            if provider.kind == "llamacpp":
                base += "/v1"
            client = openai.AsyncOpenAI(
                api_key=key or "none",
                base_url=base,
                max_retries=0,
                http_client=self._http_client(provider),
            )
        self._clients[provider.id] = client
        return client

    async def aclose(self, provider_id: str | None = None) -> None:
        """Close the SDK client of one provider, or of all."""
        ids = [provider_id] if provider_id is not None else list(self._clients)
        for pid in ids:
            client = self._clients.pop(pid, None)
            if client is not None:
                await client.close()

    async def record(
        self, provider: Provider, request: ChatRequest, ctx: RecordContext
    ) -> RequestRecord:
        """Send `request` through the SDK, read the whole stream, return the record.

        Per-request failures become records with ``error`` set. On cancellation the partial
        record goes to `on_cancelled` before `CancelledError` propagates.
        """
        clock = self._clock
        t_prepare = clock()
        params = provider.wire_params(provider.effective_params(request))
        client = self._sdk_client(provider)
        local_count = provider.count_input_locally(request)
        parser = provider.new_parser()
        redact = _redactor(provider)
        anthropic_path = isinstance(provider, AnthropicProvider)
        first_event_ns: int | None = None
        done = False
        first_text_ns: int | None = None
        phases: dict[str, int] = {}
        output_ns: list[int] = []
        end_ns: int | None = None
        feed_ns = 0
        error: RecordError | None = None
        cancelled = False

        measuring = _MEASURING.set((phases, clock))
        cpu_start = time.thread_time_ns()
        t_start = clock()
        started_at = datetime.now(UTC)
        try:
            async with asyncio.timeout(provider.settings.timeouts.total):
                if anthropic_path:
                    stream = await self._anthropic_create(client, provider, request, params)
                else:
                    stream = await self._openai_create(client, provider, request, params)
                phases.setdefault(_HEADERS_DONE, clock())
                try:
                    parser.on_headers(stream.response.headers)
                    async for item in stream:
                        t = clock()
                        kind = _feed(item, parser, item.type if anthropic_path else None)
                        feed_ns += clock() - t
                        if kind == EventClass.IGNORE:
                            continue
                        if kind == EventClass.DONE:
                            done = True
                            kind = EventClass.META
                        if first_event_ns is None:
                            first_event_ns = t
                        if kind >= EventClass.OUTPUT:
                            output_ns.append(t)
                            if kind == EventClass.TEXT and first_text_ns is None:
                                first_text_ns = t
                    end_ns = clock()
                finally:
                    await stream.close()
        except TimeoutError:
            error = RecordError(
                kind=ErrorKind.TIMEOUT,
                message=f"total timeout of {provider.settings.timeouts.total:g} s exceeded",
            )
        except asyncio.CancelledError:
            cancelled = True
            error = RecordError(kind=ErrorKind.CANCELLED, message="request cancelled")
        except Exception as exc:  # the SDKs' own exception trees, mapped by name
            error = _sdk_error(exc, parser, redact)
        finally:
            _MEASURING.reset(measuring)
        cpu_ns = time.thread_time_ns() - cpu_start - feed_ns
        # The openai SDK swallows `[DONE]`: a stream that ended without a finish reason was
        # cut short (Anthropic's SDK yields `message_stop`, the parser's DONE).
        return self._finish(
            provider=provider,
            request=request,
            ctx=ctx,
            params=params,
            parser=parser,
            local_count=local_count,
            redact=redact,
            error=error,
            cancelled=cancelled,
            complete=done or parser.stop_reason_raw is not None,
            truncated="stream ended without a finish reason (truncated)",
            t_prepare=t_prepare,
            t_start=t_start,
            started_at=started_at,
            phases=phases,
            first_event_ns=first_event_ns,
            first_text_ns=first_text_ns,
            output_ns=output_ns,
            end_ns=end_ns,
            app=AppTimings(cpu_ms=cpu_ns / 1e6, client_path="sdk"),
        )

    @staticmethod
    async def _openai_create(
        client: Any, provider: Provider, request: ChatRequest, params: dict[str, Any]
    ) -> Any:
        close = request.fresh_connection or provider.kind == "llamacpp"
        extra_headers = {"connection": "close"} if close else None
        return await client.chat.completions.create(
            model=provider.model,
            messages=request.messages,
            stream=True,
            stream_options={"include_usage": True},
            extra_body={**provider.settings.extra_body, **params} or None,
            extra_headers=extra_headers,
        )

    @staticmethod
    async def _anthropic_create(
        client: Any, provider: Provider, request: ChatRequest, params: dict[str, Any]
    ) -> Any:
        system = "\n\n".join(m["content"] for m in request.messages if m["role"] == "system")
        messages = [m for m in request.messages if m["role"] != "system"]
        body = dict(params)
        max_tokens = body.pop("max_tokens")
        kwargs: dict[str, Any] = {}
        if system:
            kwargs["system"] = system
        if request.fresh_connection:
            kwargs["extra_headers"] = {"connection": "close"}
        # anthropic 2.x takes sampling parameters only as body fields.
        return await client.messages.create(
            model=provider.model,
            messages=messages,
            max_tokens=max_tokens,
            stream=True,
            extra_body={**provider.settings.extra_body, **body} or None,
            **kwargs,
        )


def _feed(item: Any, parser: StreamParser, event_name: str | None) -> int:
    """Classify one object the SDK yielded with the wire parser's own rules.

    The object goes back to the JSON it came from (fields as received, extras such as
    llama.cpp's `timings` included), so both paths read a stream the same way. This runs
    after the object's stamp was taken.
    """
    data = json.dumps(item.model_dump(mode="json", exclude_unset=True))
    return parser.on_event(SSEEvent(event_name, data, 0))


def _sdk_error(exc: Exception, parser: StreamParser, redact: Callable[[str], str]) -> RecordError:
    """A `RecordError` for what the SDK raised, shaped like the wire path's where it can be.

    An HTTP error's response headers still reach the parser (request id, rate limits).
    """
    status = getattr(exc, "status_code", None)
    response = getattr(exc, "response", None)
    if status is not None and response is not None:
        parser.on_headers(response.headers)
        try:
            body = response.content
        except Exception:  # not read: the SDK's parsed body is what is left
            body = str(getattr(exc, "body", "")).encode()
        return http_error(int(status), response.headers, body, redact)
    name = type(exc).__name__
    message = _exc_message(exc, redact)
    cause = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)
    if cause is not None:
        # The SDKs wrap transport errors ("Connection error."): the cause says what happened.
        message = f"{message} ({_exc_message(cause, redact)})"[:300]
    if "Timeout" in name:
        return RecordError(kind=ErrorKind.TIMEOUT, message=message)
    if "Connection" in name or "Protocol" in name or "Network" in name:
        return RecordError(kind=ErrorKind.CONNECTION, message=message)
    return RecordError(kind=ErrorKind.PROTOCOL, message=message)
