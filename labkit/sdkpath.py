"""The SDK path: the same request sent through the official `openai` / `anthropic` SDK.

labkit normally reads the wire itself (`client_path = "wire"`). Sending a request through
the provider's own SDK instead (`client_path = "sdk"`) shows what the SDK costs: its HTTP
stack (`httpx2`), its SSE decoder and its pydantic models. Each event is stamped when the
SDK hands it to user code, with the same clock and the same derivation as the wire path, so
``sdk − wire`` of TTFT and decode is the SDK's overhead. The SDKs' retries are off.

What this path cannot see: connection phases (the SDKs take no per-request trace hook), so
those stay null; ``headers_ms`` is when the SDK's `create()` returned, which is after the
response headers arrived. This is the only module that imports `httpx2` and the SDKs.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from labkit.providers.anthropic import AnthropicProvider
from labkit.providers.base import ChatRequest, EventClass, Provider, StreamParser
from labkit.providers.openai import OpenAIProvider
from labkit.recorder import (
    Clock,
    RecordContext,
    _exc_message,
    _redactor,
    assemble_record,
    settle_counts_and_stop,
    stream_error,
)
from labkit.records import (
    AppTimings,
    ErrorKind,
    RecordError,
    RequestRecord,
)
from labkit.sse import SSEEvent
from labkit.timing import derive_client_timings

__all__ = ["SDKRecorder", "sdk_supported"]

HttpClientFactory = Callable[..., Any]


def sdk_supported(provider: Provider) -> bool:
    """Whether an official SDK can send this provider's requests."""
    return isinstance(provider, OpenAIProvider | AnthropicProvider) and provider.kind != "fake"


class SDKRecorder:
    """Measures streaming requests sent through the official SDKs."""

    def __init__(
        self,
        *,
        clock: Clock = time.perf_counter_ns,
        http_client_factory: HttpClientFactory | None = None,
    ) -> None:
        self._clock = clock
        self._factory = http_client_factory
        self._clients: dict[str, Any] = {}

    def _http_client(self, provider: Provider) -> Any:
        import httpx2

        t = provider.settings.timeouts
        timeout = httpx2.Timeout(connect=t.connect, read=t.read, write=t.read, pool=t.total)
        if self._factory is not None:
            return self._factory(timeout=timeout)
        return httpx2.AsyncClient(timeout=timeout)

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
        """Send `request` through the SDK; per-request failures become records with `error`."""
        clock = self._clock
        t_prepare = clock()
        params = provider.wire_params(provider.effective_params(request))
        client = self._sdk_client(provider)
        parser = provider.new_parser()
        redact = _redactor(provider)
        anthropic_path = isinstance(provider, AnthropicProvider)
        first_event_ns: int | None = None
        first_text_ns: int | None = None
        headers_ns: int | None = None
        output_ns: list[int] = []
        end_ns: int | None = None
        error: RecordError | None = None

        t_start = clock()
        started_at = datetime.now(UTC)
        try:
            async with asyncio.timeout(provider.settings.timeouts.total):
                if anthropic_path:
                    stream = await self._anthropic_create(client, provider, request, params)
                else:
                    stream = await self._openai_create(client, provider, request, params)
                headers_ns = clock()
                async for item in stream:
                    t = clock()
                    kind = _feed(item, parser, item.type if anthropic_path else None)
                    if kind == EventClass.IGNORE:
                        continue
                    if first_event_ns is None:
                        first_event_ns = t
                    if kind >= EventClass.OUTPUT:
                        output_ns.append(t)
                        if kind == EventClass.TEXT and first_text_ns is None:
                            first_text_ns = t
                end_ns = clock()
        except TimeoutError:
            error = RecordError(kind=ErrorKind.TIMEOUT, message="total timeout exceeded (SDK path)")
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the SDKs' own exception trees, mapped by name
            error = _sdk_error(exc, redact)
        error = error or stream_error(parser, redact)
        stop = settle_counts_and_stop(provider, parser, len(output_ns), error)
        return assemble_record(
            provider=provider,
            request=request,
            ctx=ctx,
            params=params,
            parser=parser,
            started_at=started_at,
            t_start_ns=t_start,
            client=derive_client_timings(
                t_start_ns=t_start,
                phases_ns={}
                if headers_ns is None
                else {"http11.receive_response_headers.complete": headers_ns},
                first_event_ns=first_event_ns,
                output_event_ns=output_ns,
                first_text_ns=first_text_ns,
                end_ns=end_ns,
                output_tokens=parser.usage.output_tokens,
                queue_ms=ctx.queue_ms,
            ),
            app=AppTimings(prepare_ms=(t_start - t_prepare) / 1e6, client_path="sdk"),
            stop=stop,
            error=error,
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
    cls = parser.on_event(SSEEvent(event_name, data, 0))
    return EventClass.META if cls == EventClass.DONE else cls


def _sdk_error(exc: Exception, redact: Callable[[str], str]) -> RecordError:
    name = type(exc).__name__
    status = getattr(exc, "status_code", None)
    if status is not None:
        body = getattr(exc, "body", None)
        return RecordError(
            kind=ErrorKind.HTTP_STATUS,
            message=redact(f"HTTP {status}: {exc}")[:300],
            status=int(status),
            body_excerpt=redact(str(body))[:500] if body is not None else None,
        )
    if "Timeout" in name:
        return RecordError(kind=ErrorKind.TIMEOUT, message=_exc_message(exc, redact))
    if "Connection" in name or "Protocol" in name or "Network" in name:
        return RecordError(kind=ErrorKind.CONNECTION, message=_exc_message(exc, redact))
    return RecordError(kind=ErrorKind.PROTOCOL, message=_exc_message(exc, redact))
