"""Worker processes: one load level's streams read by several processes, one run folder.

One Python process reading many fast streams falls behind them: its event loop is busy
with one stream's bytes while another's wait in the socket, and the stamps (TTFT,
inter-token times) then measure labkit. A level can therefore be split over worker
processes, each with its own event loop, provider client and recorder. They stamp with
`time.perf_counter_ns` — on Linux and macOS the host's monotonic clock, shared by every
process — so their records line up with the parent's (`t_start_mono_ns`). The protocol,
a worker that dies and signals: `_run_in_workers`; what a user sees: docs/experiments.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from pydantic import Field, computed_field

from labkit.errors import RunError
from labkit.experiments import LevelPlan, PacedExperiment
from labkit.experiments.paced import RecordTags
from labkit.filenames import safe_filename
from labkit.oslimits import raise_open_files_limit
from labkit.providers import Provider
from labkit.records import RequestRecord
from labkit.runner.executor import Executor, InProcessExecutor, LevelSink, Measurer
from labkit.runner.jobs import JobMessage, LevelJob, Ready, Recorded, Start, decode, encode
from labkit.runner.levellog import LevelLog, LevelRun, append_level_line, level_label

__all__ = [
    "WORKER_LEVELS_FILE",
    "WORKER_LEVEL_LOG",
    "HostExecutor",
    "WorkerLevel",
    "WorkerProcessExecutor",
    "open_files_for",
]

#: The run folder's log of the levels read by worker processes: one `WorkerLevel` a line.
WORKER_LEVELS_FILE = "worker-levels.jsonl"

_READY_TIMEOUT_S = 120.0
_START_MARGIN_NS = 100_000_000  # the go line must reach every worker before t0
_DRAIN_AFTER_CANCEL_S = 15.0
_LINE_LIMIT = 64 * 1024 * 1024  # a record with a long output text is one long line


async def _read_records(
    proc: asyncio.subprocess.Process, on_record: Callable[[RequestRecord], None]
) -> bool:
    """Pass a worker's records to `on_record`; True on its `Ready` (reading stops there),
    False when its output ends."""
    assert proc.stdout is not None
    while line := await proc.stdout.readline():
        message = decode(line)
        if isinstance(message, Ready):
            return True
        if isinstance(message, Recorded):
            on_record(message.record)
    return False


class WorkerLevel(LevelRun):
    """How one level read by this host's worker processes went: a line of the run folder's
    ``worker-levels.jsonl``."""

    died_what: ClassVar[str] = "a worker process"

    #: How many worker processes read it (0 on a `settled` line).
    processes: int = 0
    #: Each worker that exited with a non-zero status after the level's start, with it.
    died: dict[int, int] = Field(default_factory=dict)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def partial(self) -> bool:
        """Whether a worker died: its requests in flight were lost, the rest of its share
        never sent."""
        return bool(self.died)


#: The worker processes' level log: a level whose latest run lost one is partial.
WORKER_LEVEL_LOG = LevelLog(WORKER_LEVELS_FILE, WorkerLevel)


class WorkerProcessExecutor(Executor):
    """A level over worker processes of this host: `processes` of them, else as many as
    the level asks for (`LevelPlan.processes`)."""

    def __init__(
        self,
        *,
        run_id: str,
        store_text: bool,
        run_dir: Path,
        processes: int | None = None,
    ) -> None:
        self._run_id = run_id
        self._store_text = store_text
        self._run_dir = run_dir
        self._log_dir = run_dir / "worker-logs"
        self._processes = processes
        #: Whether requests carry their trace context (`tracing.headers`).
        self.propagate_trace = True
        #: The run's tags and headers on every record and request (`Measurer`).
        self.request_tags: RecordTags = {}
        self.request_headers: dict[str, str] = {}

    async def run_level(
        self,
        experiment: PacedExperiment[Any, Any],
        provider: Provider,
        level: LevelPlan,
        sink: LevelSink,
    ) -> None:
        """Run the level in its worker processes; every record they send goes to `sink`. A
        worker that exits with an error after the level's start makes the level partial
        (`LevelSink.partial`; the others read their shares to the end)."""
        job = LevelJob.of(
            provider,
            experiment,
            level,
            run_id=self._run_id,
            store_text=self._store_text,
            tags=level.processes.tags,
            propagate_trace=self.propagate_trace,
            request_tags=self.request_tags,
            request_headers=self.request_headers,
        )
        name = safe_filename(f"{provider.id}-{experiment.name}-{level.index}")
        processes = self._processes or level.processes.count
        died = await _run_in_workers(job, processes, self._log_dir, name, sink.keep)
        append_level_line(
            self._run_dir / WORKER_LEVELS_FILE,
            WorkerLevel(
                experiment=experiment.name,
                provider=provider.id,
                level=level_label(level),
                processes=processes,
                died=died,
            ),
        )
        for k, code in died.items():
            log = self._log_dir / f"{name}-{k}.log"
            said = _last_line(log)
            sink.message(
                f"{experiment.name}: {level.title}: worker process {k} exited with status "
                f"{code} mid-level{f' ({said})' if said else ''}: its requests in flight were "
                "lost and the rest of its share never sent (a partial level: labkit run "
                f"--resume runs it again); see {log}"
            )
        if died:
            sink.partial("a worker process")

    async def close(self) -> None:
        """Nothing held: each level's processes end with it."""


async def _run_in_workers(
    job: LevelJob,
    processes: int,
    log_dir: Path,
    name: str,
    on_record: Callable[[RequestRecord], None],
) -> dict[int, int]:
    """Run `job` in `processes` workers; every record they send goes to `on_record`. Each
    worker that exited with an error after the start, with its status (RunError for one
    that did not start).

    The protocol is `labkit.runner.jobs` messages, one JSON line each, over the worker's
    stdin/stdout (`python -m labkit.runner.worker_process`): parent → worker `JobMessage`;
    worker → parent its warm-ups' `Recorded`, then `Ready`; parent → worker `Start` (the
    level's common start); worker → parent one `Recorded` as each request completes; exit
    status 0. The parent keeps each record as it arrives, so a worker that dies loses nothing
    it finished; the level is then partial (the rest of its share never sent: a worker exits
    0 once its share ran), said in ``worker-levels.jsonl`` (`WorkerLevel`); ``--resume`` runs
    it again. The API key never travels: the worker reads it from the environment variable
    its settings name. SIGINT/SIGTERM cancel the worker's requests and their partial records
    are still written."""
    log_dir.mkdir(parents=True, exist_ok=True)
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
            message = JobMessage(job=job.for_worker(k, processes))
            proc.stdin.write(encode(message).encode() + b"\n")
            await proc.stdin.drain()
        for k, proc in enumerate(procs):
            # Before its ready line a worker sends its warm-up records.
            async with asyncio.timeout(_READY_TIMEOUT_S):
                ready = await _read_records(proc, on_record)
            if not ready:
                said = _last_line(logs[k])
                raise RunError(
                    f"worker process {k} did not start{f' ({said})' if said else ''}; see {logs[k]}"
                )
        t0 = time.perf_counter_ns() + _START_MARGIN_NS
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write(encode(Start(t0_ns=t0)).encode() + b"\n")
            await proc.stdin.drain()
        pumps = [pump(p) for p in procs]
        await asyncio.gather(*pumps)
        codes = [await proc.wait() for proc in procs]
        return {k: code for k, code in enumerate(codes) if code != 0}
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


def _last_line(log: Path) -> str | None:
    """A worker's own one-line error (``labkit worker: ...``) at the end of its log."""
    try:
        with log.open("rb") as f:
            f.seek(max(0, f.seek(0, 2) - 4096))
            lines = f.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return None
    last = lines[-1] if lines else ""
    return last.removeprefix("labkit worker: ") if last.startswith("labkit worker: ") else None


class HostExecutor(Executor):
    """This host: a level in the runner's process, or over as many worker processes as it
    asks for (`LevelPlan.processes`)."""

    def __init__(self, measurer: Measurer, *, run_id: str, store_text: bool, run_dir: Path) -> None:
        self.in_process = InProcessExecutor(measurer)
        self.workers = WorkerProcessExecutor(run_id=run_id, store_text=store_text, run_dir=run_dir)
        self.workers.propagate_trace = measurer.propagate_trace
        self.workers.request_tags = measurer.request_tags
        self.workers.request_headers = measurer.request_headers

    async def run_level(
        self,
        experiment: PacedExperiment[Any, Any],
        provider: Provider,
        level: LevelPlan,
        sink: LevelSink,
    ) -> None:
        """Run the level where it asks to be read."""
        short = open_files_for(level)
        if short is not None:
            sink.message(f"{experiment.name}: {level.title}: {short}")
        count = level.processes.count
        if level.processes.reason is not None:
            sink.message(
                f"{experiment.name}: {level.title} read by {count} process"
                f"{'es' if count > 1 else ''} ({level.processes.reason})"
            )
        chosen: Executor = self.workers if count > 1 else self.in_process
        await chosen.run_level(experiment, provider, level, sink)

    async def close(self) -> None:
        """Nothing held."""


#: Open files a level needs besides one socket per stream: the run folder, logs, pipes,
#: the interpreter's own.
_OPEN_FILES_MARGIN = 256


def open_files_for(level: LevelPlan) -> str | None:
    """Raise this process's soft open-files limit to what `level`'s streams need (one socket
    each; worker processes inherit it), within the hard limit; a sentence when even that is
    too low (the streams past it would fail to connect), else None.

    Linux's usual soft limit, 1,024, is below a 1,000-stream level's sockets and files.
    """
    if level.most_workers is None:
        return None
    wanted = level.most_workers + _OPEN_FILES_MARGIN
    have = raise_open_files_limit(wanted)
    if have >= wanted:
        return None
    return (
        f"{level.most_workers:,} streams need about {wanted:,} open files but this process "
        f"may open {have:,} (its hard limit): raise it (`ulimit -Hn`), or some streams "
        "will fail to connect"
    )
