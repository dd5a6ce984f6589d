"""Where a run's spans and metrics go: an OTLP/HTTP endpoint, OTLP JSON files, or both.

The OpenTelemetry SDK's own `OTLPSpanExporter` and `OTLPMetricExporter` send them (they read
the standard `OTEL_EXPORTER_OTLP_*` variables: endpoint, headers, certificates, timeout,
compression); a file holds one OTLP JSON `Export…ServiceRequest` per line, encoded by the
SDK's OTLP encoders, as the OpenTelemetry Collector's file exporter writes them. `export_run`
exports records at a run's end; `export_run_folder` does the same for an old run folder
(`labkit export-otel`), and gives the same spans and data points.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import logging
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from google.protobuf.json_format import MessageToDict
from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult, MetricsData
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from labkit.errors import RunError
from labkit.records import RequestRecord
from labkit.scrub import for_people, register_secret
from labkit.tracing.metrics import record_metrics
from labkit.tracing.settings import TracingSettings, otlp_metrics_endpoint, otlp_traces_endpoint
from labkit.tracing.spans import iter_record_spans

__all__ = [
    "ExportReport",
    "OTLPJsonFileExporter",
    "OTLPJsonMetricFileExporter",
    "RunRecords",
    "export_run",
    "export_run_folder",
    "otlp_json",
    "otlp_metrics_json",
    "read_run_records",
    "register_header_secrets",
]

#: Spans per export call (the SDK's batch processor's default batch).
_BATCH = 512
#: Fields of OTLP JSON that hold ids: hex strings there, not protobuf JSON's base64.
_ID_FIELDS = ("traceId", "spanId", "parentSpanId")


class OTLPJsonFileExporter(SpanExporter):
    """Appends each batch of spans to a file as one OTLP JSON line."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        """Write `spans` as one `ExportTraceServiceRequest` line."""
        line = json.dumps(otlp_json(spans), separators=(",", ":"))
        try:
            with self._lock, self.path.open("a", encoding="utf-8") as f:
                f.write(line + "\n")
        except OSError:
            return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        """Nothing is held open between batches."""


class OTLPJsonMetricFileExporter(MetricExporter):
    """Appends each collection of metrics to a file as one OTLP JSON line."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path

    def export(
        self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any
    ) -> MetricExportResult:
        """Write `metrics_data` as one `ExportMetricsServiceRequest` line."""
        line = json.dumps(otlp_metrics_json(metrics_data), separators=(",", ":"))
        try:
            with self.path.open("a", encoding="utf-8") as f:
                f.write(line + "\n")
        except OSError:
            return MetricExportResult.FAILURE
        return MetricExportResult.SUCCESS

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        """Nothing is buffered."""
        return True

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        """Nothing is held open between exports."""


def otlp_json(spans: Sequence[ReadableSpan]) -> dict[str, Any]:
    """`spans` as an OTLP JSON `ExportTraceServiceRequest` (ids in hex, enums as numbers,
    field names in lowerCamelCase, as the OTLP specification's JSON encoding has them)."""
    data: dict[str, Any] = MessageToDict(encode_spans(spans), use_integers_for_enums=True)
    for resource_spans in data.get("resourceSpans", []):
        for scope_spans in resource_spans.get("scopeSpans", []):
            for span in scope_spans.get("spans", []):
                _hex_ids(span)
                for link in span.get("links", []):
                    _hex_ids(link)
    return data


def otlp_metrics_json(data: MetricsData) -> dict[str, Any]:
    """`data` as an OTLP JSON `ExportMetricsServiceRequest` (labkit records no exemplars, so
    no ids need re-encoding)."""
    encoded: dict[str, Any] = MessageToDict(encode_metrics(data), use_integers_for_enums=True)
    return encoded


def _hex_ids(obj: dict[str, Any]) -> None:
    for name in _ID_FIELDS:
        if name in obj:
            obj[name] = base64.b64decode(obj[name]).hex()


def _shown(url: str) -> str:
    """`url` without user info, path or query (nothing secret in a message)."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.hostname}" + (f":{parts.port}" if parts.port else "")


@dataclass
class ExportReport:
    """What an export did: the spans handed to the exporters (up to the batch where the
    last one failed), how many each destination took, the records left out (their span
    could not be encoded), the metric data points, where they went, and what failed (one
    line each)."""

    spans: int = 0
    sent_to: str | None = None
    file: Path | None = None
    problems: list[str] = field(default_factory=list)
    metric_points: int = 0
    metrics_sent_to: str | None = None
    metrics_file: Path | None = None
    #: Spans each destination accepted, by its name in `summary`.
    accepted: dict[str, int] = field(default_factory=dict)
    #: Metric data points each destination accepted.
    metrics_accepted: dict[str, int] = field(default_factory=dict)
    #: (record id, why) of each record whose span was left out.
    skipped: list[tuple[str, str]] = field(default_factory=list)
    #: What the OpenTelemetry SDK said that was no export's failure (a malformed header
    #: variable), one cleaned line.
    notes: list[str] = field(default_factory=list)

    def summary(self) -> str:
        """One line for the user: exactly how many spans each destination took, how many
        records were skipped, and each problem."""
        parts = [f"{n} spans to {where}" for where, n in self.accepted.items()]
        line = ", ".join(parts) if parts else f"{self.spans} spans"
        line += "".join(
            f", {n} metric points to {where}" for where, n in self.metrics_accepted.items()
        )
        if self.skipped:
            record_id, why = self.skipped[0]
            line += (
                f"; {len(self.skipped)} record(s) skipped, their spans not encodable "
                f"(first: {record_id}: {why})"
            )
        return for_people(line + "".join(f"; {p}" for p in [*self.problems, *self.notes]))


def _exporters(
    settings: TracingSettings, file: Path | None, report: ExportReport
) -> list[tuple[str, SpanExporter]]:
    out: list[tuple[str, SpanExporter]] = []
    endpoint = otlp_traces_endpoint(settings)
    if endpoint is not None:
        # The config's endpoint is passed on; without one the SDK reads the variables itself.
        explicit = endpoint if settings.otlp_endpoint is not None else None
        out.append((_shown(endpoint), OTLPSpanExporter(endpoint=explicit)))
        report.sent_to = _shown(endpoint)
    if file is not None:
        file.unlink(missing_ok=True)  # the same spans again, not twice
        out.append((str(file), OTLPJsonFileExporter(file)))
        report.file = file
    return out


def _metric_exporters(
    settings: TracingSettings, file: Path | None, report: ExportReport
) -> list[tuple[str, MetricExporter]]:
    out: list[tuple[str, MetricExporter]] = []
    endpoint = otlp_metrics_endpoint(settings)
    if endpoint is not None:
        explicit = endpoint if settings.otlp_endpoint is not None else None
        out.append((_shown(endpoint), OTLPMetricExporter(endpoint=explicit)))
        report.metrics_sent_to = _shown(endpoint)
    if file is not None and settings.metrics:
        file.unlink(missing_ok=True)
        out.append((str(file), OTLPJsonMetricFileExporter(file)))
        report.metrics_file = file
    return out


def _problem(name: str, call: Callable[[], bool], sdk: _SdkLog) -> str | None:
    """Run one export; None when it succeeded, else one line saying why not (with the last
    thing the SDK logged about it, cleaned)."""
    sdk.said.clear()
    try:
        if call():
            return None
        why = "refused or did not answer"
    except Exception as exc:  # an exporter's failure never fails the run
        why = f"{type(exc).__name__}: {exc}"
    said = f" ({sdk.said[-1]})" if sdk.said else ""
    sdk.said.clear()
    return for_people(f"{name}: {why}"[:200] + said[:300])


#: The loggers of the OpenTelemetry SDK and of the HTTP stack its exporters use.
_SDK_LOGGERS = ("opentelemetry", "urllib3", "requests")


class _SdkLog(logging.Handler):
    """Keeps what the SDK logs (cleaned, its first line) instead of printing it: a header
    variable's token, a collector's reply with terminal controls, a line per retry."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.said: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        """Keep the record's first line, cleaned."""
        try:
            text = record.getMessage()
        except Exception:  # a malformed log call in a library: keep its format string
            text = str(record.msg)
        first = for_people(text).strip().splitlines()
        if first:
            self.said.append(first[0][:240])


@contextlib.contextmanager
def _sdk_logs_kept() -> Iterator[_SdkLog]:
    """While exporting: the SDK's log records go to one `_SdkLog`, not to stderr."""
    handler = _SdkLog()
    saved = []
    for name in _SDK_LOGGERS:
        logger = logging.getLogger(name)
        saved.append((logger, logger.propagate, logger.handlers[:]))
        logger.handlers = [handler]
        logger.propagate = False
    try:
        yield handler
    finally:
        for logger, propagate, handlers in saved:
            logger.handlers = handlers
            logger.propagate = propagate


#: The standard variables that carry an exporter's headers (often a token).
_HEADER_VARIABLES = (
    "OTEL_EXPORTER_OTLP_HEADERS",
    "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
    "OTEL_EXPORTER_OTLP_METRICS_HEADERS",
)


def register_header_secrets() -> None:
    """Register every value of the OTLP header variables (and the token after a
    ``Bearer``/``Basic`` scheme) with the scrubber: the SDK quotes them in its messages."""
    for variable in _HEADER_VARIABLES:
        for item in os.environ.get(variable, "").split(","):
            _, _, value = item.partition("=")
            for text in {value or item, unquote(value or item)}:
                text = text.strip()
                register_secret(text)
                scheme, _, token = text.partition(" ")
                if token and scheme.lower() in ("bearer", "basic", "token", "apikey"):
                    register_secret(token.strip())


def export_run(
    run_id: str,
    records: Iterable[RequestRecord],
    settings: TracingSettings,
    *,
    file: Path | None = None,
    metrics_file: Path | None = None,
) -> ExportReport:
    """Export the spans of `records` (`labkit.tracing.spans`) to the settings' endpoint and
    to `file` (OTLP JSON), in batches, and their metrics (`labkit.tracing.metrics`) to the
    metrics endpoint and `metrics_file`; blocking (call it off the event loop). A failed
    export is reported, never raised; a record whose span cannot be encoded is skipped
    and counted; the SDK's own log lines are kept (cleaned) for the report, not printed.
    `records` is read more than once: a list or a `RunRecords`."""
    if iter(records) is records:
        records = list(records)
    report = ExportReport()
    register_header_secrets()
    with _sdk_logs_kept() as sdk:
        exporters = _exporters(settings, file, report)
        report.notes += [f"OpenTelemetry SDK: {said}" for said in sdk.said[:1]]
        spans = iter_record_spans(run_id, records, report.skipped)
        live = dict(exporters)
        report.accepted = dict.fromkeys(live, 0)
        while live and (batch := list(itertools.islice(spans, _BATCH))):
            report.spans += len(batch)
            for name, exporter in list(live.items()):
                problem = _problem(f"spans to {name}", partial(_sent, exporter, batch), sdk)
                if problem is not None:
                    report.problems.append(problem)
                    del live[name]  # the rest would fail alike
                else:
                    report.accepted[name] += len(batch)
        for _, exporter in exporters:
            exporter.shutdown()
        metric_exporters = _metric_exporters(settings, metrics_file, report)
        data = record_metrics(run_id, records) if metric_exporters else None
        if data is not None:
            report.metric_points = sum(
                len(m.data.data_points)
                for rm in data.resource_metrics
                for sm in rm.scope_metrics
                for m in sm.metrics
            )
            for name, metric_exporter in metric_exporters:
                send = partial(_metrics_sent, metric_exporter, data)
                problem = _problem(f"metrics to {name}", send, sdk)
                if problem is not None:
                    report.problems.append(problem)
                report.metrics_accepted[name] = 0 if problem else report.metric_points
        for _, metric_exporter in metric_exporters:
            metric_exporter.shutdown()
    return report


def _sent(exporter: SpanExporter, batch: Sequence[ReadableSpan]) -> bool:
    return exporter.export(batch) is SpanExportResult.SUCCESS


def _metrics_sent(exporter: MetricExporter, data: MetricsData) -> bool:
    return exporter.export(data) is MetricExportResult.SUCCESS


#: The longest line of records.jsonl read (a longer one is counted as not a record).
MAX_RECORD_LINE_BYTES = 64 * 1024 * 1024


class RunRecords:
    """A run folder's records, read from records.jsonl a line at a time each time they are
    iterated (an export reads them three times; no pass holds them all). `skipped` counts
    the lines that were not records, once a pass has ended."""

    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / "records.jsonl"
        self.skipped = 0
        try:
            with self.path.open("rb"):
                pass
        except FileNotFoundError:
            raise RunError(f"{run_dir} is not a run folder: records.jsonl is missing") from None
        except OSError as exc:
            raise RunError(f"cannot read {self.path}: {exc}") from None

    def __iter__(self) -> Iterator[RequestRecord]:
        skipped = 0
        try:
            with self.path.open("rb") as f:
                while raw := f.readline(MAX_RECORD_LINE_BYTES + 1):
                    if len(raw) > MAX_RECORD_LINE_BYTES:
                        skipped += 1
                        while raw and not raw.endswith(b"\n"):  # the rest of the line
                            raw = f.readline(MAX_RECORD_LINE_BYTES)
                        continue
                    if not raw.strip():
                        continue
                    try:
                        yield RequestRecord.from_json_line(raw.decode("utf-8", "replace"))
                    except ValueError:
                        skipped += 1
        except OSError as exc:
            raise RunError(f"cannot read {self.path}: {exc}") from None
        self.skipped = skipped


def read_run_records(run_dir: Path) -> tuple[str, list[RequestRecord], int]:
    """An old run folder's run id, its records and how many lines were not records."""
    source = RunRecords(run_dir)
    records = list(source)
    run_id = _manifest_run_id(run_dir) or (records[0].run_id if records else None)
    if run_id is None:
        raise RunError(f"{run_dir}: no records to export")
    return run_id, records, source.skipped


def _manifest_run_id(run_dir: Path) -> str | None:
    try:
        data = json.loads((run_dir / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    run_id = data.get("run_id") if isinstance(data, dict) else None
    return run_id if isinstance(run_id, str) else None


def export_run_folder(
    run_dir: Path,
    settings: TracingSettings,
    *,
    file: Path | None = None,
    metrics_file: Path | None = None,
) -> ExportReport:
    """Export an old run's records.jsonl: the same spans and metric data points its run
    exported (or would have), reading the records from the file as they are needed."""
    records = RunRecords(run_dir)
    run_id = _manifest_run_id(run_dir) or next((r.run_id for r in records), None)
    if run_id is None:
        not_records = f" ({records.skipped} line(s) were not records)" if records.skipped else ""
        raise RunError(f"{run_dir}: no records to export{not_records}")
    report = export_run(run_id, records, settings, file=file, metrics_file=metrics_file)
    if records.skipped:
        report.problems.append(f"{records.skipped} line(s) of records.jsonl were not records")
    return report
