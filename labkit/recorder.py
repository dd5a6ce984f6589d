"""The stream recorder: sends one streaming request and turns what it saw into a record.

It owns the clock. Connection phases come from httpx's ``trace`` extension; response bytes
are read as the transport delivers them, reassembled into SSE events (`labkit.sse`) and
stamped with `time.perf_counter_ns` when the read that brought each event's first byte
returned. The provider's parser only classifies events and collects fields; the recorder
derives every timing (`labkit.timing`). The thread's CPU clock is read at ``t_start`` and
at the end of the stream only (`app.cpu_ms`), never per event.

Failures are measurements too: an HTTP error, a timeout, a dropped connection, an error
event or a malformed stream becomes a record with ``error`` set and every timing it reached.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import json
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import httpx

from labkit.errors import MalformedStream
from labkit.providers.base import (
    ChatRequest,
    EventClass,
    Provider,
    ResponseHeaders,
    StreamParser,
    TokenCount,
)
from labkit.records import (
    AppTimings,
    ClientTimings,
    ErrorKind,
    RecordError,
    RequestRecord,
    StopReason,
)
from labkit.sse import SSEParser
from labkit.timing import derive_client_timings

__all__ = [
    "BaseRecorder",
    "LoopLagMonitor",
    "RecordContext",
    "StreamRecorder",
    "assemble_record",
    "http_error",
    "settle_counts_and_stop",
    "stream_error",
]

Clock = Callable[[], int]

_BODY_EXCERPT_CHARS = 500


@dataclass(slots=True)
class RecordContext:
    """Where a record belongs: run, experiment, trial, attempt and labels."""

    run_id: str
    experiment: str
    trial: int = 0
    attempt: int = 1
    warmup: bool = False
    tags: dict[str, str | int | float | bool] = field(default_factory=dict)
    queue_ms: float | None = None
    store_text: bool = True
    record_id: str | None = None


class LoopLagMonitor:
    """Samples how late the event loop runs, so each record can state labkit's own lag.

    Two probes, every `interval_s`, matching the two places a chunk can be stamped:

    - a plain timer callback (`loop.call_at`): its lateness is what delays an I/O callback,
      where the lean transport stamps each read (`labkit.lean`);
    - a task that sleeps: its oversleep adds the turn a woken task waits before it runs,
      which is where chunks read through httpx are stamped.

    A sample taken at `t` with lag `L` means the loop was held up over [t − L, t]. Both
    include asyncio's 1 ms timer granularity (epoll), so an idle loop shows up to ~1 ms.
    """

    def __init__(self, interval_s: float = 0.005, clock: Clock = time.perf_counter_ns) -> None:
        self.interval_s = interval_s
        self._clock = clock
        self._samples: deque[tuple[int, float]] = deque(maxlen=200_000)
        self._callback_samples: deque[tuple[int, float]] = deque(maxlen=200_000)
        self._task: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = None

    async def _run(self) -> None:
        interval_ms = self.interval_s * 1000.0
        while True:
            t0 = self._clock()
            await asyncio.sleep(self.interval_s)
            t1 = self._clock()
            self._samples.append((t1, max(0.0, (t1 - t0) / 1e6 - interval_ms)))

    def _tick(self, loop: asyncio.AbstractEventLoop, when: float) -> None:
        now = loop.time()
        self._callback_samples.append((self._clock(), max(0.0, (now - when) * 1000.0)))
        self._timer = loop.call_at(now + self.interval_s, self._tick, loop, now + self.interval_s)

    def start(self) -> None:
        """Start sampling on the running loop."""
        if self._task is None:
            loop = asyncio.get_running_loop()
            self._task = loop.create_task(self._run())
            when = loop.time() + self.interval_s
            self._timer = loop.call_at(when, self._tick, loop, when)

    async def stop(self) -> None:
        """Stop sampling."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def lag_ms(self, t0_ns: int, t1_ns: int, *, on_arrival: bool = False) -> float | None:
        """The 99th percentile of the lags whose late stretch overlaps [t0_ns, t1_ns] (the
        largest, under 100 samples); None without one.

        A percentile, not the maximum, so a long stream is not judged by its single worst
        scheduling hiccup. `on_arrival`: the stream was stamped in I/O callbacks (the lean
        transport), so the timer-callback probe applies. A hold-up that began after the
        stream ended (other streams' records being written, say) did not delay its stamps
        and is not counted.
        """
        lags: list[float] = []
        samples = self._callback_samples if on_arrival else self._samples
        for t, lag in reversed(samples):
            if t < t0_ns:
                break
            if t - lag * 1e6 <= t1_ns:
                lags.append(lag)
        if not lags:
            return None
        lags.sort()
        return lags[min(len(lags) - 1, int(0.99 * len(lags)))]


def _retry_after_s(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def _error_message_from_body(body: str) -> str | None:
    try:
        obj = json.loads(body)
    except ValueError:
        return None
    if isinstance(obj, dict):
        err = obj.get("error", obj)
        if isinstance(err, dict):
            msg = err.get("message")
            etype = err.get("type")
            if isinstance(msg, str):
                return f"{etype}: {msg}" if isinstance(etype, str) else msg
        elif isinstance(err, str):
            return err
    return None


def http_error(
    status: int, headers: ResponseHeaders, body: bytes, redact: Callable[[str], str]
) -> RecordError:
    """A `RecordError` for an HTTP error response (status >= 400)."""
    text = redact(body.decode("utf-8", errors="replace"))
    detail = _error_message_from_body(text)
    message = f"HTTP {status}" + (f": {detail}" if detail else "")
    return RecordError(
        kind=ErrorKind.HTTP_STATUS,
        message=message[:300],
        status=status,
        retry_after_s=_retry_after_s(headers.get("retry-after")),
        body_excerpt=text[:_BODY_EXCERPT_CHARS] or None,
    )


class BaseRecorder:
    """What the wire and SDK recorders share: the clock, the loop-lag self-check, the
    cancellation hook, and turning what a measurement saw into its record (`_finish`)."""

    def __init__(
        self,
        *,
        clock: Clock = time.perf_counter_ns,
        lag_monitor: LoopLagMonitor | None = None,
        on_cancelled: Callable[[RequestRecord], None] | None = None,
    ) -> None:
        self._clock = clock
        self._lag = lag_monitor
        self._on_cancelled = on_cancelled

    def _finish(
        self,
        *,
        provider: Provider,
        request: ChatRequest,
        ctx: RecordContext,
        params: dict[str, Any],
        parser: StreamParser,
        local_count: TokenCount | None,
        redact: Callable[[str], str],
        error: RecordError | None,
        cancelled: bool,
        complete: bool,
        truncated: str,
        t_prepare: int,
        t_start: int,
        started_at: datetime,
        phases: dict[str, int],
        first_event_ns: int | None,
        first_text_ns: int | None,
        output_ns: list[int],
        end_ns: int | None,
        app: AppTimings,
        on_arrival: bool = False,
        tags: dict[str, str | int | float | bool] | None = None,
    ) -> RequestRecord:
        """The record of one measurement; on cancellation it goes to `on_cancelled` and
        `CancelledError` is raised.

        `complete`: the stream's own end was seen; without it an error-free stream is
        recorded as truncated (`truncated` says how), or as empty if no event came.
        """
        error = error or stream_error(parser, redact)
        if error is None and not complete:
            error = RecordError(
                kind=ErrorKind.PROTOCOL,
                message="empty response body" if first_event_ns is None else truncated,
            )
        usage = parser.usage
        if local_count is not None:
            usage.input_tokens_local = local_count.tokens
            usage.tokenizer = local_count.source
        stop = settle_counts_and_stop(provider, parser, len(output_ns), error)
        usage.streamed_output_tokens = parser.streamed_output_tokens(len(output_ns))
        end = end_ns or self._clock()
        lag = self._lag.lag_ms(t_start, end, on_arrival=on_arrival) if self._lag else None
        app.prepare_ms = (t_start - t_prepare) / 1e6
        record = assemble_record(
            provider=provider,
            request=request,
            ctx=ctx,
            params=params,
            parser=parser,
            started_at=started_at,
            t_start_ns=t_start,
            client=derive_client_timings(
                t_start_ns=t_start,
                phases_ns=phases,
                first_event_ns=first_event_ns,
                output_event_ns=output_ns,
                first_text_ns=first_text_ns,
                end_ns=end_ns,
                output_tokens=usage.streamed_output_tokens,
                queue_ms=ctx.queue_ms,
                loop_lag_ms=lag,
            ),
            app=app,
            stop=stop,
            error=error,
        )
        if tags:
            record.tags.update(tags)
        if cancelled:
            if self._on_cancelled is not None:
                self._on_cancelled(record)
            raise asyncio.CancelledError
        return record


class StreamRecorder(BaseRecorder):
    """Measures streaming chat requests. One recorder serves a whole run."""

    async def record(
        self, provider: Provider, request: ChatRequest, ctx: RecordContext
    ) -> RequestRecord:
        """Send `request` to `provider`, read the whole stream, return the record.

        Per-request failures are returned as records with ``error`` set. On cancellation
        the partial record goes to `on_cancelled` before `CancelledError` propagates.
        """
        clock = self._clock
        t_prepare = clock()
        params = provider.wire_params(provider.effective_params(request))
        http_request = provider.build_request(request, params)
        if request.fresh_connection:
            http_request.headers["connection"] = "close"
        local_count = provider.count_input_locally(request)
        parser = provider.new_parser()
        phases: dict[str, int] = {}

        async def trace(name: str, info: dict[str, Any]) -> None:
            # The lean transport passes the stamp of the event itself (headers: their arrival).
            phases[name] = info.get("labkit_t_ns") or clock()

        http_request.extensions["trace"] = trace

        first_event_ns: int | None = None
        first_text_ns: int | None = None
        output_ns: list[int] = []
        end_ns: int | None = None
        parse_ns = 0
        done = False
        error: RecordError | None = None
        cancelled = False
        redact = _redactor(provider)

        stale_retry = False
        on_arrival = False
        client = provider.checkout()
        cpu_start = time.thread_time_ns()
        t_start = clock()
        started_at = datetime.now(UTC)
        try:
            async with asyncio.timeout(provider.settings.timeouts.total):
                try:
                    response = await client.send(http_request, stream=True)
                except httpx.RemoteProtocolError:
                    if not _stale_pooled_connection(phases):
                        raise
                    # A keep-alive connection the server closed in the moment it was reused
                    # (llama-server and others close after every stream): nothing was
                    # measured yet, so measure again from a fresh clock on a new connection.
                    phases.clear()
                    stale_retry = True
                    cpu_start = time.thread_time_ns()
                    t_start = clock()
                    started_at = datetime.now(UTC)
                    response = await client.send(http_request, stream=True)
                # Mock transports emit no trace events: fall back to when send() returned.
                phases.setdefault("http11.receive_response_headers.complete", clock())
                try:
                    parser.on_headers(response.headers)
                    if response.status_code >= 400:
                        body = await response.aread()
                        end_ns = clock()
                        error = http_error(response.status_code, response.headers, body, redact)
                    else:
                        sse = SSEParser()
                        feed = sse.feed
                        on_event = parser.on_event
                        # The lean transport stamps each read on arrival (labkit.lean); through
                        # httpx the stamp is when the read reaches this loop.
                        arrival = response.extensions.get("labkit.arrival")
                        on_arrival = arrival is not None
                        async for chunk in response.aiter_bytes():
                            t_read = clock()
                            t = t_read if arrival is None else arrival.t_ns
                            for ev in feed(chunk, t):
                                c = on_event(ev)
                                if c == EventClass.IGNORE:
                                    continue
                                if first_event_ns is None:
                                    first_event_ns = ev.t_ns
                                if c == EventClass.TEXT:
                                    output_ns.append(ev.t_ns)
                                    if first_text_ns is None:
                                        first_text_ns = ev.t_ns
                                elif c == EventClass.OUTPUT:
                                    output_ns.append(ev.t_ns)
                                elif c == EventClass.DONE:
                                    done = True
                            parse_ns += clock() - t_read
                        for ev in sse.close():
                            if parser.on_event(ev) == EventClass.DONE:
                                done = True
                        end_ns = clock()
                finally:
                    await response.aclose()
        except TimeoutError:
            error = RecordError(
                kind=ErrorKind.TIMEOUT,
                message=f"total timeout of {provider.settings.timeouts.total:g} s exceeded",
            )
        except httpx.TimeoutException as exc:
            error = RecordError(kind=ErrorKind.TIMEOUT, message=_exc_message(exc, redact))
        except (httpx.RemoteProtocolError, httpx.NetworkError) as exc:
            if first_event_ns is not None:
                where = "mid-stream"
            elif "http11.receive_response_headers.complete" in phases:
                where = "after the response headers"
            else:
                where = "before the response"
            error = RecordError(
                kind=ErrorKind.CONNECTION,
                message=f"connection lost {where}: {_exc_message(exc, redact)}",
            )
        except httpx.HTTPError as exc:
            error = RecordError(kind=ErrorKind.CONNECTION, message=_exc_message(exc, redact))
        except (MalformedStream, ValueError, KeyError, TypeError, AttributeError) as exc:
            # json/UTF-8 decoding and shape errors from a malformed event.
            error = RecordError(
                kind=ErrorKind.PROTOCOL, message=f"malformed stream event: {redact(str(exc))}"[:300]
            )
        except asyncio.CancelledError:
            cancelled = True
            error = RecordError(kind=ErrorKind.CANCELLED, message="request cancelled")
        finally:
            provider.checkin(client)
        cpu_ns = time.thread_time_ns() - cpu_start
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
            complete=done or parser.finished,
            truncated="stream ended without its terminator (truncated)",
            t_prepare=t_prepare,
            t_start=t_start,
            started_at=started_at,
            phases=phases,
            first_event_ns=first_event_ns,
            first_text_ns=first_text_ns,
            output_ns=output_ns,
            end_ns=end_ns,
            app=AppTimings(parse_cpu_ms=parse_ns / 1e6, cpu_ms=cpu_ns / 1e6, client_path="wire"),
            on_arrival=on_arrival,
            tags={"stale_connection_resent": True} if stale_retry else None,
        )


def stream_error(parser: StreamParser, redact: Callable[[str], str]) -> RecordError | None:
    """The error event the parser saw, if any, with secrets scrubbed from its text.

    An error event's message comes from the provider and may echo the key.
    """
    if parser.error is None:
        return None
    return parser.error.model_copy(update={"message": redact(parser.error.message)})


def settle_counts_and_stop(
    provider: Provider, parser: StreamParser, output_events: int, error: RecordError | None
) -> StopReason | None:
    """Mark where the output count came from (counting locally if the provider sent none)
    and return the stop reason (`error`/`cancelled` when the request failed)."""
    usage = parser.usage
    if usage.output_tokens is not None:
        usage.output_tokens_source = "provider"
    elif output_events:
        usage.output_tokens = provider.output_tokens_locally(parser, output_events).tokens
        usage.output_tokens_source = "local"
    if error is None:
        return parser.stop_reason()
    return StopReason.CANCELLED if error.kind == ErrorKind.CANCELLED else StopReason.ERROR


def assemble_record(
    *,
    provider: Provider,
    request: ChatRequest,
    ctx: RecordContext,
    params: dict[str, Any],
    parser: StreamParser,
    started_at: datetime,
    t_start_ns: int,
    client: ClientTimings,
    app: AppTimings,
    stop: StopReason | None,
    error: RecordError | None,
) -> RequestRecord:
    """One `RequestRecord` from what a recorder (wire or SDK path) measured and parsed."""
    prompt = request.prompt_text
    return RequestRecord(
        run_id=ctx.run_id,
        record_id=ctx.record_id or uuid.uuid4().hex,
        experiment=ctx.experiment,
        trial=ctx.trial,
        attempt=ctx.attempt,
        warmup=ctx.warmup,
        provider=provider.id,
        provider_kind=provider.kind,
        model=provider.model,
        params=params,
        prompt_id=request.prompt_id,
        prompt_chars=len(prompt),
        prompt_bytes=len(prompt.encode("utf-8")),
        started_at=started_at,
        t_start_mono_ns=t_start_ns,
        client=client,
        provider_timings=parser.provider_timings,
        app=app,
        usage=parser.usage,
        stop_reason=stop,
        stop_reason_raw=parser.stop_reason_raw,
        response_id=parser.response_id,
        request_id=parser.request_id,
        system_fingerprint=parser.system_fingerprint,
        server_build=provider.server_build,
        rate_limits=parser.rate_limits,
        tags=dict(ctx.tags),
        output_text=parser.output_text if ctx.store_text else None,
        error=error,
    )


def _stale_pooled_connection(phases: dict[str, int]) -> bool:
    """True when a send failed on a reused connection before any response byte."""
    return (
        "connection.connect_tcp.complete" not in phases
        and "http11.receive_response_headers.complete" not in phases
    )


def _exc_message(exc: BaseException, redact: Callable[[str], str]) -> str:
    text = str(exc) or type(exc).__name__
    return redact(f"{type(exc).__name__}: {text}")[:300]


def _redactor(provider: Provider) -> Callable[[str], str]:
    secrets = provider.secrets()

    def redact(text: str) -> str:
        for s in secrets:
            text = text.replace(s, "***")
        return text

    return redact
