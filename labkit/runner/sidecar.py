"""The columnar sidecar written as a run records: its parts converted off the hot path.

So that the first `labkit report` of a large run need not read gigabytes of JSON, the runner
has its records converted into columns (`labkit.report.columnar`) while it records: each
`PART_BYTES` of records.jsonl, and the rest at the run's end. The measuring process never
converts (that holds the interpreter for seconds, and the stamps are taken in the event
loop): a child process at the lowest priority does, started by the module's name (this layer
does not import the converter: it is the report's), its CPU counted apart from labkit's own
(`SidecarWriter.cpu_s`). Nothing measured depends on it: records.jsonl stays the source of
truth. How the parts are made, checked and completed: docs/report.md, "A large run".
"""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
from pathlib import Path

from labkit.runner.hostcpu import process_cpu_s

__all__ = ["PART_BYTES", "SIDECAR_MIN_BYTES", "SidecarWriter"]

log = logging.getLogger(__name__)


def _env_bytes(name: str, default: int) -> int:
    text = os.environ.get(name)
    if text is None:
        return default
    try:
        return max(0, int(text))
    except ValueError:
        log.warning("%s=%r is not a whole number of bytes; %d is used", name, text, default)
        return default


#: Records appended between two conversions: 256 MiB is about 80,000 records of a
#: streamed answer, a conversion of 5-10 s at the lowest priority; the run's end then
#: converts at most this much while the runner waits (a few seconds), and the parts of a
#: 10⁷-record run number about 140 (each checked by a reader with two 1 KiB reads).
#: LABKIT_SIDECAR_PART_BYTES sets it (tests use a few KiB).
PART_BYTES = _env_bytes("LABKIT_SIDECAR_PART_BYTES", 256 << 20)

#: A run smaller than this keeps no sidecar (`labkit.report.columnar.SIDECAR_MIN_BYTES`,
#: repeated here: this layer does not import the report's). LABKIT_SIDECAR_MIN_BYTES sets it.
SIDECAR_MIN_BYTES = _env_bytes("LABKIT_SIDECAR_MIN_BYTES", 64 << 20)

#: The child's first lines: the lowest priority (nice 19 and, where Linux allows it,
#: `SCHED_IDLE`) before any import, then the converter.
_CHILD = (
    "import os, sys\n"
    "os.nice(19)\n"
    "try:\n"
    "    os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))\n"
    "except (AttributeError, OSError):\n"
    "    pass\n"
    "from labkit.report.columnar import main\n"
    "raise SystemExit(main(sys.argv[1:]))\n"
)


class SidecarWriter:
    """Has the sidecar's parts converted, by a child process, as records.jsonl grows."""

    def __init__(
        self,
        run_dir: Path,
        *,
        part_bytes: int | None = None,
        min_bytes: int | None = None,
    ) -> None:
        self.run_dir = run_dir
        self.part_bytes = PART_BYTES if part_bytes is None else part_bytes
        self.min_bytes = SIDECAR_MIN_BYTES if min_bytes is None else min_bytes
        self._grown = 0
        self._child: subprocess.Popen[bytes] | None = None
        self._failed = False
        #: The children started (their process ids), for the tests and the benchmark.
        self.started: list[int] = []
        self._reaped_cpu_s = 0.0

    def cpu_s(self) -> tuple[float, float]:
        """CPU seconds the converters used so far: (those reaped, the one still running).

        Their CPU is not labkit's own: each child is reaped with its resource usage
        (``wait4``), and the manifest's ``host_cpu`` counts this apart (``sidecar_cpu_s``,
        `labkit.runner.hostcpu`)."""
        child = self._child
        running = 0.0
        if child is not None and child.returncode is None:
            running = process_cpu_s(child.pid) or 0.0
        return self._reaped_cpu_s, running

    def grew(self, nbytes: int) -> None:
        """`nbytes` more were appended to records.jsonl: start a conversion when a part's
        worth has been since the last one began (and none is running)."""
        self._grown += nbytes
        if self._grown < self.part_bytes:
            return
        if self._child is not None and self._reap() is None:
            self._grown = self.part_bytes - max(1, self.part_bytes // 16)  # look again soon
            return
        self._grown = 0
        if self._size() >= self.min_bytes:
            self._start(final=False)

    def _size(self) -> int:
        try:
            return (self.run_dir / "records.jsonl").stat().st_size
        except OSError:
            return 0

    def _start(self, *, final: bool) -> None:
        args = [sys.executable, "-c", _CHILD, str(self.run_dir)] + (["--final"] if final else [])
        try:
            self._child = subprocess.Popen(
                args,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                close_fds=True,
            )
            self.started.append(self._child.pid)
        except OSError as exc:
            self._failure(f"cannot start it ({exc})")

    def _reap(self) -> int | None:
        """The running child's exit status once it has ended (None while it runs)."""
        child = self._child
        if child is None:
            return 0
        code = self._wait(child, block=False)
        if code is not None:
            self._child = None
            if code != 0:
                self._failure(f"the converter exited with status {code}")
        return code

    def _wait(self, child: subprocess.Popen[bytes], *, block: bool) -> int | None:
        """The child's exit status once it has ended (`block`: wait for it), its CPU seconds
        added to the converters' (`cpu_s`) as it is reaped."""
        if child.returncode is None:
            try:
                pid, status, usage = os.wait4(child.pid, 0 if block else os.WNOHANG)
            except ChildProcessError:  # reaped elsewhere: its status, no usage to count
                return child.wait() if block else child.poll()
            if pid == 0:
                return None
            child.returncode = os.waitstatus_to_exitcode(status)
            self._reaped_cpu_s += usage.ru_utime + usage.ru_stime
        return child.returncode

    def _failure(self, why: str) -> None:
        if not self._failed:
            self._failed = True
            log.warning(
                "%s: the columnar sidecar was not converted as the run went (%s); records.jsonl "
                "is intact and its first reader converts it",
                self.run_dir,
                why,
            )

    async def finish(self) -> None:
        """The run has ended: wait for a running conversion, then convert the rest (a run
        smaller than `min_bytes` keeps no sidecar)."""
        if self._child is not None:
            await asyncio.to_thread(self._wait, self._child, block=True)
            self._reap()
        if self._size() < self.min_bytes:
            return
        self._start(final=True)
        if self._child is not None:
            await asyncio.to_thread(self._wait, self._child, block=True)
            self._reap()

    def abandon(self) -> None:
        """Reap a child that has ended (one still running goes on by itself: its part is
        whole or not written)."""
        if self._child is not None:
            self._reap()
