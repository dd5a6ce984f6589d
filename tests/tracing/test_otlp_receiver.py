"""A run's spans and metrics over OTLP/HTTP to a real receiver on 127.0.0.1, next to what the
server saw in its request headers and what the records hold; and the same spans and metric
data points exported again from the run's records.jsonl."""

from __future__ import annotations

import asyncio
import gzip
import itertools
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from google.protobuf.json_format import MessageToDict
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from typer.testing import CliRunner

from labkit.cli import app
from labkit.config import parse_config
from labkit.providers.fake import FakeSchedule
from labkit.runner import RunOptions, prepare_run
from labkit.runner.run import RunResult
from labkit.tracing.context import span_id_of, trace_id_of
from labkit.tracing.export import read_run_records
from labkit.tracing.settings import METRICS_FILE, TRACES_FILE
from labkit.truth.log import read_truth_log
from labkit.truth.process import TruthServer

pytestmark = pytest.mark.integration

SCHEDULE = FakeSchedule(first_token_ms=10, token_interval_ms=2, tokens=8)


class OTLPReceiver:
    """An OTLP/HTTP endpoint: decodes every `ExportTraceServiceRequest` sent to /v1/traces
    and every `ExportMetricsServiceRequest` sent to /v1/metrics."""

    def __init__(self) -> None:
        self.requests: list[ExportTraceServiceRequest] = []
        self.metric_requests: list[ExportMetricsServiceRequest] = []
        received = self.requests
        received_metrics = self.metric_requests

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["content-length"]))
                if self.headers.get("content-encoding") == "gzip":
                    body = gzip.decompress(body)
                assert self.headers["content-type"] == "application/x-protobuf"
                reply: bytes
                if self.path == "/v1/metrics":
                    metrics = ExportMetricsServiceRequest()
                    metrics.ParseFromString(body)
                    received_metrics.append(metrics)
                    reply = ExportMetricsServiceResponse().SerializeToString()
                else:
                    assert self.path == "/v1/traces"
                    message = ExportTraceServiceRequest()
                    message.ParseFromString(body)
                    received.append(message)
                    reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def spans(self) -> dict[str, dict[str, Any]]:
        """Every span received, by its span id (hex), as comparable data."""
        out: dict[str, dict[str, Any]] = {}
        for message in self.requests:
            for rs in message.resource_spans:
                for ss in rs.scope_spans:
                    for span in ss.spans:
                        out[span.span_id.hex()] = _comparable(
                            span.name,
                            span.trace_id.hex(),
                            span.parent_span_id.hex(),
                            span.start_time_unix_nano,
                            span.end_time_unix_nano,
                            MessageToDict(span)["attributes"],
                            [e.name for e in span.events],
                        )
        return out

    def metric_points(self) -> dict[tuple[str, str], dict[str, Any]]:
        """Every histogram data point received, as `_metric_points` gives a file's."""
        docs = [MessageToDict(m) for m in self.metric_requests]
        return _metric_points(docs)


def _metric_points(docs: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    """Histogram data points of OTLP JSON metrics requests by (metric, attributes): count,
    sum, bounds and bucket counts (their timestamps left out: the export's own)."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for doc in docs:
        for rm in doc["resourceMetrics"]:
            for sm in rm["scopeMetrics"]:
                for m in sm["metrics"]:
                    for p in m["histogram"]["dataPoints"]:
                        attrs = {a["key"]: a["value"] for a in p["attributes"]}
                        key = (m["name"], json.dumps(attrs, sort_keys=True))
                        assert key not in out
                        out[key] = {
                            "unit": m["unit"],
                            "count": int(p["count"]),
                            "sum": p["sum"],
                            "bounds": p["explicitBounds"],
                            "buckets": [int(c) for c in p["bucketCounts"]],
                        }
    return out


def _file_metric_points(path: Path) -> dict[tuple[str, str], dict[str, Any]]:
    return _metric_points([json.loads(line) for line in path.read_text().splitlines()])


def _totals(
    points: dict[tuple[str, str], dict[str, Any]], name: str, **attrs: str
) -> tuple[int, float]:
    """Count and sum over the points of `name` whose attributes include `attrs`."""
    chosen = [
        p
        for (n, a), p in points.items()
        if n == name and all(json.loads(a).get(k) == {"stringValue": v} for k, v in attrs.items())
    ]
    return sum(p["count"] for p in chosen), sum(p["sum"] for p in chosen)


def _comparable(
    name: str,
    trace_id: str,
    parent: str,
    start: int | str,
    end: int | str,
    attributes: list[dict[str, Any]],
    events: list[str],
) -> dict[str, Any]:
    attrs = {a["key"]: json.dumps(a["value"], sort_keys=True) for a in attributes}
    return {
        "name": name,
        "trace": trace_id,
        "parent": parent,
        "start": int(start),
        "end": int(end),
        "attributes": attrs,
        "events": events,
    }


def _file_spans(path: Path) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for line in path.read_text().splitlines():
        for rs in json.loads(line)["resourceSpans"]:
            for ss in rs["scopeSpans"]:
                for s in ss["spans"]:
                    out[s["spanId"]] = _comparable(
                        s["name"],
                        s["traceId"],
                        s.get("parentSpanId", ""),
                        s["startTimeUnixNano"],
                        s["endTimeUnixNano"],
                        s["attributes"],
                        [e["name"] for e in s.get("events", [])],
                    )
    return out


@pytest.fixture(scope="module")
def receiver() -> Iterator[OTLPReceiver]:
    r = OTLPReceiver()
    yield r
    r.close()


@pytest.fixture(scope="module")
def traced_run(
    tmp_path_factory: pytest.TempPathFactory, receiver: OTLPReceiver
) -> tuple[RunResult, list[dict[str, str]], dict[str, dict[str, Any]]]:
    """One run (both paths, a plain experiment and two load levels) exporting its spans to
    the receiver and to a file; what the server saw; the spans the receiver got."""
    result, seen = _run(tmp_path_factory.mktemp("traced"), receiver)
    return result, seen, receiver.spans()


@pytest.fixture(scope="module")
def sent_metrics(
    traced_run: tuple[RunResult, list[dict[str, str]], dict[str, dict[str, Any]]],
    receiver: OTLPReceiver,
) -> dict[tuple[str, str], dict[str, Any]]:
    """The metric data points the traced run sent to the receiver."""
    return receiver.metric_points()


def _run(tmp_path: Path, receiver: OTLPReceiver) -> tuple[RunResult, list[dict[str, str]]]:
    async def main() -> RunResult:
        with TruthServer.of(SCHEDULE, truth_log=log) as server:
            config = parse_config(
                {
                    "name": "traced",
                    "providers": [
                        {
                            "id": "s",
                            "kind": "openai_compatible",
                            "model": "m",
                            "base_url": server.base_url,
                        }
                    ],
                    "experiments": [
                        {
                            "kind": "single",
                            "prompt_cache": "as_sent",
                            "repeats": 2,
                            "paths": ["wire", "sdk"],
                        },
                        {"kind": "load", "concurrency": [1, 2], "requests": 4, "warmup": 1},
                    ],
                    "tracing": {"otlp_endpoint": receiver.url, "file": True},
                }
            )
            return await prepare_run(config, RunOptions(out_dir=tmp_path)).run()

    log = tmp_path / "truth.jsonl"
    result = asyncio.run(main())
    # What the server saw: the truth log keeps each request's traceparent.
    return result, [{"traceparent": t.traceparent or ""} for t in read_truth_log(log).requests]


def test_a_runs_spans_reach_an_otlp_receiver_with_the_ids_the_server_saw(
    traced_run: tuple[RunResult, list[dict[str, str]], dict[str, dict[str, Any]]],
) -> None:
    result, seen, spans = traced_run
    assert result.status == "completed"
    records = result.records
    assert records and all(r.error is None for r in records)
    assert {r.app.client_path for r in records} == {"wire", "sdk"}
    run_id = result.folder.run_id
    trace_id = trace_id_of(run_id)

    # The server saw one traceparent per request: the record's own trace and span ids.
    sent = {h["traceparent"] for h in seen}
    assert len(sent) == len(seen) == len(records)
    for r in records:
        assert r.trace is not None and r.trace.propagated
        assert f"00-{trace_id}-{r.trace.span_id}-01" in sent
        assert r.trace.request_id_sent == r.record_id
        assert r.request_id == r.record_id  # the server's echo of x-request-id, read back
        span = spans[r.trace.span_id]
        assert span["trace"] == trace_id and span["parent"] == r.trace.parent_span_id
        assert span["attributes"]["labkit.record_id"] == json.dumps({"stringValue": r.record_id})
        assert "first_token" in span["events"]

    # Parents: the run, an experiment per provider, a level per load level.
    run_span = spans[span_id_of(run_id)]
    assert run_span["parent"] == "" and run_span["name"] == f"labkit run {run_id}"
    for experiment in ("single", "load"):
        assert spans[span_id_of(run_id, "s", experiment)]["parent"] == span_id_of(run_id)
    levels = {str(r.tags["level_run"]) for r in records if "level_run" in r.tags}
    assert len(levels) == 2
    for level in levels:
        level_span = spans[span_id_of(run_id, "s", "load", level)]
        assert level_span["parent"] == span_id_of(run_id, "s", "load")
        children = [r for r in records if r.tags.get("level_run") == level]
        assert all(
            spans[r.trace.span_id]["parent"] == span_id_of(run_id, "s", "load", level)
            for r in children
            if r.trace
        )
    assert len(spans) == len(records) + len(levels) + 2 + 1

    # The file beside the records holds the same spans as were sent.
    assert _file_spans(result.folder.path / TRACES_FILE) == spans


def test_a_runs_metrics_reach_the_receiver_with_the_records_counts_and_sums(
    traced_run: tuple[RunResult, list[dict[str, str]], dict[str, dict[str, Any]]],
    sent_metrics: dict[tuple[str, str], dict[str, Any]],
) -> None:
    result, _, _ = traced_run
    records = result.records
    points = sent_metrics
    assert points

    count, total = _totals(points, "gen_ai.client.operation.duration")
    assert count == len(records)
    assert total == pytest.approx(sum(r.client.e2e_ms or 0 for r in records) / 1000)
    for kind, figure in (("input", "input_tokens"), ("output", "output_tokens")):
        values = [getattr(r.usage, figure) for r in records]
        count, total = _totals(points, "gen_ai.client.token.usage", **{"gen_ai.token.type": kind})
        assert count == sum(v is not None for v in values) > 0
        assert total == sum(v for v in values if v is not None)
    ttft = [r.client.ttft_ms for r in records if r.client.ttft_ms is not None]
    count, total = _totals(points, "gen_ai.client.operation.time_to_first_chunk")
    assert count == len(ttft) == len(records) and total == pytest.approx(sum(ttft) / 1000)
    gaps = [b - a for r in records for a, b in itertools.pairwise(r.client.event_offsets_ms)]
    count, total = _totals(points, "gen_ai.client.operation.time_per_output_chunk")
    assert count == len(gaps) > 0 and total == pytest.approx(sum(gaps) / 1000)
    decode = [r.client.decode_ms_per_token for r in records if r.client.decode_ms_per_token]
    count, total = _totals(points, "labkit.client.decode_per_token")
    assert count == len(decode) and total == pytest.approx(sum(decode) / 1000)

    # Every point's buckets hold its count; each load level and client path is its own point.
    assert all(sum(p["buckets"]) == p["count"] for p in points.values())
    for path in ("wire", "sdk"):
        count, _ = _totals(
            points, "gen_ai.client.operation.duration", **{"labkit.client_path": path}
        )
        assert count == sum(r.app.client_path == path for r in records)
    # The file beside the records holds the same points.
    assert _file_metric_points(result.folder.path / METRICS_FILE) == points


def test_exporting_the_records_later_gives_the_same_spans(
    tmp_path: Path,
    receiver: OTLPReceiver,
    traced_run: tuple[RunResult, list[dict[str, str]], dict[str, dict[str, Any]]],
    sent_metrics: dict[tuple[str, str], dict[str, Any]],
) -> None:
    result, _, during = traced_run
    later = tmp_path / "later.otlp.jsonl"
    points = sent_metrics
    cli = CliRunner().invoke(app, ["export-otel", str(result.folder.path), "--file", str(later)])
    assert cli.exit_code == 0, cli.output
    assert _file_spans(later) == during
    assert _file_metric_points(tmp_path / METRICS_FILE) == points  # beside the spans
    # And over OTLP/HTTP again, to the same receiver.
    receiver.requests.clear()
    receiver.metric_requests.clear()
    cli = CliRunner().invoke(
        app, ["export-otel", str(result.folder.path), "--endpoint", receiver.url]
    )
    assert cli.exit_code == 0, cli.output
    assert receiver.spans() == during
    assert receiver.metric_points() == points
    run_id, records, skipped = read_run_records(result.folder.path)
    assert run_id == result.folder.run_id and skipped == 0 and len(records) == len(result.records)


def test_a_collector_that_is_not_there_is_reported_not_raised(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import socket

    from labkit.tracing.export import export_run
    from labkit.tracing.settings import TracingSettings
    from tests.support.records import make_record

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "1")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_METRICS_TIMEOUT", "1")
    settings = TracingSettings(otlp_endpoint=f"http://127.0.0.1:{port}")
    file = tmp_path / TRACES_FILE
    metrics_file = tmp_path / METRICS_FILE
    report = export_run("run-1", [make_record()], settings, file=file, metrics_file=metrics_file)
    assert report.spans == 3 and len(report.problems) == 2, report  # spans and metrics
    assert f"127.0.0.1:{port}" in report.summary()
    assert len(_file_spans(file)) == 3  # the files are written all the same
    assert _file_metric_points(metrics_file)
