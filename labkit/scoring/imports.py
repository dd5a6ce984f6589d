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
import shutil
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from pydantic import ValidationError

from labkit.errors import ConfigError, RunError
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
    return list(_iter_records(results, results.requests, run_id, provider, experiment, model))


def _iter_records(
    results: ClientResults,
    requests: Iterable[ClientRequest],
    run_id: str,
    provider: str,
    experiment: str,
    model: str,
) -> Iterator[RequestRecord]:
    try:
        fallback = datetime.fromtimestamp(os.path.getmtime(results.path), UTC)
    except (OSError, ValueError, OverflowError):
        fallback = datetime.now(UTC)
    tool = results.tool.split()[0]
    for req in requests:
        try:
            yield _record(req, tool, run_id, provider, experiment, model, fallback)
        except (ValidationError, ValueError, OverflowError, OSError) as exc:
            first = exc.errors()[0]["msg"] if isinstance(exc, ValidationError) else str(exc)
            raise ConfigError(
                f"{results.path}: request {req.index} is no labkit record ({first[:120]})"
            ) from None


def import_results(
    results: ClientResults,
    out_dir: Path,
    *,
    provider: str | None = None,
    experiment: str = "load",
    model: str = "unknown",
    requests: Iterable[ClientRequest] | None = None,
) -> ImportedRun:
    """Write `results` as a run folder under `out_dir` (named after the tool and the time).

    `requests` (default: ``results.requests``) are written one at a time as they come
    (`labkit.scoring.peers.stream_results` reads them so), into a hidden folder renamed to
    its name when every one is written: a results file found faulty half-way leaves no
    run folder behind.
    """
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    tool = results.tool.split()[0]
    run_id = f"{tool}-import-{stamp}"
    folder = out_dir / run_id
    if folder.exists() or folder.is_symlink():
        raise RunError(f"cannot create run folder {folder}: it exists")
    partial = out_dir / f".{run_id}.partial"
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        partial.mkdir()
    except OSError as exc:
        raise RunError(f"cannot create run folder {folder}: {exc.strerror or exc}") from None
    try:
        written = _write_run(
            results, requests, partial, run_id, provider or tool, experiment, model
        )
        partial.rename(folder)
    except OSError as exc:
        shutil.rmtree(partial, ignore_errors=True)
        raise RunError(f"cannot write the run folder {folder}: {exc.strerror or exc}") from None
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    return ImportedRun(folder, *written)


def _write_run(
    results: ClientResults,
    requests: Iterable[ClientRequest] | None,
    folder: Path,
    run_id: str,
    provider: str,
    experiment: str,
    model: str,
) -> tuple[int, list[str]]:
    """Write records.jsonl a record at a time, then manifest.json and peer.json; the count
    and the fields no record has a value of."""
    rows = results.requests if requests is None else requests
    measured: set[str] = set()
    count = 0
    started: datetime | None = None
    ended: datetime | None = None
    with (folder / "records.jsonl").open("w", encoding="utf-8") as f:
        for rec in _iter_records(results, rows, run_id, provider, experiment, model):
            f.write(rec.model_dump_json() + "\n")
            count += 1
            measured.update(
                name
                for name in ClientTimings.model_fields
                if getattr(rec.client, name) not in (None, [])
            )
            started = rec.started_at if started is None else min(started, rec.started_at)
            ended = rec.started_at if ended is None else max(ended, rec.started_at)
    if count == 0:
        raise ConfigError(f"{results.path}: no requests to import")
    missing = [f"client.{name}" for name in ClientTimings.model_fields if name not in measured]
    ended = ended or datetime.now(UTC)
    manifest = {
        "run_id": run_id,
        "name": f"{results.label} (imported)",
        "labkit_version": None,
        "packages": {results.tool.split()[0]: results.version},
        "started_at": (started or ended).isoformat(),
        "ended_at": ended.isoformat(),
        "status": "completed",
        "records": count,
    }
    peer = {
        "tool": results.tool,
        "version": results.version,
        "source": str(results.path),
        "not_measured": missing,
    }
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n", "utf-8")
    (folder / PEER_FILE).write_text(json.dumps(peer, indent=2) + "\n", "utf-8")
    return count, missing
