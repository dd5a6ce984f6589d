"""Records → OpenTelemetry metrics: every record's figures in the GenAI client histograms and
labkit's own, with the conventions' attributes, and the same points however often built."""

from __future__ import annotations

import itertools
import json
from bisect import bisect_left
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    Histogram,
    HistogramDataPoint,
    MetricsData,
)

from labkit.records import RequestRecord
from labkit.tracing.export import export_run, otlp_metrics_json
from labkit.tracing.metrics import INSTRUMENTS, record_metrics
from labkit.tracing.settings import METRICS_FILE, TracingSettings, otlp_metrics_endpoint
from tests.support.records import make_record

pytestmark = pytest.mark.unit

Key = tuple[str, frozenset[tuple[str, Any]]]


def _points(data: MetricsData | None) -> dict[Key, HistogramDataPoint]:
    assert data is not None
    out: dict[Key, HistogramDataPoint] = {}
    for rm in data.resource_metrics:
        assert rm.resource.attributes["labkit.run_id"] == "run-1"
        for sm in rm.scope_metrics:
            assert sm.scope.name == "labkit"
            for metric in sm.metrics:
                for point in metric.data.data_points:
                    assert isinstance(point, HistogramDataPoint)
                    out[(metric.name, frozenset(point.attributes.items()))] = point
    return out


def _one(points: dict[Key, HistogramDataPoint], name: str, **attrs: Any) -> HistogramDataPoint:
    found = [
        p for (n, a), p in points.items() if n == name and set(attrs.items()) <= dict(a).items()
    ]
    assert len(found) == 1, (name, attrs, found)
    return found[0]


def _records() -> list[RequestRecord]:
    return [
        make_record(ttft_ms=100.0, decode_ms_per_token=10.0, output_tokens=20, input_tokens=50),
        make_record(ttft_ms=300.0, decode_ms_per_token=5.0, output_tokens=8, input_tokens=900),
        make_record(error_kind="timeout", ttft_ms=None, output_tokens=None, input_tokens=None),
        make_record(run_id="another-run"),
    ]


def test_every_records_figures_reach_the_genai_histograms() -> None:
    records = _records()
    ok, slow, failed = records[:3]
    points = _points(record_metrics("run-1", records))
    attrs = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "llamacpp",
        "gen_ai.request.model": "m",
        "labkit.provider": "local",
        "labkit.experiment": "single",
        "labkit.client_path": "wire",
        "labkit.warmup": False,
    }
    duration = points[("gen_ai.client.operation.duration", frozenset(attrs.items()))]
    assert duration.count == 2  # the other run's record is not this run's
    assert duration.sum == pytest.approx((ok.client.e2e_ms + slow.client.e2e_ms) / 1000)  # type: ignore[operator]
    assert list(duration.explicit_bounds)[:3] == [0.01, 0.02, 0.04]
    # Each value in its bucket: (bound[i-1], bound[i]].
    expected = [0] * (len(duration.explicit_bounds) + 1)
    for r in (ok, slow):
        expected[bisect_left(duration.explicit_bounds, r.client.e2e_ms / 1000)] += 1  # type: ignore[operator]
    assert list(duration.bucket_counts) == expected

    failed_duration = _one(points, "gen_ai.client.operation.duration", **{"error.type": "timeout"})
    assert failed_duration.count == 1

    inputs = _one(points, "gen_ai.client.token.usage", **{"gen_ai.token.type": "input"})
    outputs = _one(points, "gen_ai.client.token.usage", **{"gen_ai.token.type": "output"})
    assert (inputs.count, inputs.sum) == (2, 950)
    assert (outputs.count, outputs.sum) == (2, 28)
    assert list(inputs.explicit_bounds)[:4] == [1, 4, 16, 64]

    ttfc = _one(points, "gen_ai.client.operation.time_to_first_chunk")
    assert (ttfc.count, ttfc.sum) == (2, pytest.approx(0.4))
    chunks = _one(points, "gen_ai.client.operation.time_per_output_chunk")
    gaps = [b - a for r in (ok, slow) for a, b in itertools.pairwise(r.client.event_offsets_ms)]
    assert chunks.count == len(gaps) and chunks.sum == pytest.approx(sum(gaps) / 1000)
    decode = _one(points, "labkit.client.decode_per_token")
    assert (decode.count, decode.sum) == (2, pytest.approx(0.015))
    assert failed.error is not None


def test_stamp_lateness_is_one_value_per_output_event() -> None:
    record = make_record(stamp_lateness_ms=[0.01, 0.02, 3.0])
    points = _points(record_metrics("run-1", [record]))
    lateness = _one(points, "labkit.client.stamp_lateness")
    assert (lateness.count, lateness.sum) == (3, pytest.approx(0.00303))


def test_the_same_records_give_the_same_points() -> None:
    records = _records()

    def comparable(data: MetricsData | None) -> Any:
        assert data is not None
        doc = otlp_metrics_json(data)
        for rm in doc["resourceMetrics"]:
            for sm in rm["scopeMetrics"]:
                for m in sm["metrics"]:
                    for p in m["histogram"]["dataPoints"]:
                        del p["startTimeUnixNano"], p["timeUnixNano"]
                    m["histogram"]["dataPoints"].sort(key=lambda p: json.dumps(p["attributes"]))
        return doc

    first = comparable(record_metrics("run-1", records))
    assert first == comparable(record_metrics("run-1", list(reversed(records))))
    names = {m["name"] for m in first["resourceMetrics"][0]["scopeMetrics"][0]["metrics"]}
    assert names <= {i.name for i in INSTRUMENTS} and "gen_ai.client.operation.duration" in names
    assert record_metrics("nobody", records) is None


@pytest.mark.parametrize(
    ("preference", "temporality"),
    [
        (None, AggregationTemporality.CUMULATIVE),
        ("delta", AggregationTemporality.DELTA),
        ("LOWMEMORY", AggregationTemporality.DELTA),
        ("CUMULATIVE", AggregationTemporality.CUMULATIVE),
    ],
)
def test_the_standard_temporality_preference_is_honoured(
    monkeypatch: pytest.MonkeyPatch, preference: str | None, temporality: AggregationTemporality
) -> None:
    name = "OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE"
    if preference is None:
        monkeypatch.delenv(name, raising=False)
    else:
        monkeypatch.setenv(name, preference)
    data = record_metrics("run-1", _records())
    assert data is not None
    histograms = [m.data for sm in data.resource_metrics[0].scope_metrics for m in sm.metrics]
    assert histograms and all(isinstance(h, Histogram) for h in histograms)
    assert {h.aggregation_temporality for h in histograms if isinstance(h, Histogram)} == {
        temporality
    }
    durations = [
        p for (n, _), p in _points(data).items() if n == "gen_ai.client.operation.duration"
    ]
    assert sorted(p.count for p in durations) == [1, 2]  # the same points either way


def test_metrics_follow_the_spans_endpoint_unless_off(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_METRICS_EXPORTER",
    ):
        monkeypatch.delenv(name, raising=False)
    url = "http://127.0.0.1:4318"
    assert otlp_metrics_endpoint(TracingSettings(otlp_endpoint=url)) == url + "/v1/metrics"
    assert otlp_metrics_endpoint(TracingSettings(otlp_endpoint=url, metrics=False)) is None
    assert otlp_metrics_endpoint(TracingSettings()) is None
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", url + "/")
    assert otlp_metrics_endpoint(TracingSettings()) == url + "/v1/metrics"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "http://h:1/m")
    assert otlp_metrics_endpoint(TracingSettings()) == "http://h:1/m"
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "none")
    assert otlp_metrics_endpoint(TracingSettings(otlp_endpoint=url)) is None


def test_the_file_holds_one_metrics_request(tmp_path: Path) -> None:
    file = tmp_path / METRICS_FILE
    report = export_run("run-1", _records(), TracingSettings(file=True), metrics_file=file)
    assert report.problems == [] and report.metrics_file == file
    (line,) = file.read_text().splitlines()
    doc = json.loads(line)
    metrics = doc["resourceMetrics"][0]["scopeMetrics"][0]["metrics"]
    points = sum(len(m["histogram"]["dataPoints"]) for m in metrics)
    assert points == report.metric_points > 0
    assert "metric points" in report.summary()
    off = export_run(
        "run-1", _records(), TracingSettings(file=True, metrics=False), metrics_file=file
    )
    assert off.metric_points == 0 and off.metrics_file is None
