"""The worker side of `labkit.runner.workers`: `python -m labkit.runner.worker_process`.

Reads its job from stdin, builds its own provider and recorder, says it is ready, waits for
the level's start time, then runs its share and writes each record to stdout as one JSON
line (`labkit.runner.worker_body`, the body it shares with Ray actors). Kept out of the
`labkit.runner` package's imports so that running it as a module imports it once.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from typing import Any

from labkit.experiments import PlannedRequest
from labkit.measurement import loopclock
from labkit.records import RequestRecord
from labkit.runner.worker_body import build_worker, run_worker
from labkit.scrub import guard_std_streams

__all__ = ["main"]


def _emit_line(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


class _PipeLink:
    """Records as JSON lines on stdout; the start time from a line on stdin."""

    def sending(self, planned: PlannedRequest) -> None:
        pass  # the parent learns of a request from its record

    def emit(self, record: RequestRecord) -> None:
        sys.stdout.write(record.to_json_line() + "\n")
        sys.stdout.flush()

    async def ready(self) -> int:
        _emit_line({"ready": True})
        go = json.loads(await asyncio.to_thread(sys.stdin.readline))
        task = asyncio.current_task()
        assert task is not None
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, task.cancel)
        return int(go["t0_ns"])


async def _worker_main() -> int:
    document = json.loads(await asyncio.to_thread(sys.stdin.readline))
    provider, experiment = build_worker(document)
    try:
        await run_worker(provider, experiment, document, _PipeLink())
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
    sys.exit(loopclock.run(_worker_main()))


if __name__ == "__main__":
    main()
