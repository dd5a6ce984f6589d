"""One request, one trace: W3C trace context out, OpenTelemetry spans from every record.

`context` gives each request its ids and headers (no OpenTelemetry import: it runs on every
request); `spans` turns records into OpenTelemetry spans and `export` sends them to an OTLP
endpoint or writes them to an OTLP JSON file, at a run's end or from an old run's
records.jsonl (`labkit export-otel`). docs/tracing.md says what each span holds.
"""

from labkit.tracing.context import request_trace, trace_headers
from labkit.tracing.settings import TracingSettings

__all__ = ["TracingSettings", "request_trace", "trace_headers"]
