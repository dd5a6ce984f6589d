"""A peer's results as a labkit run: records `labkit.read_runs`, the report and compare read.

`import_results` writes a run folder (``records.jsonl``, ``manifest.json`` and
``peer.json``) from any results file `labkit.scoring.peers` reads. Each request becomes a
`RequestRecord` holding only what the peer measured, in labkit's fields: ``client.ttft_ms``,
``client.e2e_ms``, ``client.last_token_ms`` (TTFT + the peer's decode),
``client.decode_ms_per_token`` and ``client.output_tokens_per_s`` (labkit's definitions
applied to the peer's own decode and token count), ``usage.*_tokens`` and ``error``. Every
other client field stays null; ``peer.json`` names them (``not_measured``), and `labkit
compare` says "not measured by RUN" for a gate metric a run has no value of at all.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from labkit.errors import RunError
from labkit.records import (
    ClientTimings,
    DecodeNullReason,
    ErrorKind,
    RecordError,
    RequestRecord,
    Usage,
)
from labkit.scoring.peers import ClientRequest, ClientResults

__all__ = ["PEER_FILE", "ImportedRun", "import_results", "to_records"]

#: The file in an imported run folder that says where its records came from.
PEER_FILE = "peer.json"


@dataclass(frozen=True)
class ImportedRun:
    """What `import_results` wrote."""

    folder: Path
    records: int
    not_measured: list[str]


def _started_at(req: ClientRequest, fallback: datetime) -> datetime:
    if req.start_wall_ns is not None:
        return datetime.fromtimestamp(req.start_wall_ns / 1e9, UTC)
    return fallback


def _record(
    req: ClientRequest,
    tool: str,
    run_id: str,
    provider: str,
    experiment: str,
    model: str,
    fallback: datetime,
) -> RequestRecord:
    decode = req.decode_ms
    tokens = req.output_tokens
    per_token = decode / (tokens - 1) if decode is not None and tokens and tokens > 1 else None
    last = req.ttft_ms + decode if req.ttft_ms is not None and decode is not None else None
    why_null: DecodeNullReason | None = None  # a null decode always says why (issue 44)
    if per_token is None:
        why_null = "not_measured" if decode is None or tokens is None else "one_token"
    client = ClientTimings(
        ttft_ms=req.ttft_ms,
        e2e_ms=req.e2e_ms,
        last_token_ms=last,
        decode_ms_per_token=per_token,
        output_tokens_per_s=1000.0 / per_token if per_token else None,
        decode_null_reason=why_null,
    )
    usage = Usage(
        input_tokens=None if req.input_tokens is None else int(req.input_tokens),
        output_tokens=None if tokens is None else int(tokens),
    )
    error = None
    if not req.ok:
        error = RecordError(kind=ErrorKind.STREAM_ERROR, message=(req.error or "failed")[:300])
    return RequestRecord(
        run_id=run_id,
        record_id=f"{run_id}-{req.index}",
        experiment=experiment,
        provider=provider,
        provider_kind=f"peer:{tool}",
        model=model,
        prompt_id=f"request-{req.index}",
        prompt_chars=0,
        prompt_bytes=0,
        started_at=_started_at(req, fallback),
        t_start_mono_ns=None if req.start_mono_ns is None else int(req.start_mono_ns),
        client=client,
        usage=usage,
        response_id=req.request_id,
        error=error,
        tags={"imported_from": "peer"},
    )


def to_records(
    results: ClientResults, run_id: str, provider: str, experiment: str, model: str
) -> list[RequestRecord]:
    """The peer's requests as labkit records (a start on the monotonic clock only is
    placed at the results file's modification time: its wall time is not known)."""
    try:
        fallback = datetime.fromtimestamp(os.path.getmtime(results.path), UTC)
    except OSError:
        fallback = datetime.now(UTC)
    tool = results.tool.split()[0]
    return [
        _record(r, tool, run_id, provider, experiment, model, fallback) for r in results.requests
    ]


def _not_measured(records: list[RequestRecord]) -> list[str]:
    names = []
    for name in ClientTimings.model_fields:
        if not any(getattr(r.client, name) not in (None, []) for r in records):
            names.append(f"client.{name}")
    return names


def import_results(
    results: ClientResults,
    out_dir: Path,
    *,
    provider: str | None = None,
    experiment: str = "load",
    model: str = "unknown",
) -> ImportedRun:
    """Write `results` as a run folder under `out_dir` (named after the tool and the time)."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    run_id = f"{results.tool.split()[0]}-import-{stamp}"
    folder = out_dir / run_id
    try:
        folder.mkdir(parents=True, exist_ok=False)
    except OSError as exc:
        raise RunError(f"cannot create run folder {folder}: {exc.strerror or exc}") from None
    records = to_records(results, run_id, provider or results.tool.split()[0], experiment, model)
    missing = _not_measured(records)
    ended = max((r.started_at for r in records), default=datetime.now(UTC))
    started = min((r.started_at for r in records), default=ended)
    manifest = {
        "run_id": run_id,
        "name": f"{results.label} (imported)",
        "labkit_version": None,
        "packages": {results.tool.split()[0]: results.version},
        "started_at": started.isoformat(),
        "ended_at": ended.isoformat(),
        "status": "completed",
        "records": len(records),
    }
    peer = {
        "tool": results.tool,
        "version": results.version,
        "source": str(results.path),
        "not_measured": missing,
    }
    try:
        with (folder / "records.jsonl").open("w", encoding="utf-8") as f:
            for rec in records:
                f.write(rec.model_dump_json() + "\n")
        (folder / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n", "utf-8")
        (folder / PEER_FILE).write_text(json.dumps(peer, indent=2) + "\n", "utf-8")
    except OSError as exc:
        raise RunError(f"cannot write the run folder {folder}: {exc.strerror or exc}") from None
    return ImportedRun(folder, len(records), missing)
