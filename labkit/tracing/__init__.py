"""One request, one trace: W3C trace context out, OpenTelemetry spans and metrics from every
record.

`context` gives each request its ids and headers (no OpenTelemetry import: it runs on every
request); `spans` turns records into OpenTelemetry spans, `metrics` into the GenAI client
histograms, and `export` sends both to an OTLP endpoint or writes them to OTLP JSON files,
at a run's end or from an old run's records.jsonl (`labkit export-otel`). docs/tracing.md
says what each span and metric holds.
"""

from labkit.tracing.context import request_trace, trace_headers
from labkit.tracing.settings import TracingSettings

__all__ = ["TracingSettings", "request_trace", "trace_headers"]
