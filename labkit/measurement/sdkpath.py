"""The SDK path: the same request sent through the provider's official SDK.

Sending a request through the provider's own SDK (`client_path = "sdk"`) instead of reading
the wire (``"wire"``) shows what the SDK costs: its HTTP stack (`httpx2`), SSE decoder and
pydantic models. Each event is stamped when the SDK hands it to user code, with the same
clock, per-event step (`Measurement.event`) and record assembly as the wire path, so
``sdk − wire`` of TTFT and decode is the SDK's overhead; the SDKs' retries are off. The
provider's `SDKAdapter` (`Provider.sdk`) says what is the SDK's own; this module owns the
clock and is the only one that imports `httpx2`. See docs/measurement.md, "AppTimings".
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any, ClassVar, Literal

from labkit.measurement.failures import (
    connect_failure,
    exception_message,
    http_error,
    proxy_refused,
    tls_problem,
    undecodable_body,
)
from labkit.measurement.recorder import (
    BaseRecorder,
    Clock,
    Measurement,
    drain_after_terminator,
)
from labkit.providers.base import ChatRequest, Provider, SDKAdapter, StreamParser
from labkit.records import ErrorKind, RecordError, RequestRecord
from labkit.wire.proxies import proxy_for
from labkit.wire.setup import DRY_RUN_BODY, DRY_RUN_URL, import_network_backends
from labkit.wire.sse import SSEEvent

__all__ = ["SDKRecorder", "sdk_supported"]

HttpClientFactory = Callable[..., Any]

_HEADERS_DONE = "http11.receive_response_headers.complete"
_DRY_RUN_HOST = DRY_RUN_URL.partition("://")[2]

#: Top-level packages whose exceptions are the SDKs' and their HTTP stacks' own: those are
#: mapped onto the contract's error kinds; any other exception is labkit's (`internal`).
_SDK_PACKAGES = frozenset({"openai", "anthropic", "httpx2", "httpcore2", "h11", "anyio"})

#: Where the current task's measured stream hands the events the SDK consumes itself
#: (`SDKAdapter.consumed_by_sdk`): their SSE name and data.
_CONSUMED: ContextVar[Callable[[str | None, str], None] | None] = ContextVar(
    "labkit_sdk_consumed", default=None
)

#: The phase stamps of the request the current task is measuring, the clock to use and the
#: headers the measurement adds to the request (its trace context).
_MEASURING: ContextVar[tuple[dict[str, int], Clock, dict[str, str]] | None] = ContextVar(
    "labkit_sdk_measuring", default=None
)


async def _attach_trace(request: Any) -> None:
    """httpx2 request hook: trace the request that `SDKRecorder` is measuring; send the
    set-up's dry run to the in-process answer (`DRY_RUN_URL`) instead of the provider.

    It puts httpcore2's ``trace`` extension on the request, stamping
    ``connection.connect_tcp.complete``, ``http11.send_request_body.complete``,
    ``http11.receive_response_headers.complete`` and the rest, so connection phases are
    measured as on the wire path. Which request is measured is a context variable that
    `SDKRecorder._exchange` sets (`_MEASURING`): the SDK sends from the caller's task."""
    if DRY_RUN_BODY.get() is not None:
        request.url = request.url.copy_with(scheme="http", host=_DRY_RUN_HOST, port=None)
        return
    measuring = _MEASURING.get()
    if measuring is None:
        return
    phases, clock, headers = measuring
    if headers:
        request.headers.update(headers)

    async def trace(name: str, info: dict[str, Any]) -> None:
        phases[name] = clock()

    request.extensions["trace"] = trace


class _WatchedDecoder:
    """The SDK's SSE decoder, watched: each event it decodes that the SDK would consume
    itself (`SDKAdapter.consumed_by_sdk`) goes to the measured stream's parser first; an
    error event is then withheld from the SDK, which would raise on it and stop reading, so
    what follows it (a terminal ``response.failed``, the usage) is read as on the wire."""

    def __init__(self, inner: Any, adapter: SDKAdapter) -> None:
        self._inner = inner
        self._consumed_by_sdk = adapter.consumed_by_sdk

    async def aiter_bytes(self, iterator: Any) -> Any:
        """The SDK's events, less the error events labkit's parser took."""
        consumed = _CONSUMED.get()
        async for sse in self._inner.aiter_bytes(iterator):
            if consumed is not None:
                what = self._consumed_by_sdk(sse.event, sse.data)
                if what is not None:
                    consumed(sse.event, sse.data)
                    if what == "error":
                        continue
            yield sse

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def _watch_sse(client: Any, adapter: SDKAdapter) -> None:
    """Have every stream of `client` decode through a `_WatchedDecoder` (the SDKs build one
    decoder per stream with the client's `_make_sse_decoder`)."""
    make = getattr(client, "_make_sse_decoder", None)
    if make is not None:
        # Whatever the SDK passes on (anthropic 2.16 passes the request's options) goes to
        # its own maker.
        client._make_sse_decoder = lambda *args, **kwargs: _WatchedDecoder(
            make(*args, **kwargs), adapter
        )


def sdk_supported(provider: Provider) -> bool:
    """Whether an official SDK can send this provider's requests."""
    return provider.sdk is not None


class SDKRecorder(BaseRecorder):
    """Measures streaming requests sent through the providers' official SDKs.

    The HTTP client comes from the provider's `Connections` (`labkit.wire.connections`).
    Each object the SDK yields is read where it lies, off the model's attributes
    (`labkit.providers.sdk.model_view`, no serialisation), by the wire path's own parser core
    (the adapter's `reader`), so both paths count and classify alike; the raw response
    headers (request id, ``openai-processing-ms``, rate limits) go to the same parser."""

    client_path: ClassVar[Literal["wire", "sdk"]] = "sdk"

    def __init__(
        self,
        *,
        clock: Clock = time.perf_counter_ns,
        http_client_factory: HttpClientFactory | None = None,
        on_cancelled: Callable[[RequestRecord], None] | None = None,
    ) -> None:
        super().__init__(clock=clock, on_cancelled=on_cancelled)
        self._factory = http_client_factory
        self._clients: dict[str, Any] = {}

    def _http_client(self, provider: Provider) -> Any:
        """The SDK's HTTP client (`Connections.sdk_http_client`), with the trace hook."""
        client = provider.connections.sdk_http_client(self._factory)
        hooks = client.event_hooks
        client.event_hooks = {**hooks, "request": [*hooks["request"], _attach_trace]}
        return client

    def _sdk_client(self, provider: Provider, adapter: SDKAdapter) -> Any:
        client = self._clients.get(provider.id)
        if client is None:
            secrets = provider.secrets()
            client = adapter.client(
                provider,
                api_key=secrets[0] if secrets else None,
                http_client=self._http_client(provider),
            )
            _watch_sse(client, adapter)
            self._clients[provider.id] = client
        return client

    async def _set_up(self, provider: Provider) -> None:
        """The SDK client built, and one dry run of it — the same request as a measured one,
        answered in-process with the adapter's `dry_run_stream` (`labkit.wire.setup`)
        and read as a measured one is — so the SDK's imports, platform detection, stream and
        event models are set up before any clock."""
        import_network_backends()
        adapter = provider.sdk
        if adapter is None:
            return
        client = self._sdk_client(provider, adapter)
        if self._factory is not None:
            return  # a transport of the caller's: no in-process answer to send the dry run to
        request = ChatRequest(messages=[{"role": "user", "content": "labkit set-up"}])
        params = provider.wire_params(provider.effective_params(request))
        read = adapter.reader(provider.new_parser())
        dry_run = DRY_RUN_BODY.set(adapter.dry_run_stream)
        try:
            stream = await adapter.open_stream(client, provider, request, params)
            try:
                async for item in stream:
                    read(item)
            finally:
                await stream.close()
        finally:
            DRY_RUN_BODY.reset(dry_run)

    async def aclose(self, provider_id: str | None = None) -> None:
        """Close the SDK client of one provider, or of all."""
        ids = [provider_id] if provider_id is not None else list(self._clients)
        for pid in ids:
            client = self._clients.pop(pid, None)
            if client is not None:
                await client.close()

    async def _exchange(
        self,
        provider: Provider,
        request: ChatRequest,
        parser: StreamParser,
        m: Measurement,
        redact: Callable[[str], str],
    ) -> None:
        adapter = provider.sdk
        if adapter is None:
            raise _NoSDK(f"provider {provider.id!r} ({provider.kind}) has no official SDK")
        clock = self._clock
        client = self._sdk_client(provider, adapter)
        if self._factory is None:
            proxy = proxy_for(provider.settings.resolved_base_url())
            m.via_proxy = proxy.describe() if proxy else None
        stamp = m.event
        on_event = parser.on_event
        # The stream's end: when its terminator was decoded (`[DONE]`, which the SDK
        # swallows, or the item that ends it), never after the SDK drained and closed the body.
        terminator_ns: int | None = None

        def consumed(event: str | None, data: str) -> None:
            nonlocal terminator_ns
            t = clock()
            stamp(on_event(SSEEvent(event, data, t)), t)
            if terminator_ns is None and (m.done or parser.ended):
                terminator_ns = t

        measuring = _MEASURING.set((m.phases, clock, m.headers))
        watching = _CONSUMED.set(consumed)
        try:
            m.begin(clock)
            async with asyncio.timeout(provider.settings.timeouts.total):
                stream = await adapter.open_stream(client, provider, request, m.params)
                m.phases.setdefault(_HEADERS_DONE, clock())
                try:
                    parser.on_headers(stream.response.headers)
                    m.read_server_request_id(stream.response.headers)
                    headers, status = stream.response.headers, stream.response.status_code
                    if undecodable := undecodable_body(status, headers, _decodable()):
                        m.end_ns = clock()
                        m.error = undecodable
                        return
                    late = m.stamped_in_user_space(getattr(stream.response, "extensions", {}))
                    read = adapter.reader(parser)
                    async for item in stream:
                        t = clock()
                        if late is not None:
                            late(t)
                        stamp(read(item), t)
                        if m.done or parser.ended:
                            if terminator_ns is None:
                                terminator_ns = t
                            break  # the terminator (`message_stop`, `response.completed`)
                    m.end_ns = clock() if terminator_ns is None else terminator_ns
                    if m.done or parser.ended:
                        await drain_after_terminator(aiter(stream))
                finally:
                    await stream.close()
        finally:
            _CONSUMED.reset(watching)
            _MEASURING.reset(measuring)

    def _transport_error(
        self,
        exc: Exception,
        m: Measurement,
        parser: StreamParser | None,
        redact: Callable[[str], str],
    ) -> RecordError | None:
        """The SDKs' own exception trees, mapped onto the wire path's error kinds.

        An HTTP error's response headers still reach the parser (request id, rate limits).
        """
        if isinstance(exc, _NoSDK):
            return RecordError(kind=ErrorKind.CONFIG, message=str(exc))
        if type(exc).__module__.partition(".")[0] not in _SDK_PACKAGES:
            return None
        status = getattr(exc, "status_code", None)
        response = getattr(exc, "response", None)
        body = getattr(exc, "body", None)
        if (status is not None and status < 400) or (status is None and body is not None):
            # An error event inside a 200 stream: the openai SDK raises a bare `APIError`
            # with the event's `error` object, the anthropic SDK a status error with 200.
            return RecordError(
                kind=ErrorKind.STREAM_ERROR,
                message=redact(f"error event in stream: {_event_error_text(exc, body)}")[:300],
            )
        if status is not None and response is not None:
            if parser is not None:
                parser.on_headers(response.headers)
            m.read_server_request_id(response.headers)
            try:
                body = response.content
            except Exception:  # not read: the SDK's parsed body is what is left
                body = str(getattr(exc, "body", "")).encode()
            return proxy_refused(
                http_error(int(status), response.headers, body, redact), m.via_proxy
            )
        name = type(exc).__name__
        message = exception_message(exc, redact)
        cause = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)
        if cause is not None:
            # The SDKs wrap transport errors ("Connection error."): the cause says what happened.
            message = f"{message} ({exception_message(cause, redact)})"[:300]
        if _HEADERS_DONE not in m.phases and (tls := tls_problem(exc, m.phases)):
            kind = ErrorKind.TIMEOUT if "Timeout" in name else ErrorKind.CONNECTION
            return RecordError(kind=kind, message=f"{tls} ({message})"[:300])
        if "Timeout" in name:
            return RecordError(kind=ErrorKind.TIMEOUT, message=message)
        said = None if m.via_proxy else connect_failure(exc, redact)
        if "Connection" in name and said:
            # The SDKs say "Connection error."; what the connect met is in its cause.
            return RecordError(kind=ErrorKind.CONNECTION, message=said)
        if "Connection" in name or "Protocol" in name or "Network" in name:
            if m.via_proxy:
                message = f"{message} (through {m.via_proxy})"[:300]
            return RecordError(kind=ErrorKind.CONNECTION, message=message)
        return RecordError(kind=ErrorKind.PROTOCOL, message=message)


def _event_error_text(exc: Exception, body: Any) -> str:
    """`type: message` of an in-stream error event, as the wire parsers word it."""
    err = body.get("error", body) if isinstance(body, dict) else None
    if isinstance(err, dict):
        etype = err.get("type") or err.get("code")
        message = err.get("message")
        if message:
            return f"{etype}: {message}" if etype else str(message)
    return f"{type(exc).__name__}: {exc}"


def _decodable() -> frozenset[str]:
    """The Content-Encodings the SDK's HTTP stack (httpx2) decodes in this install."""
    from httpx2._decoders import SUPPORTED_DECODERS

    return frozenset(SUPPORTED_DECODERS)


class _NoSDK(Exception):
    """A request routed to the SDK path on a provider that has none."""
