"""Where a run's spans go: an OTLP/HTTP endpoint, an OTLP JSON file, or both.

The OpenTelemetry SDK's own `OTLPSpanExporter` sends them (it reads the standard
`OTEL_EXPORTER_OTLP_*` variables: endpoint, headers, certificates, timeout, compression);
the file holds one OTLP JSON `ExportTraceServiceRequest` per line, encoded by the SDK's
OTLP encoder, as the OpenTelemetry Collector's file exporter writes them. `export_run`
exports records at a run's end; `export_run_folder` does the same for an old run folder
(`labkit export-otel`), and gives the same spans.
"""

from __future__ import annotations

import base64
import itertools
import json
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from google.protobuf.json_format import MessageToDict
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from labkit.errors import RunError
from labkit.records import RequestRecord
from labkit.tracing.settings import TracingSettings, otlp_traces_endpoint
from labkit.tracing.spans import iter_record_spans

__all__ = [
    "ExportReport",
    "OTLPJsonFileExporter",
    "export_run",
    "export_run_folder",
    "otlp_json",
    "read_run_records",
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
    last one failed), where they went, and what failed (one line each)."""

    spans: int = 0
    sent_to: str | None = None
    file: Path | None = None
    problems: list[str] = field(default_factory=list)

    def summary(self) -> str:
        """One line for the user."""
        where = [w for w in (self.sent_to, str(self.file) if self.file else None) if w]
        line = f"{self.spans} spans" + (f" to {' and '.join(where)}" if where else "")
        return line + "".join(f"; {p}" for p in self.problems)


def _exporters(
    settings: TracingSettings, file: Path | None, report: ExportReport
) -> list[tuple[str, SpanExporter]]:
    out: list[tuple[str, SpanExporter]] = []
    endpoint = otlp_traces_endpoint(settings)
    if endpoint is not None:
        # The config's endpoint is passed on; without one the SDK reads the variables itself.
        explicit = endpoint if settings.otlp_endpoint is not None else None
        out.append((f"OTLP {_shown(endpoint)}", OTLPSpanExporter(endpoint=explicit)))
        report.sent_to = _shown(endpoint)
    if file is not None:
        file.unlink(missing_ok=True)  # the same spans again, not twice
        out.append((str(file), OTLPJsonFileExporter(file)))
        report.file = file
    return out


def export_run(
    run_id: str,
    records: Iterable[RequestRecord],
    settings: TracingSettings,
    *,
    file: Path | None = None,
) -> ExportReport:
    """Export the spans of `records` (`labkit.tracing.spans`) to the settings' endpoint and
    to `file` (OTLP JSON), in batches; blocking (call it off the event loop). A failed
    export is reported, never raised."""
    report = ExportReport()
    exporters = _exporters(settings, file, report)
    if not exporters:
        return report
    spans = iter_record_spans(run_id, records)
    live = dict(exporters)
    while live and (batch := list(itertools.islice(spans, _BATCH))):
        report.spans += len(batch)
        for name, exporter in list(live.items()):
            try:
                ok = exporter.export(batch) is SpanExportResult.SUCCESS
                problem = None if ok else f"{name} refused or did not answer"
            except Exception as exc:  # an exporter's failure never fails the run
                problem = f"{name}: {type(exc).__name__}: {exc}"[:200]
            if problem is not None:
                report.problems.append(problem)
                del live[name]  # the rest would fail alike
    for _, exporter in exporters:
        exporter.shutdown()
    return report


def read_run_records(run_dir: Path) -> tuple[str, list[RequestRecord], int]:
    """An old run folder's run id, its records and how many lines were not records."""
    path = run_dir / "records.jsonl"
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except FileNotFoundError:
        raise RunError(f"{run_dir} is not a run folder: records.jsonl is missing") from None
    except OSError as exc:
        raise RunError(f"cannot read {path}: {exc}") from None
    records: list[RequestRecord] = []
    skipped = 0
    for line in lines:
        if not line.strip():
            continue
        try:
            records.append(RequestRecord.from_json_line(line))
        except ValueError:
            skipped += 1
    run_id = _manifest_run_id(run_dir) or (records[0].run_id if records else None)
    if run_id is None:
        raise RunError(f"{run_dir}: no records to export")
    return run_id, records, skipped


def _manifest_run_id(run_dir: Path) -> str | None:
    try:
        data = json.loads((run_dir / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    run_id = data.get("run_id") if isinstance(data, dict) else None
    return run_id if isinstance(run_id, str) else None


def export_run_folder(
    run_dir: Path, settings: TracingSettings, *, file: Path | None = None
) -> ExportReport:
    """Export an old run's records.jsonl: the same spans its run exported (or would have)."""
    run_id, records, skipped = read_run_records(run_dir)
    report = export_run(run_id, records, settings, file=file)
    if skipped:
        report.problems.append(f"{skipped} line(s) of records.jsonl were not records")
    return report
