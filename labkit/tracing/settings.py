"""The `tracing:` block of a config (`labkit.config.LabConfig.tracing`)."""

from __future__ import annotations

import os

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = [
    "METRICS_FILE",
    "TRACES_FILE",
    "TracingSettings",
    "otlp_metrics_endpoint",
    "otlp_traces_endpoint",
]

#: The OTLP JSON file written beside records.jsonl (`tracing.file: true`).
TRACES_FILE = "traces.otlp.jsonl"
#: The run's metrics as OTLP JSON, beside records.jsonl (`tracing.file: true`).
METRICS_FILE = "metrics.otlp.jsonl"


class TracingSettings(BaseModel):
    """Trace context on every request, and where the run's spans go when it ends."""

    model_config = ConfigDict(extra="forbid")

    headers: bool = Field(
        default=True,
        description="Send a W3C `traceparent` and an `x-request-id` with every request (both "
        "paths); false: nothing is sent (the record keeps its ids all the same).",
    )
    otlp_endpoint: str | None = Field(
        default=None,
        description="An OTLP/HTTP collector's base URL (`http://127.0.0.1:4318`; spans go to "
        "`/v1/traces`) to send the run's spans to when it ends. Absent: the standard "
        "`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` / `OTEL_EXPORTER_OTLP_ENDPOINT` variables, when "
        "set; neither: no spans are sent.",
    )
    file: bool = Field(
        default=False,
        description=f"Write the run's spans as OTLP JSON to `{TRACES_FILE}` beside the "
        "records when it ends.",
    )

    metrics: bool = Field(
        default=True,
        description="Export the run's OpenTelemetry metrics (GenAI client histograms, "
        "`labkit.tracing.metrics`) with its spans: to `/v1/metrics` of the same endpoint "
        "(or `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`) and to " + f"`{METRICS_FILE}` with `file`.",
    )

    @field_validator("otlp_endpoint")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError("expected an http:// or https:// URL")
        return value


_ENV_ENDPOINTS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")


def otlp_traces_endpoint(settings: TracingSettings) -> str | None:
    """The OTLP/HTTP traces URL spans are sent to: the config's endpoint + `/v1/traces`;
    else the one the standard variables name (the OpenTelemetry SDK reads them itself; this
    only says where); None when neither is set."""
    if settings.otlp_endpoint is not None:
        return settings.otlp_endpoint.rstrip("/") + "/v1/traces"
    traces = os.environ.get(_ENV_ENDPOINTS[0])
    if traces:
        return traces
    base = os.environ.get(_ENV_ENDPOINTS[1])
    return base.rstrip("/") + "/v1/traces" if base else None


_ENV_METRICS_ENDPOINTS = ("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")


def otlp_metrics_endpoint(settings: TracingSettings) -> str | None:
    """The OTLP/HTTP metrics URL, found as `otlp_traces_endpoint` finds the traces one (the
    config's endpoint + `/v1/metrics`, else the standard variables); None when neither is
    set, `metrics` is off, or the standard `OTEL_METRICS_EXPORTER=none` says to send none (a
    collector that takes only traces, such as Jaeger's)."""
    if not settings.metrics or os.environ.get("OTEL_METRICS_EXPORTER", "").strip() == "none":
        return None
    if settings.otlp_endpoint is not None:
        return settings.otlp_endpoint.rstrip("/") + "/v1/metrics"
    metrics = os.environ.get(_ENV_METRICS_ENDPOINTS[0])
    if metrics:
        return metrics
    base = os.environ.get(_ENV_METRICS_ENDPOINTS[1])
    return base.rstrip("/") + "/v1/metrics" if base else None
