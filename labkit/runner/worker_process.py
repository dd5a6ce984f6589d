"""The worker side of `labkit.runner.workers`: `python -m labkit.runner.worker_process`.

Reads its `JobMessage` from stdin, builds its own provider and recorder, says it is ready,
waits for the level's `Start`, then runs its share and writes each record to stdout as one
`Recorded` line (`labkit.runner.jobs`; `labkit.runner.worker_body`, the body it shares with
Ray actors). Kept out of the
`labkit.runner` package's imports so that running it as a module imports it once.
"""

from __future__ import annotations

import asyncio
import signal
import sys

from labkit.errors import LabkitError, RunError
from labkit.experiments import PlannedRequest
from labkit.records import RequestRecord
from labkit.runner.jobs import JobMessage, Ready, Recorded, Start, decode, encode
from labkit.runner.worker_body import build_worker, run_worker
from labkit.scrub import guard_std_streams
from labkit.wire import loopclock

__all__ = ["main"]


def _write(message: Ready | Recorded) -> None:
    sys.stdout.write(encode(message) + "\n")
    sys.stdout.flush()


async def _read() -> JobMessage | Start:
    message = decode(await asyncio.to_thread(sys.stdin.readline))
    if not isinstance(message, JobMessage | Start):
        raise RunError(f"a worker process reads a job or a start, not {message.type!r}")
    return message


class _PipeLink:
    """Records as `Recorded` lines on stdout; the start time from a `Start` line on stdin."""

    def sending(self, planned: PlannedRequest) -> None:
        pass  # the parent learns of a request from its record

    def emit(self, record: RequestRecord) -> None:
        _write(Recorded(record=record))

    async def ready(self) -> int:
        _write(Ready())
        go = await _read()
        if not isinstance(go, Start):
            raise RunError("a worker process waits for its start, not a second job")
        task = asyncio.current_task()
        assert task is not None
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, task.cancel)
        return go.t0_ns


async def _worker_main() -> int:
    first = await _read()
    if not isinstance(first, JobMessage):
        raise RunError("a worker process reads its job first")
    provider, experiment = build_worker(first.job)
    try:
        await run_worker(provider, experiment, first.job, _PipeLink())
    except asyncio.CancelledError:
        return 130
    return 0


def main() -> None:
    """Entry point of a worker process (`python -m labkit.runner.worker_process`)."""
    # Ctrl-C in a terminal reaches the whole process group. The parent then stops its
    # workers with SIGTERM, which cancels their requests once the level has started (and
    # simply ends a worker that has measured nothing yet).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    guard_std_streams(stdout=False, controls=True)  # stderr is the worker's log
    try:
        code = loopclock.run(_worker_main())
    except LabkitError as exc:  # one line in the log, which the runner's error quotes
        sys.stderr.write(f"labkit worker: {exc}\n")
        code = 2
    sys.exit(code)


if __name__ == "__main__":
    main()
