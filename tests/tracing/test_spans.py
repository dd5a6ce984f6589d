"""Records → spans, and each request's trace context: ids, headers, parents, times."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from opentelemetry.trace import SpanKind, StatusCode

from labkit.config import parse_config
from labkit.records import RequestRecord, RequestTrace
from labkit.tracing import request_trace, trace_headers
from labkit.tracing.context import span_id_of, trace_id_of
from labkit.tracing.export import otlp_json
from labkit.tracing.spans import record_spans
from tests.support.records import T0, make_record

pytestmark = pytest.mark.unit

_TRACEPARENT = re.compile(r"^00-[0-9a-f]{32}-[0-9a-f]{16}-01$")


def _traced(record: RequestRecord, *, level: str | None = None) -> RequestRecord:
    tags = {**record.tags, **({"level": "c=2", "level_run": level} if level else {})}
    trace = request_trace(
        record.run_id, record.provider, record.experiment, tags, record.record_id, propagate=True
    )
    return record.model_copy(update={"tags": tags, "trace": trace})


def test_a_request_carries_a_w3c_traceparent_and_its_record_id() -> None:
    trace = request_trace("run-1", "p", "load", {"level_run": "L1"}, "rec1", propagate=True)
    headers = trace_headers(trace)
    assert _TRACEPARENT.match(headers["traceparent"])
    assert headers["traceparent"] == f"00-{trace.trace_id}-{trace.span_id}-01"
    assert headers["x-request-id"] == "rec1" == trace.request_id_sent
    assert trace.trace_id == trace_id_of("run-1")
    assert trace.parent_span_id == span_id_of("run-1", "p", "load", "L1")
    other = request_trace("run-1", "p", "load", {"level_run": "L1"}, "rec2", propagate=True)
    assert other.span_id != trace.span_id and other.trace_id == trace.trace_id


def test_with_headers_off_nothing_is_sent_but_the_ids_are_kept() -> None:
    trace = request_trace("run-1", "p", "single", {}, "rec1", propagate=False)
    assert trace_headers(trace) == {}
    assert trace.request_id_sent is None and not trace.propagated
    assert trace.parent_span_id == span_id_of("run-1", "p", "single")


def test_one_setting_turns_the_headers_off() -> None:
    base: dict[str, Any] = {
        "name": "t",
        "providers": [{"id": "p", "kind": "fake", "model": "m"}],
        "experiments": [{"kind": "single"}],
    }
    assert parse_config(base).tracing.headers
    off = parse_config({**base, "tracing": {"headers": False}})
    assert not off.tracing.headers and off.tracing.otlp_endpoint is None
    with pytest.raises(Exception, match="http"):
        parse_config({**base, "tracing": {"otlp_endpoint": "127.0.0.1:4318"}})


def test_every_record_is_one_span_under_its_level_experiment_and_run() -> None:
    single = _traced(make_record(experiment="single"))
    loads = [
        _traced(make_record(experiment="load", started_at=T0 + timedelta(seconds=i)), level="L1")
        for i in range(3)
    ]
    spans = record_spans("run-1", [single, *loads])
    by_id = {format(s.context.span_id, "016x"): s for s in spans}
    assert len(spans) == 4 + 1 + 2 + 1  # records, the level, two experiments, the run
    run = by_id[span_id_of("run-1")]
    assert run.parent is None and run.attributes["labkit.requests"] == 4
    level = by_id[span_id_of("run-1", "local", "load", "L1")]
    exp = by_id[span_id_of("run-1", "local", "load")]
    assert level.parent is not None and level.parent.span_id == exp.context.span_id
    assert exp.parent is not None and exp.parent.span_id == run.context.span_id
    for r in [single, *loads]:
        assert r.trace is not None
        span = by_id[r.trace.span_id]
        assert span.parent is not None
        assert format(span.parent.span_id, "016x") == r.trace.parent_span_id
        assert format(span.context.trace_id, "032x") == r.trace.trace_id == trace_id_of("run-1")
        assert span.kind is SpanKind.CLIENT
    assert by_id[single.trace.parent_span_id if single.trace else ""].name.startswith("experiment")
    # The level covers its requests: from the first one's start to the last one's end.
    assert level.start_time == min(by_id[r.trace.span_id].start_time for r in loads if r.trace)
    assert level.end_time == max(by_id[r.trace.span_id].end_time for r in loads if r.trace)


def test_a_span_holds_the_genai_attributes_and_labkits_timings_as_events() -> None:
    record = _traced(
        make_record(
            provider_kind="openai",
            model="gpt-x",
            ttft_ms=100.0,
            output_tokens=5,
            input_tokens=7,
            prefill_ms=40.0,
            stamp_lateness_ms_p99=0.3,
        )
    ).model_copy(
        update={
            # as YAML gives them: `temperature: 0` and `top_p: 1` are ints there
            "params": {"max_tokens": 5, "temperature": 0, "top_p": 1, "seed": 7},
            "response_id": "c-1",
            "stop_reason_raw": "stop",
        }
    )
    (span,) = [s for s in record_spans("run-1", [record]) if s.kind is SpanKind.CLIENT]
    a = span.attributes
    assert span.name == "chat gpt-x"
    assert a["gen_ai.operation.name"] == "chat"
    assert a["gen_ai.provider.name"] == "openai"
    assert a["gen_ai.request.model"] == "gpt-x"
    assert a["gen_ai.request.max_tokens"] == 5
    # the semantic conventions type temperature and top_p double, max_tokens and seed int
    assert type(a["gen_ai.request.temperature"]) is float and a["gen_ai.request.temperature"] == 0
    assert type(a["gen_ai.request.top_p"]) is float and a["gen_ai.request.top_p"] == 1
    assert type(a["gen_ai.request.max_tokens"]) is int and type(a["gen_ai.request.seed"]) is int
    assert a["gen_ai.usage.input_tokens"] == 7 and a["gen_ai.usage.output_tokens"] == 5
    assert tuple(a["gen_ai.response.finish_reasons"]) == ("stop",)
    assert a["gen_ai.response.id"] == "c-1"
    assert a["labkit.client.ttft_ms"] == 100.0
    assert a["labkit.client.decode_ms_per_token"] == 10.0
    assert a["labkit.client.stamp_lateness_ms_p99"] == 0.3
    assert a["labkit.provider_timings.prefill_ms"] == 40.0
    assert a["labkit.record_id"] == record.record_id
    # Span times are the record's stamps: t_start, and the end of the stream.
    start_ns = int((record.started_at - T0.replace(year=1970, month=1, day=1)).total_seconds())
    assert span.start_time is not None and span.start_time // 10**9 == start_ns
    assert span.end_time == span.start_time + round(record.client.e2e_ms * 1e6)  # type: ignore[operator]
    events = {e.name: e.timestamp for e in span.events}
    assert events["first_token"] == span.start_time + 100_000_000
    assert events["headers"] == span.start_time + 50_000_000
    assert list(events) == sorted(events, key=lambda n: events[n])
    assert span.status.status_code is StatusCode.OK


def test_a_failed_request_is_an_error_span() -> None:
    record = _traced(make_record(error_kind="http_status", ttft_ms=None))
    (span,) = [s for s in record_spans("run-1", [record]) if s.kind is SpanKind.CLIENT]
    assert span.status.status_code is StatusCode.ERROR
    assert span.attributes["error.type"] == "http_status"
    assert span.attributes["http.response.status_code"] == 500


def test_records_from_before_tracing_get_the_same_ids_every_time() -> None:
    old = [make_record(run_id="old"), make_record(run_id="old", tags={"level_run": "L"})]
    first = otlp_json(record_spans("old", old))
    again = otlp_json(record_spans("old", old))
    assert first == again
    spans = first["resourceSpans"][0]["scopeSpans"][0]["spans"]
    assert len(spans) == 2 + 1 + 1 + 1  # records, the level, the experiment, the run
    assert {s["traceId"] for s in spans} == {trace_id_of("old")}


def test_otlp_json_has_hex_ids_and_numeric_kinds() -> None:
    record = _traced(make_record())
    data = otlp_json(record_spans("run-1", [record]))
    spans = data["resourceSpans"][0]["scopeSpans"][0]["spans"]
    assert record.trace is not None
    mine = next(s for s in spans if s["spanId"] == record.trace.span_id)
    assert mine["traceId"] == record.trace.trace_id
    assert mine["parentSpanId"] == record.trace.parent_span_id
    assert mine["kind"] == 3  # SPAN_KIND_CLIENT
    resource = data["resourceSpans"][0]["resource"]["attributes"]
    assert {"key": "service.name", "value": {"stringValue": "labkit"}} in resource


def test_records_of_another_run_are_left_out() -> None:
    assert record_spans("run-1", [make_record(run_id="run-2")]) == []


def test_record_trace_round_trips_through_json() -> None:
    record = _traced(make_record())
    assert isinstance(record.trace, RequestTrace)
    assert RequestRecord.from_json_line(record.to_json_line()).trace == record.trace


def test_the_standard_variables_name_the_endpoint_when_the_config_does_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from labkit.tracing.settings import TracingSettings, otlp_traces_endpoint

    for name in ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    assert otlp_traces_endpoint(TracingSettings()) is None
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/")
    assert otlp_traces_endpoint(TracingSettings()) == "http://collector:4318/v1/traces"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://traces:4318/v1/traces")
    assert otlp_traces_endpoint(TracingSettings()) == "http://traces:4318/v1/traces"
    configured = TracingSettings(otlp_endpoint="http://mine:4318")
    assert otlp_traces_endpoint(configured) == "http://mine:4318/v1/traces"
