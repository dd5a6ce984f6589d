"""Records → OpenTelemetry metrics: the GenAI client metrics and labkit's own, as histograms.

Every value comes from a record (never from a clock read here), so a run's metrics are the
same data points (counts, sums, bucket counts) whether they are built as it ends or later
from its records.jsonl; only the points' timestamps, which the SDK stamps when it collects,
differ. The OpenTelemetry SDK aggregates them (its explicit-bucket histograms, with the
semantic conventions' advice buckets where they give some); `labkit.tracing.export` sends
them. docs/tracing.md lists the instruments and their attributes.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterable
from dataclasses import dataclass

from opentelemetry.sdk.metrics import AlwaysOffExemplarFilter, Histogram, MeterProvider
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    InMemoryMetricReader,
    MetricsData,
)
from opentelemetry.util.types import Attributes

from labkit.records import RequestRecord
from labkit.tracing.context import level_key
from labkit.tracing.spans import SCOPE, record_duration_ms, run_resource

__all__ = ["INSTRUMENTS", "Instrument", "record_metrics"]

#: Semantic conventions' advice for `gen_ai.client.operation.duration` (seconds); used for
#: the other GenAI client latencies too (the conventions give them the same).
_GENAI_SECONDS = tuple(0.01 * 2**i for i in range(14))  # 0.01, 0.02, 0.04, … 81.92
#: Semantic conventions' advice for `gen_ai.client.token.usage`.
_GENAI_TOKENS = tuple(float(4**i) for i in range(14))  # 1, 4, 16, … 67108864
#: Time per output token: 0.5 ms (a fast server's decode) to 1 s, about two per decade.
_PER_TOKEN_SECONDS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)
#: Stamp lateness: 10 µs (the kernel's stamps) to 100 ms (a stalled event loop).
_LATENESS_SECONDS = (1e-5, 2e-5, 5e-5, 1e-4, 2e-4, 5e-4, 0.001, 0.002, 0.005, 0.01, 0.02, 0.1)


@dataclass(frozen=True)
class Instrument:
    """One histogram labkit records: its name, unit, description and bucket boundaries."""

    name: str
    unit: str
    description: str
    boundaries: tuple[float, ...]


DURATION = Instrument(
    "gen_ai.client.operation.duration",
    "s",
    "GenAI operation duration: t_start to the end of the stream (client.e2e_ms).",
    _GENAI_SECONDS,
)
TOKEN_USAGE = Instrument(
    "gen_ai.client.token.usage",
    "{token}",
    "Number of input and output tokens used (usage as the provider reported it).",
    _GENAI_TOKENS,
)
TIME_TO_FIRST_CHUNK = Instrument(
    "gen_ai.client.operation.time_to_first_chunk",
    "s",
    "t_start to the first event carrying output (client.ttft_ms).",
    _GENAI_SECONDS,
)
TIME_PER_OUTPUT_CHUNK = Instrument(
    "gen_ai.client.operation.time_per_output_chunk",
    "s",
    "Gap before each output event after the first (client.event_offsets_ms).",
    _GENAI_SECONDS,
)
TIME_TO_FIRST_TEXT = Instrument(
    "labkit.client.ttft_text",
    "s",
    "t_start to the first event carrying visible text (client.ttft_text_ms).",
    _GENAI_SECONDS,
)
DECODE_PER_TOKEN = Instrument(
    "labkit.client.decode_per_token",
    "s",
    "Decode time per output token after the first (client.decode_ms_per_token).",
    _PER_TOKEN_SECONDS,
)
STAMP_LATENESS = Instrument(
    "labkit.client.stamp_lateness",
    "s",
    "How late each output event's stamp is, the self-check (client.stamp_lateness_ms).",
    _LATENESS_SECONDS,
)
#: Every instrument, in the order they are created.
INSTRUMENTS = (
    DURATION,
    TOKEN_USAGE,
    TIME_TO_FIRST_CHUNK,
    TIME_PER_OUTPUT_CHUNK,
    TIME_TO_FIRST_TEXT,
    DECODE_PER_TOKEN,
    STAMP_LATENESS,
)


def record_attributes(record: RequestRecord) -> dict[str, str | bool]:
    """A record's data-point attributes: the GenAI conventions' (operation, provider, model,
    error type) and labkit's few low-cardinality ones (provider id, experiment, load level,
    client path, warm-up)."""
    attrs: dict[str, str | bool] = {"gen_ai.operation.name": "chat"}
    if record.provider_kind:
        attrs["gen_ai.provider.name"] = record.provider_kind
    if record.model:
        attrs["gen_ai.request.model"] = record.model
    if record.error is not None:
        attrs["error.type"] = record.error.kind.value
    attrs["labkit.provider"] = record.provider
    attrs["labkit.experiment"] = record.experiment
    level = level_key(record.tags)
    if level is not None:
        attrs["labkit.level_run"] = level
    if record.app.client_path:
        attrs["labkit.client_path"] = record.app.client_path
    attrs["labkit.warmup"] = record.warmup
    return attrs


def record_values(record: RequestRecord) -> dict[Instrument, list[tuple[float, Attributes]]]:
    """What `record` adds to each instrument: its values (seconds, tokens) with their
    attributes. Only figures the record holds; an absent one adds nothing."""
    attrs = record_attributes(record)
    c = record.client
    out: dict[Instrument, list[tuple[float, Attributes]]] = {
        DURATION: [(record_duration_ms(record) / 1000, attrs)]
    }
    tokens: list[tuple[float, Attributes]] = [
        (float(n), {**attrs, "gen_ai.token.type": kind})
        for kind, n in (
            ("input", record.usage.input_tokens),
            ("output", record.usage.output_tokens),
        )
        if n is not None
    ]
    if tokens:
        out[TOKEN_USAGE] = tokens
    for instrument, ms in (
        (TIME_TO_FIRST_CHUNK, c.ttft_ms),
        (TIME_TO_FIRST_TEXT, c.ttft_text_ms),
        (DECODE_PER_TOKEN, c.decode_ms_per_token),
    ):
        if ms is not None:
            out[instrument] = [(ms / 1000, attrs)]
    offsets = c.event_offsets_ms
    gaps = [(b - a) / 1000 for a, b in itertools.pairwise(offsets)]
    if gaps:
        out[TIME_PER_OUTPUT_CHUNK] = [(g, attrs) for g in gaps]
    lateness = [ms / 1000 for ms in c.stamp_lateness_ms or ()]
    if lateness:
        out[STAMP_LATENESS] = [(v, attrs) for v in lateness]
    return out


def histogram_temporality() -> AggregationTemporality:
    """The temporality the standard `OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE` asks
    of histograms, read as the SDK's OTLP exporters read it (`DELTA` and `LOWMEMORY`: delta;
    else cumulative). A backend that takes only deltas (Datadog, Dynatrace) keeps a one-off
    export's points only as deltas; the counts, sums and buckets are the same either way."""
    preference = os.environ.get("OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE", "")
    if preference.strip().upper() in ("DELTA", "LOWMEMORY"):
        return AggregationTemporality.DELTA
    return AggregationTemporality.CUMULATIVE


def record_metrics(run_id: str, records: Iterable[RequestRecord]) -> MetricsData | None:
    """The metrics of a run's `records` (those of `run_id`), aggregated by the SDK into one
    `MetricsData` (one collection; `histogram_temporality`); None when there are none."""
    reader = InMemoryMetricReader(preferred_temporality={Histogram: histogram_temporality()})
    provider = MeterProvider(
        metric_readers=[reader],
        resource=run_resource(run_id),
        shutdown_on_exit=False,
        # An exemplar would carry a clock's time, not the record's: none, whatever the
        # environment's OTEL_METRICS_EXEMPLAR_FILTER says.
        exemplar_filter=AlwaysOffExemplarFilter(),
    )
    meter = provider.get_meter(SCOPE.name)
    histograms = {
        i: meter.create_histogram(
            i.name,
            unit=i.unit,
            description=i.description,
            explicit_bucket_boundaries_advisory=i.boundaries,
        )
        for i in INSTRUMENTS
    }
    seen = False
    for record in records:
        if record.run_id != run_id:
            continue
        seen = True
        for instrument, values in record_values(record).items():
            histogram = histograms[instrument]
            for value, attrs in values:
                histogram.record(value, attrs)
    data = reader.get_metrics_data() if seen else None
    provider.shutdown()
    return data
