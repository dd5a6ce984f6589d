"""The stream recorder: sends one streaming request and turns what it saw into a record.

It owns the clock. Connection phases come from httpx's ``trace`` extension; response bytes
are read as the transport delivers them, reassembled into SSE events (`labkit.wire.sse`) and
stamped with `time.perf_counter_ns` when the read that brought each event's first byte
returned. The provider's parser only classifies events and collects fields; the recorder
derives every timing (`labkit.timing`). The thread's CPU clock is read at ``t_start`` and
at the end of the stream only (`app.cpu_ms`), never per event. Failures are measurements
too, isolated in one place: each request ends as exactly one record (`BaseRecorder.record`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, ClassVar, Literal

import httpx
from httpx._decoders import SUPPORTED_DECODERS

from labkit.errors import MalformedStream
from labkit.measurement.failures import (
    REQUEST_INVALID,
    connect_failure,
    error_for,
    exception_message,
    http_error,
    internal_error,
    looks_like_a_document,
    no_parser_no_error,
    not_a_stream,
    proxy_refused,
    redactor,
    redirect_error,
    sole_cause,
    stream_error,
    tls_problem,
    undecodable_body,
)
from labkit.measurement.lateness import KernelReads, self_check_fields
from labkit.providers.base import (
    ChatRequest,
    EventClass,
    Provider,
    StreamParser,
    TokenCount,
)
from labkit.records import (
    AppTimings,
    ClientTimings,
    DecodeNullReason,
    ErrorKind,
    RecordError,
    RecordToolCall,
    RequestRecord,
    RequestTrace,
    StopReason,
    new_record_id,
    validated,
)
from labkit.timing import derive_client_timings
from labkit.wire.loopclock import LatenessTracker, loop_clock, socket_fd
from labkit.wire.readpath import common_push, common_reader
from labkit.wire.sse import SSEParser
from labkit.wire.turns import take_start_turn, take_turn

__all__ = [
    "DRAIN_AFTER_TERMINATOR_S",
    "EMPTY_STREAM_MESSAGE",
    "ERROR_BODY_CAP",
    "BaseRecorder",
    "Measurement",
    "RecordContext",
    "StreamRecorder",
    "add_headers",
    "assemble_record",
    "drain_after_terminator",
    "settle_counts_and_stop",
]

Clock = Callable[[], int]

#: At most this much of an error body (or of a reply that is no stream) is read: enough for
#: the provider's message, never a whole 300 MB page held in memory.
ERROR_BODY_CAP = 64 * 1024
_HEADERS_DONE = "http11.receive_response_headers.complete"
#: The Content-Encodings httpx decodes here, on either transport (gzip, deflate; br and zstd
#: with their packages): a body in any other is named, not read as an empty stream.
_DECODABLE = frozenset(SUPPORTED_DECODERS)


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
    #: The plan's key for this request (`PlannedRequest.key`), on every record it makes,
    #: the partial one of a cancelled request too (a resume tells what was done by it).
    plan_key: str | None = None
    #: The request's trace context (`labkit.tracing.context`) and the headers that carry it,
    #: made before the clock starts; the recorder adds them to the request on either path.
    trace: RequestTrace | None = None
    trace_headers: dict[str, str] = field(default_factory=dict)


async def _read_capped(chunks: AsyncIterator[bytes], cap: int, start: bytes = b"") -> bytes:
    """Up to `cap` bytes from `chunks`; the rest is left unread (the connection is closed)."""
    parts = [start]
    size = len(start)
    if size < cap:
        async for chunk in chunks:
            parts.append(chunk)
            size += len(chunk)
            if size >= cap:
                break
    return b"".join(parts)[:cap]


@dataclass(slots=True)
class Measurement:
    """Everything one request's measurement saw, on one clock: what both recorders fill and
    hand to `BaseRecorder._finish`, which turns it into the record."""

    t_prepare: int
    t_start: int = 0
    started: bool = False
    started_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    params: dict[str, Any] = field(default_factory=dict)
    local_count: TokenCount | None = None
    phases: dict[str, int] = field(default_factory=dict)
    first_event_ns: int | None = None
    first_text_ns: int | None = None
    output_ns: list[int] = field(default_factory=list)
    end_ns: int | None = None
    done: bool = False
    error: RecordError | None = None
    cancelled: bool = False
    #: Where the stamps come from (`ClientTimings.stamp_source`) and, for user stamps, which
    #: report each read came from (`labkit.wire.loopclock`); on the lean transport each
    #: read's stamp, when labkit saw it and whether the kernel stamped it (`kernel_reads`).
    stamp_source: Literal["kernel", "user"] | None = None
    lateness: LatenessTracker | None = None
    # Three flat lists, not a tuple a read: a tuple is an object the cyclic collector tracks,
    # and one per read kept for the stream's life made most of a level's young collections.
    read_stamps: list[int] | None = None
    read_seen: list[int] = field(default_factory=list)
    read_kernel: list[bool] = field(default_factory=list)
    read_windows: dict[int, tuple[int, int, bool]] | None = None
    cpu_start_ns: int = 0
    parse_ns: int | None = None
    #: How long the connection opened for this request before `t_start` took (warm levels).
    connect_ahead_ns: int | None = None
    #: The proxy the request went through, for connection errors (`proxy host:port (from VAR)`).
    via_proxy: str | None = None
    tags: dict[str, str | int | float | bool] = field(default_factory=dict)
    #: Headers added to the request (the trace context: `RecordContext.trace_headers`) and
    #: the request id the server answered with (`x-request-id`, `request-id`).
    headers: dict[str, str] = field(default_factory=dict)
    server_request_id: str | None = None

    def begin(self, clock: Clock) -> None:
        """Start (or restart) the clock: `t_start`, the wall clock and the CPU clock.
        `t_start` is read last: what follows it at once is the request's write."""
        self.started = True
        self.started_at = datetime.now(UTC)
        self.cpu_start_ns = time.thread_time_ns()
        self.t_start = clock()

    def stamped_in_user_space(self, extensions: Mapping[str, Any]) -> Callable[[int], None] | None:
        """Note that this stream is stamped when its reads reach labkit's code; returns the
        per-read step of the lateness estimate (`labkit.wire.loopclock`) for the
        response with these `extensions`, or None where there is none (another loop, no socket)."""
        self.stamp_source = "user"
        selector = loop_clock()
        fd = socket_fd(extensions) if selector is not None else None
        if selector is None or fd is None:
            return None
        self.lateness = LatenessTracker(selector, fd)
        return self.lateness.note

    def event(self, cls: int, t_ns: int) -> None:
        """Stamp one classified event: the per-event step both recorders share."""
        if cls == EventClass.IGNORE:
            return
        if self.first_event_ns is None:
            self.first_event_ns = t_ns
        if cls == EventClass.TEXT:
            self.output_ns.append(t_ns)
            if self.first_text_ns is None:
                self.first_text_ns = t_ns
        elif cls == EventClass.OUTPUT:
            self.output_ns.append(t_ns)
        elif cls == EventClass.DONE:
            self.done = True

    def kernel_reads(self) -> KernelReads | None:
        """Each read's stamp, seen time and whether the kernel stamped it, on the lean
        transport (the lists themselves); None elsewhere."""
        if self.read_stamps is None:
            return None
        return KernelReads(self.read_stamps, self.read_seen, self.read_kernel)

    def read_server_request_id(self, headers: Mapping[str, str]) -> None:
        """Keep the request id the server answered with, whatever its parser reads."""
        self.server_request_id = headers.get("x-request-id") or headers.get("request-id")


class BaseRecorder:
    """What the wire and SDK recorders share: the clock, the stamp self-check, the
    cancellation hook, failure isolation (`record`) and turning a `Measurement` into its
    record (`_finish`). A subclass implements `_exchange` (send, read, stamp) and maps its
    own transport's exceptions in `_transport_error`."""

    client_path: ClassVar[Literal["wire", "sdk"]] = "wire"
    #: The error of a stream that stopped without its end (no terminator, no stop reason).
    truncated_message: ClassVar[str] = "stream ended without its terminator (truncated)"

    def __init__(
        self,
        *,
        clock: Clock = time.perf_counter_ns,
        on_cancelled: Callable[[RequestRecord], None] | None = None,
    ) -> None:
        self._clock = clock
        self._on_cancelled = on_cancelled
        #: The providers set up on this path, by `id`, each with when its set-up ended.
        self._set_up_for: dict[int, tuple[Provider, int]] = {}

    async def set_up(self, provider: Provider) -> None:
        """Do this path's one-off set-up for `provider` now, once (`labkit.wire.setup`):
        `record` calls it before its first request's clock starts, the runner and each
        executor's workers before a level's, so that no set-up of labkit's falls inside a
        measured interval, warm-up or not. Best effort: what fails here the first request
        pays as before."""
        if id(provider) in self._set_up_for:
            return
        with contextlib.suppress(Exception):
            await self._set_up(provider)
        self._set_up_for[id(provider)] = (provider, time.perf_counter_ns())

    def set_up_done_ns(self, provider: Provider) -> int | None:
        """When `provider`'s set-up on this path ended (`time.perf_counter_ns`, the clock of
        ``t_start_mono_ns``); None before it."""
        done = self._set_up_for.get(id(provider))
        return None if done is None else done[1]

    async def _set_up(self, provider: Provider) -> None:
        """This path's set-up for `provider` (`set_up`)."""
        provider.connections.set_up()

    async def record(
        self, provider: Provider, request: ChatRequest, ctx: RecordContext
    ) -> RequestRecord:
        """Send `request` to `provider`, read the whole stream, return its one record.

        Every per-request failure is returned as a record with ``error`` set; nothing a
        request does escapes but cancellation, whose partial record goes to `on_cancelled`
        before `CancelledError` propagates. Whatever a request's bytes, headers or values
        are: an HTTP error, a timeout, a dropped connection, an error event, a malformed
        stream or a reply that is no stream becomes a record with every timing it reached; a
        request that cannot be built is ``error.kind = config``; any other exception is
        labkit's own bug, ``error.kind = internal`` with its type, never disguised as a
        protocol error.
        """
        cancelled_in_set_up = False
        if id(provider) not in self._set_up_for:
            try:
                await self.set_up(provider)
            except asyncio.CancelledError:
                cancelled_in_set_up = True
        if not cancelled_in_set_up:
            try:
                await take_start_turn()  # one start per loop iteration (see turns)
            except asyncio.CancelledError:
                cancelled_in_set_up = True
        m = Measurement(t_prepare=self._clock())
        m.headers = ctx.trace_headers
        parser: StreamParser | None = None
        redact = redactor(provider)
        try:
            if cancelled_in_set_up:
                raise asyncio.CancelledError
            parser = provider.new_parser()
            if request.top_logprobs is not None:
                parser.want_logprobs(request.top_logprobs)
            if request.event_detail:
                parser.want_event_detail()
            m.params = provider.wire_params(provider.effective_params(request))
            m.local_count = provider.count_input_locally(request)
            await self._exchange(provider, request, parser, m, redact)
        except asyncio.CancelledError:
            m.cancelled = True
            m.error = RecordError(kind=ErrorKind.CANCELLED, message="request cancelled")
        except TimeoutError:
            total = provider.settings.timeouts.total
            m.error = RecordError(
                kind=ErrorKind.TIMEOUT, message=f"total timeout of {total:g} s exceeded"
            )
        except Exception as exc:
            exc = sole_cause(exc)
            m.error = self._transport_error(exc, m, parser, redact) or error_for(exc, redact)
        if not m.started:
            m.begin(self._clock)  # failed before sending: a zero-length measurement
        cpu_ns = time.thread_time_ns() - m.cpu_start_ns
        app = validated(
            AppTimings,
            {
                "parse_cpu_ms": None if m.parse_ns is None else m.parse_ns / 1e6,
                "cpu_ms": cpu_ns / 1e6,
                "client_path": self.client_path,
            },
        )
        interrupted = False  # cancelled after the stream was read: a whole record all the same
        if not m.cancelled:
            try:
                await take_turn()  # assemble records one per loop iteration (see turns)
            except asyncio.CancelledError:
                interrupted = True
        try:
            record = self._finish(provider, request, ctx, parser, m, redact, app)
        except Exception as exc:  # labkit's own bug in record assembly: still one record
            record = self._bare_record(provider, request, ctx, m, internal_error(exc, redact), app)
        if m.cancelled or interrupted:
            if self._on_cancelled is not None:
                # A failing write is the run folder's to report; the cancellation must go on.
                with contextlib.suppress(Exception):
                    self._on_cancelled(record)
            raise asyncio.CancelledError
        return record

    async def _exchange(
        self,
        provider: Provider,
        request: ChatRequest,
        parser: StreamParser,
        m: Measurement,
        redact: Callable[[str], str],
    ) -> None:
        """Send the request and read its stream into `m` (call `m.begin` at t_start)."""
        raise NotImplementedError

    def _transport_error(
        self,
        exc: Exception,
        m: Measurement,
        parser: StreamParser | None,
        redact: Callable[[str], str],
    ) -> RecordError | None:
        """This path's reading of an exception from its HTTP stack (None: not one of its)."""
        return None

    def _finish(
        self,
        provider: Provider,
        request: ChatRequest,
        ctx: RecordContext,
        parser: StreamParser | None,
        m: Measurement,
        redact: Callable[[str], str],
        app: AppTimings,
    ) -> RequestRecord:
        """The record of one measurement.

        A stream whose end was seen (its terminator, or a stop reason where the server may
        omit the terminator: `StreamParser.finished`) is complete; without it an error-free
        stream is recorded as truncated, or as empty if no event came.
        """
        if parser is None:  # new_parser itself failed: m.error says how
            return self._bare_record(
                provider, request, ctx, m, m.error or no_parser_no_error(), app
            )
        parser.settle()
        error = m.error or stream_error(parser, redact)
        if error is None and not (m.done or parser.finished):
            error = RecordError(
                kind=ErrorKind.PROTOCOL,
                message="empty response body"
                if m.first_event_ns is None
                else self.truncated_message,
            )
        elif error is None and not m.output_ns and _answered_nothing(parser):
            error = RecordError(kind=ErrorKind.PROTOCOL, message=EMPTY_STREAM_MESSAGE)
        usage = parser.usage
        if m.local_count is not None:
            usage.input_tokens_local = m.local_count.tokens
            usage.tokenizer = m.local_count.source
            usage.input_tokens_local_diff = m.local_count.unexplained(usage.input_tokens)
        stop = settle_counts_and_stop(provider, parser, len(m.output_ns), error)
        usage.streamed_output_tokens = parser.streamed_output_tokens(len(m.output_ns))
        app.prepare_ms = (m.t_start - m.t_prepare - (m.connect_ahead_ns or 0)) / 1e6
        return assemble_record(
            provider=provider,
            request=request,
            ctx=ctx,
            m=m,
            client=self._client_timings(m, ctx, usage.streamed_output_tokens),
            app=app,
            stop=stop,
            error=error,
            parser=parser,
        )

    def _client_timings(
        self,
        m: Measurement,
        ctx: RecordContext,
        decode_tokens: int | None,
        uncounted: DecodeNullReason = "hidden_output",
    ) -> ClientTimings:
        self_check = (
            self_check_fields(
                m.stamp_source, m.output_ns, m.lateness, m.kernel_reads(), m.read_windows
            )
            if m.output_ns and m.stamp_source is not None
            else None
        )
        timings = derive_client_timings(
            t_start_ns=m.t_start,
            phases_ns=m.phases,
            first_event_ns=m.first_event_ns,
            output_event_ns=m.output_ns,
            first_text_ns=m.first_text_ns,
            end_ns=m.end_ns,
            output_tokens=decode_tokens,
            queue_ms=ctx.queue_ms,
            connect_ahead_ns=m.connect_ahead_ns,
            uncounted=uncounted,
            self_check=self_check,
        )
        return timings

    def _bare_record(
        self,
        provider: Provider,
        request: ChatRequest,
        ctx: RecordContext,
        m: Measurement,
        error: RecordError,
        app: AppTimings,
    ) -> RequestRecord:
        """The record of a measurement that could not be assembled from its parser: its
        timings and `error`, without anything the parser collected."""
        return assemble_record(
            provider=provider,
            request=request,
            ctx=ctx,
            m=m,
            client=self._client_timings(m, ctx, None, "not_read"),
            app=app,
            stop=StopReason.CANCELLED if m.cancelled else StopReason.ERROR,
            error=error,
        )


class StreamRecorder(BaseRecorder):
    """Measures streaming chat requests on labkit's own HTTP. One recorder serves a run."""

    async def _exchange(
        self,
        provider: Provider,
        request: ChatRequest,
        parser: StreamParser,
        m: Measurement,
        redact: Callable[[str], str],
    ) -> None:
        clock = self._clock
        http_request = provider.build_request(request, m.params)
        if request.route is not None:  # a vantage's route: its own address, the same Host
            host, port = request.route
            http_request.url = http_request.url.copy_with(host=host, port=port)
        if provider.closes_connection(request):
            http_request.headers["connection"] = "close"
        if m.headers:
            add_headers(http_request.headers, m.headers)
        phases = m.phases
        proxy = provider.connections.proxy
        m.via_proxy = proxy.describe() if proxy is not None else None

        async def trace(name: str, info: dict[str, Any]) -> None:
            # The lean transport passes the stamp of the event itself (headers: their arrival).
            phases[name] = info.get("labkit_t_ns") or clock()

        http_request.extensions["trace"] = trace
        client = provider.connections.checkout()
        outgoing = None
        try:
            if request.warm_connection:
                # Nothing may yield between a connection opened here and the send taking it.
                t_connect = clock()
                if await provider.connections.connect_ahead(client):
                    m.connect_ahead_ns = clock() - t_connect
                    m.tags["connected_before_start"] = True
            # labkit's own preparation, before the clock: the request's bytes and, on the
            # lean transport, its pooled connection (`Connections.prepare_send`).
            outgoing = provider.connections.prepare_send(client, http_request)
            async with asyncio.timeout(provider.settings.timeouts.total):
                m.begin(clock)
                if outgoing is not None:
                    outgoing.send()  # at once after the stamp: one write of head and body
                try:
                    response = await client.send(http_request, stream=True)
                except httpx.RemoteProtocolError:
                    if not _stale_pooled_connection(phases):
                        raise
                    # A keep-alive connection the server closed in the moment it was reused
                    # (llama-server and others close after every stream): nothing was
                    # measured yet, so measure again from a fresh clock on a new connection.
                    phases.clear()
                    m.tags["stale_connection_resent"] = True
                    m.connect_ahead_ns = None  # the new connection is inside the clock
                    m.tags.pop("connected_before_start", None)
                    m.begin(clock)
                    response = await client.send(http_request, stream=True)
                # Mock transports emit no trace events: fall back to when send() returned.
                phases.setdefault(_HEADERS_DONE, clock())
                try:
                    # Read once into a dict: the parsers look up a dozen names, each a
                    # scan of the whole list on httpx's Headers.
                    headers = dict(response.headers.items())
                    parser.on_headers(headers)
                    m.read_server_request_id(headers)
                    status = response.status_code
                    if status >= 400:
                        body = await _read_capped(response.aiter_bytes(), ERROR_BODY_CAP)
                        m.end_ns = clock()
                        m.error = proxy_refused(
                            http_error(status, response.headers, body, redact), m.via_proxy
                        )
                    elif status >= 300:
                        m.end_ns = clock()
                        m.error = redirect_error(status, response.headers, redact)
                    elif undecodable := undecodable_body(status, headers, _DECODABLE):
                        m.end_ns = clock()
                        m.error = undecodable
                    else:
                        framer = provider.new_framer()
                        await self._read_events(response, framer, parser, m, redact)
                finally:
                    await response.aclose()
                    release_response(response)
        finally:
            if outgoing is not None:
                outgoing.discard_unsent()
            http_request.extensions.clear()
            provider.connections.checkin(client)

    async def _read_events(
        self,
        response: httpx.Response,
        sse: SSEParser,
        parser: StreamParser,
        m: Measurement,
        redact: Callable[[str], str],
    ) -> None:
        """Read the body with the provider's framing (SSE, NDJSON), stamping each event; a
        reply that is plainly a document (HTML, JSON) is read up to a cap and named instead."""
        clock = self._clock
        feed = sse.feed
        feed_whole_chunks = sse.feed_whole_chunks
        on_event = parser.on_event
        stamp = m.event
        # The lean transport stamps each read on arrival (labkit.wire.lean); through
        # httpx the stamp is when the read reaches this loop.
        arrival = response.extensions.get("labkit.arrival")
        # The lean transport says per read whether its stamp is the kernel's and when labkit
        # saw it; a user-space stamp's lateness is estimated from the loop's select() times.
        read_stamps: list[int] | None = None
        read_seen, read_kernel = m.read_seen, m.read_kernel
        late: Callable[[int], None] | None = None
        selector = loop_clock()
        read_windows: dict[int, tuple[int, int, bool]] | None = None
        if arrival is not None and hasattr(arrival, "kernel_stamped"):
            m.stamp_source = "kernel"
            read_stamps = m.read_stamps = []
            if selector is not None:
                read_windows = m.read_windows = {}
                window_before = selector.window_before
        elif arrival is None:
            late = m.stamped_in_user_space(response.extensions)
        else:
            m.stamp_source = "user"
        output_ns = m.output_ns
        content_type = response.headers.get("content-type", "")
        parse_ns = 0
        terminator_ns: int | None = None
        # The parser's common chunk (the plain chat content chunk) read, classified and
        # stamped in one call per pushed read (`labkit.wire.readpath.common_reader`), once
        # the framing sits between events; any other read goes the general way below.
        common = common_reader(parser.common_chunk()) if arrival is not None else None
        line_max = sse.one_line_max
        at_boundary = sse.at_event_boundary
        boundary = False
        # Where the C read path has it, the lean connection reads the socket and takes each
        # such read in one call (`readpath.CommonPush`), as the common branch below would.
        pushed = (
            common_push(
                common,
                parser,
                output_ns,
                line_max,
                m,
                read_stamps,
                read_seen,
                read_kernel,
                read_windows,
                window_before if read_windows is not None else None,
            )
            if read_stamps is not None
            else None
        )

        def on_read(
            chunk: bytes, t: int, seen: int, kernel: bool, framed: bool = False, /
        ) -> bool | None:
            """Frame, parse and stamp one read (the lean transport's stamps of it: arrival,
            when labkit saw it, whether the kernel stamped it); True once the stream's end
            is in. `framed`: the read as the lean body got it, chunk framing and all, taken
            only when it is the common read (`SSEParser.feed_whole_chunks`), else None."""
            nonlocal parse_ns, terminator_ns, boundary
            t_read = clock()
            events = None
            if framed:
                if boundary and common is not None:
                    got = common(chunk, line_max, t, parser, output_ns)
                    if got is not None:
                        # texts × 2 + [DONE]: what `stamp` does for each of those events.
                        if read_stamps is not None:
                            read_stamps.append(t)
                            read_seen.append(seen)
                            read_kernel.append(kernel)
                        if got:
                            if m.first_event_ns is None:
                                m.first_event_ns = t
                            if got > 1 and m.first_text_ns is None:
                                m.first_text_ns = t
                            if got & 1:
                                m.done = True
                            if got > 3 and read_windows is not None:
                                # Several output events under one stamp, as below.
                                window = window_before(seen)
                                if window is not None:
                                    read_windows[t] = window
                        parse_ns += clock() - t_read
                        if m.done or parser.ended:
                            terminator_ns = t
                            return True
                        return False
                events = feed_whole_chunks(chunk, t)
                if events is None:
                    return None
            if arrival is None:
                t = t_read
                if late is not None:
                    late(t)
            elif read_stamps is not None:
                read_stamps.append(t)
                read_seen.append(seen)
                read_kernel.append(kernel)
            if events is None:
                events = feed(chunk, t)
            if read_windows is None:
                for ev in events:
                    stamp(on_event(ev), ev.t_ns)
            else:
                before = len(output_ns)
                for ev in events:
                    stamp(on_event(ev), ev.t_ns)
                if len(output_ns) - before > 1:
                    # Several events under one kernel stamp (its last segment's): when the
                    # loop saw them arrive tells how much earlier the first ones came.
                    window = window_before(seen)
                    if window is not None:
                        read_windows[t] = window
            if common is not None:
                boundary = at_boundary()
                if pushed is not None:
                    pushed.enabled = boundary
            parse_ns += clock() - t_read
            if m.done or parser.ended:
                # The stream's end is the arrival of the read that completed its terminator
                # (the kernel's stamp on the lean transport), not when this loop got to it;
                # what follows is not parsed.
                terminator_ns = t
                return True
            return False

        body = _undecoded_body(response, arrival)
        chunks = response.aiter_bytes() if body is None else aiter(body)
        # The lean body over plain TCP hands each later read to on_read in its reader
        # callback (no task wake-up per read); the first read is taken here, to tell a
        # document from a stream.
        try:
            deliver = body.deliver if body is not None and body.pushes else None
            first = True
            async for chunk in chunks:
                if first:
                    first = False
                    if sse.json_first_byte_is_a_document and looks_like_a_document(
                        content_type, chunk
                    ):
                        document = await _read_capped(chunks, ERROR_BODY_CAP, chunk)
                        m.end_ns = clock()
                        m.error = not_a_stream(
                            response.status_code, response.headers, document, redact
                        )
                        return
                if arrival is None:
                    done = on_read(chunk, 0, 0, False)
                else:
                    done = on_read(chunk, arrival.t_ns, arrival.seen_ns, arrival.kernel_stamped)
                if done:
                    break
                if deliver is not None:
                    # Each read is offered as it came first: its chunks and SSE events in one call.
                    try:
                        await deliver(on_read, pushed)
                    finally:
                        if pushed is not None:
                            parse_ns += pushed.parse_ns
                            if terminator_ns is None and pushed.terminator_ns >= 0:
                                terminator_ns = pushed.terminator_ns
                    break
            ended = m.done or parser.ended
            for ev in () if ended else sse.close():
                try:
                    stamp(on_event(ev), ev.t_ns)
                except (MalformedStream, ValueError) as exc:
                    # An event flushed at the end without its blank line was cut off mid-way.
                    raise MalformedStream(
                        f"stream ended in the middle of an event (truncated): {exc}"
                    ) from None
            m.end_ns = clock() if terminator_ns is None else terminator_ns
            m.parse_ns = parse_ns
            parser.read_framing(sse, m.t_start)
            if ended and not (body is not None and body.complete):
                # A body that has ended has nothing to drain (closing it keeps the connection).
                await drain_after_terminator(chunks)
        finally:
            # Closed here, not dropped unfinished: the loop's finalizer hook would give
            # each request's body iterator a task of its own (its aclose) and a loop step.
            close = getattr(chunks, "aclose", None)
            if close is not None:
                await close()

    def _transport_error(
        self,
        exc: Exception,
        m: Measurement,
        parser: StreamParser | None,
        redact: Callable[[str], str],
    ) -> RecordError | None:
        """httpx's exceptions: timeouts, lost connections, requests it could not send."""
        if _HEADERS_DONE not in m.phases and (tls := tls_problem(exc, m.phases)):
            timed_out = isinstance(exc, httpx.TimeoutException)
            kind = ErrorKind.TIMEOUT if timed_out else ErrorKind.CONNECTION
            return RecordError(kind=kind, message=f"{tls} ({exception_message(exc, redact)})"[:300])
        if isinstance(exc, httpx.TimeoutException):
            return RecordError(kind=ErrorKind.TIMEOUT, message=exception_message(exc, redact))
        if isinstance(exc, httpx.ConnectError) and (said := connect_failure(exc, redact)):
            return RecordError(kind=ErrorKind.CONNECTION, message=said)
        if isinstance(exc, httpx.RemoteProtocolError | httpx.NetworkError):
            if m.first_event_ns is not None:
                where = "mid-stream"
            elif _HEADERS_DONE in m.phases:
                where = "after the response headers"
            else:
                where = "before the response"
            return RecordError(
                kind=ErrorKind.CONNECTION,
                message=f"connection lost {where}: {exception_message(exc, redact)}"[:300],
            )
        if isinstance(exc, httpx.HTTPError) and not isinstance(exc, REQUEST_INVALID):
            return RecordError(kind=ErrorKind.CONNECTION, message=exception_message(exc, redact))
        return None


#: After a stream's terminator, how long the rest of its body is read (and discarded) so that
#: its connection can carry the next request: a server that ends the body at once keeps the
#: connection; one that holds the body open loses it here, and the request is over.
DRAIN_AFTER_TERMINATOR_S = 0.25
#: At most this many further reads (or SDK items) are drained.
DRAIN_AFTER_TERMINATOR_READS = 1000


def release_response(response: httpx.Response) -> None:
    """Break httpx's closed response's reference cycle (the response holds its stream,
    which holds the response), so the request's objects are freed by reference counting as
    the record is made, not by the cyclic collector, whose scans stall the loop (see
    `labkit.runner.gcpolicy`)."""
    response.stream = _CLOSED_STREAM


_CLOSED_STREAM = httpx.ByteStream(b"")


async def drain_after_terminator(rest: AsyncIterator[object]) -> None:
    """Read what follows a stream's terminator, within `DRAIN_AFTER_TERMINATOR_S` and
    `DRAIN_AFTER_TERMINATOR_READS`; nothing it reads or raises counts (the stream is complete,
    its record stamped). A body left unfinished is closed with its response, never reused."""
    reads = 0
    # What a server sends after its terminator, errors included, is no part of the stream.
    with contextlib.suppress(Exception):
        async with asyncio.timeout(DRAIN_AFTER_TERMINATOR_S):
            async for _ in rest:
                reads += 1
                if reads >= DRAIN_AFTER_TERMINATOR_READS:
                    return


#: The error of a stream that ended with its terminator and nothing else (`data: [DONE]`
#: alone): no output, no output count, no stop reason. A request answered with nothing is
#: a failed request, never an ok record that has no TTFT to count.
EMPTY_STREAM_MESSAGE = (
    "the stream ended with its terminator and carried nothing else (no output, no output "
    "count, no stop reason): an empty stream"
)


def _answered_nothing(parser: StreamParser) -> bool:
    """Whether a stream that ended carried no answer at all: no stop reason, no output
    count and no tool call (its output events are the caller's to check)."""
    return (
        parser.stop_reason_raw is None
        and parser.usage.output_tokens is None
        and not parser.tool_call_parts
    )


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


def _text_tool_calls(
    provider: Provider, params: dict[str, Any], text: str
) -> list[RecordToolCall] | None:
    """The calls a reply without call objects wrote as its text, where the provider's tool
    format forced that turn to call (`ToolFormat.calls_in_text`); None: none."""
    fmt = provider.tool_format()
    return fmt.calls_in_text(params, text) if fmt is not None else None


def assemble_record(
    *,
    provider: Provider,
    request: ChatRequest,
    ctx: RecordContext,
    m: Measurement,
    client: ClientTimings,
    app: AppTimings,
    stop: StopReason | None,
    error: RecordError | None,
    parser: StreamParser | None = None,
) -> RequestRecord:
    """One `RequestRecord` from what a recorder (wire or SDK path) measured and, when there
    is one, what its parser collected."""
    prompt = request.prompt_text
    parsed: dict[str, Any] = {}
    if parser is not None:
        calls = parser.finished_tool_calls()
        if calls is None and error is None:
            read = _text_tool_calls(provider, m.params, parser.output_text)
            if read:
                calls, stop = read, StopReason.TOOL_CALL
        parsed = {
            "provider_timings": parser.provider_timings,
            "usage": parser.usage,
            "stop_reason_raw": parser.stop_reason_raw,
            "response_id": parser.response_id,
            "request_id": parser.request_id,
            "system_fingerprint": parser.system_fingerprint,
            "rate_limits": parser.rate_limits,
            "output_text": parser.output_text if ctx.store_text else None,
            "tool_calls": calls,
            "logprobs": parser.logprobs(),
            "event_detail": parser.event_detail(keep_text=ctx.store_text),
        }
    if m.server_request_id is not None and parsed.get("request_id") is None:
        parsed["request_id"] = m.server_request_id
    # Validated from the dict at once (`validated`): the same record, 2 µs less.
    fields: dict[str, Any] = {
        "run_id": ctx.run_id,
        "record_id": ctx.record_id or new_record_id(),
        "plan_key": ctx.plan_key,
        "experiment": ctx.experiment,
        "trial": ctx.trial,
        "attempt": ctx.attempt,
        "warmup": ctx.warmup,
        "provider": provider.id,
        "provider_kind": provider.kind,
        "model": provider.model,
        "params": m.params,
        "prompt_id": request.prompt_id,
        "prompt_chars": len(prompt),
        "prompt_bytes": len(prompt.encode("utf-8", errors="replace")),
        "started_at": m.started_at,
        "t_start_mono_ns": m.t_start,
        "client": client,
        "app": app,
        "stop_reason": stop,
        "server_build": provider.server_build,
        "tags": {**ctx.tags, **m.tags},
        "error": error,
        "trace": ctx.trace,
    }
    if parsed:
        fields.update(parsed)
    return validated(RequestRecord, fields)


def add_headers(headers: httpx.Headers, new: Mapping[str, str]) -> None:
    """``headers.update(new)``, to the same fields in the same order: where each name is
    new to `headers` (and to the others of `new`, whatever their case) and names and values
    are ASCII, each is set in turn (appended, as update appends), without the copy into a
    `Headers` and the name-by-name search update makes (a request's trace headers: 7 µs
    of its preparation); otherwise by update itself."""
    present = {name.lower() for name, _ in headers.raw}
    for name, value in new.items():
        if not (name.isascii() and value.isascii()):
            break
        key = name.lower().encode("ascii")
        if key in present:
            break
        present.add(key)
    else:
        for name, value in new.items():
            headers[name] = value
        return
    headers.update(new)


def _undecoded_body(response: httpx.Response, arrival: Any) -> Any | None:
    """The lean transport's body (`arrival`), to be read straight when it has nothing to
    decode; None: read through httpx (which decodes a Content-Encoding).

    httpx's three iterators around a body (decoding, byte counting, its client's) cost
    each read about a microsecond and a half; the chunks, their stamps and the body's
    close are the same either way (`response.aclose` closes the body, once).
    """
    if not hasattr(arrival, "deliver"):
        return None
    encoding = response.headers.get("content-encoding", "identity").strip().lower()
    return arrival if encoding in ("identity", "") else None


def _stale_pooled_connection(phases: dict[str, int]) -> bool:
    """True when a send failed on a reused connection before any response byte."""
    return "connection.connect_tcp.complete" not in phases and _HEADERS_DONE not in phases
