"""Records → OpenTelemetry spans: one span per record under its level, experiment and run.

Every span is computed from the records alone (ids from `RequestRecord.trace`, or derived
from `record_id` in records written before it existed; times from the records' stamps), so
the spans of a run are the same whether they are built as it ends or later from its
records.jsonl. A request's span carries the GenAI semantic conventions' attributes where
they exist (`gen_ai.*`) and labkit's own (`labkit.*`: client timings, the provider's
reported timings, stamp lateness); its client phases are span events. docs/tracing.md
lists them.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags
from opentelemetry.util.types import AttributeValue

from labkit.clocksync import driver_start_ns
from labkit.records import RequestRecord
from labkit.tracing.context import level_key, span_id_of, trace_id_of

__all__ = [
    "SCOPE",
    "iter_record_spans",
    "record_duration_ms",
    "record_spans",
    "run_resource",
]

#: The instrumentation scope of every span labkit writes.
SCOPE = InstrumentationScope("labkit")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
#: A record whose own wall clock is further than this from the run's monotonic → wall
#: mapping (another boot, a stepped clock) is placed by its own `started_at`.
_ANCHOR_TOLERANCE_NS = 1_000_000_000
#: The client phases of `ClientTimings` that become span events, in order.
_PHASES = (
    ("connected", "connect_ms"),
    ("tls_done", "tls_ms"),
    ("request_sent", "request_sent_ms"),
    ("headers", "headers_ms"),
    ("first_event", "first_event_ms"),
    ("first_token", "ttft_ms"),
    ("first_text", "ttft_text_ms"),
    ("last_token", "last_token_ms"),
)
Attributes = dict[str, AttributeValue]


def _wall_ns(when: datetime) -> int:
    return (when - _EPOCH) // timedelta(microseconds=1) * 1000


def _ms_ns(ms: float) -> int:
    return round(ms * 1e6)


#: Request parameters and their GenAI semantic-convention attributes, by the type the
#: conventions give them (int, double).
_INT_PARAMS = (
    ("max_tokens", "gen_ai.request.max_tokens"),
    ("max_completion_tokens", "gen_ai.request.max_tokens"),
    ("max_output_tokens", "gen_ai.request.max_tokens"),
    ("seed", "gen_ai.request.seed"),
)
_DOUBLE_PARAMS = (
    ("temperature", "gen_ai.request.temperature"),
    ("top_p", "gen_ai.request.top_p"),
    ("top_k", "gen_ai.request.top_k"),
    ("frequency_penalty", "gen_ai.request.frequency_penalty"),
    ("presence_penalty", "gen_ai.request.presence_penalty"),
)


def _put(attrs: Attributes, key: str, value: object) -> None:
    """Set `key` where `value` is a value OpenTelemetry takes (None and others left out)."""
    if isinstance(value, bool | int | float | str):
        attrs[key] = value


@dataclass
class _Placed:
    """A record on the run's wall clock, with its span's ids."""

    record: RequestRecord
    trace_id: str
    span_id: str
    parent_span_id: str
    start_ns: int
    end_ns: int


@dataclass
class _Group:
    """A parent span (run, experiment or level): its children's extent and counts."""

    span_id: str
    parent_span_id: str | None
    name: str
    attrs: Attributes = field(default_factory=dict)
    start_ns: int | None = None
    end_ns: int | None = None
    requests: int = 0
    errors: int = 0

    def cover(self, start_ns: int, end_ns: int, requests: int, errors: int) -> None:
        self.start_ns = start_ns if self.start_ns is None else min(self.start_ns, start_ns)
        self.end_ns = end_ns if self.end_ns is None else max(self.end_ns, end_ns)
        self.requests += requests
        self.errors += errors


def _wall_offset(records: Iterable[RequestRecord]) -> int | None:
    """The run's monotonic → wall mapping: the median over its records of wall start minus
    start on the driver's clock (None: no record has a monotonic start)."""
    offsets = [
        _wall_ns(r.started_at) - start for r in records if (start := driver_start_ns(r)) is not None
    ]
    return round(statistics.median(offsets)) if offsets else None


def run_resource(run_id: str) -> Resource:
    """The OpenTelemetry resource of a run's spans and metrics."""
    return Resource({"service.name": "labkit", "labkit.run_id": run_id})


def record_duration_ms(record: RequestRecord) -> float:
    """A request's span duration, and its `gen_ai.client.operation.duration`: the end of its
    stream (`client.e2e_ms`), else its last phase reached (a request that failed early)."""
    c = record.client
    known = [v for v in (c.e2e_ms, c.last_token_ms, c.headers_ms, c.request_sent_ms) if v]
    return max(known, default=0.0)


def _place(record: RequestRecord, run_id: str, offset: int | None) -> _Placed:
    own = _wall_ns(record.started_at)
    mono = driver_start_ns(record)
    start = own
    if offset is not None and mono is not None and abs(own - mono - offset) <= _ANCHOR_TOLERANCE_NS:
        start = mono + offset
    end = start + _ms_ns(record_duration_ms(record))
    trace = record.trace
    if trace is not None:
        return _Placed(record, trace.trace_id, trace.span_id, trace.parent_span_id, start, end)
    level = level_key(record.tags)
    path = (record.provider, record.experiment) + (() if level is None else (level,))
    return _Placed(
        record,
        trace_id_of(run_id),
        span_id_of(run_id, record.provider, record.experiment, "record", record.record_id),
        span_id_of(run_id, *path),
        start,
        end,
    )


def _request_attributes(r: RequestRecord) -> Attributes:
    attrs: Attributes = {"gen_ai.operation.name": "chat"}
    _put(attrs, "gen_ai.provider.name", r.provider_kind)
    _put(attrs, "gen_ai.system", r.provider_kind)  # the name before semconv 1.37
    _put(attrs, "gen_ai.request.model", r.model)
    for param, key in _INT_PARAMS:
        _put(attrs, key, r.params.get(param))
    for param, key in _DOUBLE_PARAMS:
        value = r.params.get(param)
        # the conventions type these double: a YAML `temperature: 0` goes out as 0.0
        _put(attrs, key, float(value) if isinstance(value, int | float) else value)
    _put(attrs, "gen_ai.response.id", r.response_id)
    if r.stop_reason_raw is not None:
        attrs["gen_ai.response.finish_reasons"] = [r.stop_reason_raw]
    u = r.usage
    _put(attrs, "gen_ai.usage.input_tokens", u.input_tokens)
    _put(attrs, "gen_ai.usage.output_tokens", u.output_tokens)
    _put(attrs, "gen_ai.usage.cache_read.input_tokens", u.cached_input_tokens)
    _put(attrs, "gen_ai.usage.reasoning.output_tokens", u.reasoning_tokens)
    if r.error is not None:
        attrs["error.type"] = r.error.kind.value
        _put(attrs, "http.response.status_code", r.error.status)
    for name, value in (
        ("record_id", r.record_id),
        ("run_id", r.run_id),
        ("provider", r.provider),
        ("experiment", r.experiment),
        ("trial", r.trial),
        ("attempt", r.attempt),
        ("warmup", r.warmup),
        ("prompt_id", r.prompt_id),
        ("stop_reason", r.stop_reason.value if r.stop_reason else None),
        ("request_id", r.request_id),
        ("host", r.host),
        ("client_path", r.app.client_path),
        ("app.prepare_ms", r.app.prepare_ms),
        ("app.cpu_ms", r.app.cpu_ms),
        ("app.parse_cpu_ms", r.app.parse_cpu_ms),
        ("usage.streamed_output_tokens", u.streamed_output_tokens),
        ("usage.input_tokens_local", u.input_tokens_local),
    ):
        _put(attrs, f"labkit.{name}", value)
    client = r.client.model_dump(exclude={"event_offsets_ms", "event_tokens", "stamp_lateness_ms"})
    for name, value in client.items():
        _put(attrs, f"labkit.client.{name}", value)
    for name, value in r.provider_timings.model_dump(exclude={"raw"}).items():
        _put(attrs, f"labkit.provider_timings.{name}", value)
    for name, value in r.tags.items():
        _put(attrs, f"labkit.tag.{name}", value)
    return attrs


def _request_events(p: _Placed) -> list[Event]:
    c = p.record.client
    events = [
        Event(name, {}, p.start_ns + _ms_ns(ms))
        for name, key in _PHASES
        if (ms := getattr(c, key)) is not None
    ]
    return sorted(events, key=lambda e: e.timestamp or 0)


def _context(trace_id: str, span_id: str) -> SpanContext:
    return SpanContext(
        int(trace_id, 16), int(span_id, 16), is_remote=False, trace_flags=TraceFlags(1)
    )


def _request_span(p: _Placed, resource: Resource) -> ReadableSpan:
    r = p.record
    status = (
        Status(StatusCode.ERROR, r.error.message) if r.error is not None else Status(StatusCode.OK)
    )
    return ReadableSpan(
        name=f"chat {r.model}",
        context=_context(p.trace_id, p.span_id),
        parent=_context(p.trace_id, p.parent_span_id),
        resource=resource,
        attributes=_request_attributes(r),
        events=_request_events(p),
        kind=SpanKind.CLIENT,
        status=status,
        start_time=p.start_ns,
        end_time=p.end_ns,
        instrumentation_scope=SCOPE,
    )


def _group_span(g: _Group, trace_id: str, resource: Resource) -> ReadableSpan:
    attrs = {**g.attrs, "labkit.requests": g.requests, "labkit.errors": g.errors}
    return ReadableSpan(
        name=g.name,
        context=_context(trace_id, g.span_id),
        parent=None if g.parent_span_id is None else _context(trace_id, g.parent_span_id),
        resource=resource,
        attributes=attrs,
        kind=SpanKind.INTERNAL,
        status=Status(StatusCode.UNSET),
        start_time=g.start_ns,
        end_time=g.end_ns,
        instrumentation_scope=SCOPE,
    )


def record_spans(run_id: str, records: Iterable[RequestRecord]) -> list[ReadableSpan]:
    """The spans of a run's `records`: one per record, one per load level, one per
    experiment of each provider and one for the run, parents before children (empty when
    there are no records)."""
    return list(iter_record_spans(run_id, records))


def _encodable(span: ReadableSpan) -> str | None:
    """None when OTLP can encode `span`, else why not (a time outside 1970..2554, text
    that is no Unicode)."""
    try:
        encode_spans([span])
    except Exception as exc:  # the encoder's own error: protobuf's ValueError, ...
        return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:160]
    return None


def iter_record_spans(
    run_id: str,
    records: Iterable[RequestRecord],
    skipped: list[tuple[str, str]] | None = None,
) -> Iterator[ReadableSpan]:
    """`record_spans`, one at a time: the group spans, then each record's span built only
    when it is asked for, so an export in batches holds one batch of spans.

    `records` is read three times (the run's clock mapping, the groups, the spans): a list,
    or a re-iterable that reads them from a file each time (`labkit.tracing.export.RunRecords`),
    so no pass holds them all; a one-shot iterator is made a list first. A record whose
    span OTLP cannot encode is left out, of its groups too, and added to `skipped` as
    (record id, why): one bad record costs its own span, never its batch.
    """
    if iter(records) is records:
        records = list(records)
    offset = _wall_offset(r for r in records if r.run_id == run_id)
    resource = run_resource(run_id)
    trace_id = trace_id_of(run_id)
    run = _Group(span_id_of(run_id), None, f"labkit run {run_id}", {"labkit.run_id": run_id})
    experiments: dict[tuple[str, str], _Group] = {}
    levels: dict[tuple[str, str, str], _Group] = {}
    left_out: set[int] = set()
    for index, r in enumerate(x for x in records if x.run_id == run_id):
        p = _place(r, run_id, offset)
        why = _encodable(_request_span(p, resource))
        if why is not None:
            left_out.add(index)
            if skipped is not None:
                skipped.append((r.record_id, why))
            continue
        failed = int(r.error is not None)
        exp = experiments.get((r.provider, r.experiment))
        if exp is None:
            exp = experiments[(r.provider, r.experiment)] = _Group(
                span_id_of(run_id, r.provider, r.experiment),
                run.span_id,
                f"experiment {r.experiment} {r.provider}",
                {
                    "labkit.experiment": r.experiment,
                    "labkit.provider": r.provider,
                    "gen_ai.provider.name": r.provider_kind,
                    "gen_ai.request.model": r.model,
                },
            )
        level = level_key(r.tags)
        if level is not None:
            group = levels.get((r.provider, r.experiment, level))
            if group is None:
                group = levels[(r.provider, r.experiment, level)] = _Group(
                    span_id_of(run_id, r.provider, r.experiment, level),
                    exp.span_id,
                    f"level {r.tags.get('level', level)}",
                    {"labkit.tag.level_run": level},
                )
                for tag in ("level", "mode", "target"):
                    _put(group.attrs, f"labkit.tag.{tag}", r.tags.get(tag))
            group.cover(p.start_ns, p.end_ns, 1, failed)
        exp.cover(p.start_ns, p.end_ns, 1, failed)
        run.cover(p.start_ns, p.end_ns, 1, failed)
    if run.requests == 0:
        return
    for group in (run, *experiments.values(), *levels.values()):
        yield _group_span(group, trace_id, resource)
    for index, r in enumerate(x for x in records if x.run_id == run_id):
        if index not in left_out:
            yield _request_span(_place(r, run_id, offset), resource)
