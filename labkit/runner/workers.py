"""Worker processes: one load level's streams read by several processes, one run folder.

One Python process reading many fast streams falls behind them: its event loop is busy
with one stream's bytes while another's wait in the socket, and the stamps (TTFT,
inter-token times) then measure labkit. A level can therefore be split over worker
processes, each with its own event loop, provider client and recorder. They stamp with
`time.perf_counter_ns` — on Linux and macOS the host's monotonic clock, shared by every
process — so their records line up with the parent's (`t_start_mono_ns`).

The protocol is JSON lines over the worker's stdin/stdout
(`python -m labkit.runner.worker_process`):

1. parent → worker: the job (provider settings, experiment settings, the share);
2. worker → parent: ``{"ready": true}`` once its provider is built (imports done);
3. parent → worker: ``{"t0_ns": ...}``, the level's common start;
4. worker → parent: one `RequestRecord` per line as each completes; exit status 0.

The parent appends each record to the run folder as it arrives, so a worker that dies
loses nothing it finished. The API key never travels: the worker reads it from the
environment variable its settings name. SIGINT/SIGTERM cancel the worker's requests and
their partial records are still written.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from labkit.errors import RunError
from labkit.experiments import PacedExperiment
from labkit.filenames import safe_filename
from labkit.providers import Provider
from labkit.records import RequestRecord

__all__ = ["job_document", "run_in_workers"]

_READY_TIMEOUT_S = 120.0
_START_MARGIN_NS = 100_000_000  # the go line must reach every worker before t0
_DRAIN_AFTER_CANCEL_S = 15.0
_LINE_LIMIT = 64 * 1024 * 1024  # a record with a long output text is one long line


def _provider_document(provider: Provider) -> dict[str, Any]:
    data = provider.settings.model_dump(mode="json")
    if "managed" in data:
        data["managed"] = False  # the parent runs the server; base_url already points at it
    return data


def job_document(
    provider: Provider,
    experiment: PacedExperiment,
    job: dict[str, Any],
    *,
    run_id: str,
    store_text: bool,
) -> dict[str, Any]:
    """What a worker (process or Ray actor) builds its provider and share from: settings
    and names only, never a key (`labkit.runner.worker_body.build_worker`)."""
    return {
        "provider": _provider_document(provider),
        "pool_size": provider.connections.pool_size,
        "server_build": provider.server_build,
        "experiment": {
            "settings": experiment.settings.model_dump(mode="json"),
            "index": experiment.index,
        },
        "job": job,
        "run_id": run_id,
        "store_text": store_text,
    }


async def _read_records(
    proc: asyncio.subprocess.Process, on_record: Callable[[RequestRecord], None]
) -> bool:
    """Pass a worker's record lines to `on_record`; True on its ready line (reading stops
    there), False when its output ends."""
    assert proc.stdout is not None
    while line := await proc.stdout.readline():
        if line.startswith(b'{"ready"'):
            return True
        on_record(RequestRecord.from_json_line(line.decode()))
    return False


async def run_in_workers(
    *,
    provider: Provider,
    experiment: PacedExperiment,
    job: dict[str, Any],
    processes: int,
    run_id: str,
    store_text: bool,
    log_dir: Path,
    on_record: Callable[[RequestRecord], None],
) -> None:
    """Run `job` in `processes` workers; every record they send goes to `on_record`."""
    log_dir.mkdir(parents=True, exist_ok=True)
    document = {
        **job_document(provider, experiment, job, run_id=run_id, store_text=store_text),
        "processes": processes,
    }
    name = safe_filename(f"{provider.id}-{experiment.name}-{job.get('level', 0)}")
    procs: list[asyncio.subprocess.Process] = []
    logs: list[Path] = []
    pumps: list[asyncio.Task[bool]] = []

    def pump(proc: asyncio.subprocess.Process) -> asyncio.Task[bool]:
        return asyncio.create_task(_read_records(proc, on_record))

    try:
        for k in range(processes):
            log = log_dir / f"{name}-{k}.log"
            logs.append(log)
            with log.open("ab") as err:
                proc = await asyncio.create_subprocess_exec(
                    sys.executable,
                    "-m",
                    "labkit.runner.worker_process",
                    stdin=asyncio.subprocess.PIPE,
                    stdout=asyncio.subprocess.PIPE,
                    stderr=err,
                    limit=_LINE_LIMIT,
                )
            procs.append(proc)
            assert proc.stdin is not None
            proc.stdin.write(json.dumps({**document, "worker": k}).encode() + b"\n")
            await proc.stdin.drain()
        for k, proc in enumerate(procs):
            # Before its ready line a worker sends its warm-up records.
            async with asyncio.timeout(_READY_TIMEOUT_S):
                ready = await _read_records(proc, on_record)
            if not ready:
                raise RunError(f"worker process {k} did not start; see {logs[k]}")
        t0 = time.perf_counter_ns() + _START_MARGIN_NS
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write(json.dumps({"t0_ns": t0}).encode() + b"\n")
            await proc.stdin.drain()
        pumps = [pump(p) for p in procs]
        await asyncio.gather(*pumps)
        for k, proc in enumerate(procs):
            code = await proc.wait()
            if code != 0:
                raise RunError(
                    f"worker process {k} exited with status {code}; records it finished are "
                    f"kept; see {logs[k]}"
                )
    except BaseException:
        # Interrupted (or a worker failed): stop every worker, but take the partial records
        # they write on the way out.
        for proc in procs:
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGTERM)
        # The readers may have been cancelled with the level: read the rest afresh.
        for task in pumps:
            task.cancel()
        await asyncio.gather(*pumps, return_exceptions=True)
        pumps = [pump(p) for p in procs]
        with contextlib.suppress(Exception, asyncio.CancelledError):
            await asyncio.wait_for(
                asyncio.gather(*pumps, return_exceptions=True), _DRAIN_AFTER_CANCEL_S
            )
        for proc in procs:
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await proc.wait()
        raise
