"""An event loop that knows when it looked at its sockets: labkit's estimate of its own lateness.

A stamp taken in user code (`time.perf_counter_ns` when a read reaches labkit) is late by
however long the bytes sat in the socket before the loop got to them. The loop learns that
bytes are waiting only from its selector, so the selector's own times bound the wait:

- a ``select()`` that blocked and returned at ``R`` was woken by the bytes: they arrived at
  about ``R``, and a read stamped at ``t`` is late by about ``t - R``;
- a ``select()`` that returned at once (entered at ``E``) found bytes that came while the
  loop was busy, after the socket was last seen empty at ``L`` (the previous ``select()``,
  if the socket was being watched then, else the read that last drained it): they arrived
  in ``[L, E]``, so the read is late by ``t - E`` plus up to ``E - L``. The estimate takes
  the middle of that window (``(L + E) / 2``); the bound, its start.

`TimedSelector` wraps the default selector and keeps, per socket, the arrival window of each
report (a short queue: a reader that falls behind consumes them in order). `new_event_loop`
builds an asyncio loop on it, and `run` runs a coroutine on such a loop (`asyncio.run`'s
equivalent); `loop_clock` finds the selector of the running loop (None on any other loop,
uvloop included: there is no estimate there). What the estimate cannot see: the time the
kernel took to wake the process (a CPU held by another process). Kernel receive stamps
(`labkit.lean`) are exact; this is for the stamps taken in user space (httpx, the SDKs).

Cost: two clock reads per ``select()`` and, per socket reported, a few dictionary
operations (benchmarks/bench_recorder.py measures it).
"""

from __future__ import annotations

import asyncio
import selectors
import time
import weakref
from collections import deque
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any, TypeVar

__all__ = [
    "BLOCKED_NS",
    "REPORTS_KEPT",
    "Arrival",
    "LatenessTracker",
    "TimedSelector",
    "loop_clock",
    "new_event_loop",
    "run",
    "socket_fd",
]

T = TypeVar("T")

#: A ``select()`` that took longer than this blocked, so the bytes it reported woke it.
BLOCKED_NS = 50_000
#: Reports kept per socket for a reader that has not consumed them yet.
REPORTS_KEPT = 32

#: One report of waiting bytes: the window (earliest, latest) in which they arrived, in ns,
#: and whether the latest is the arrival of the last of them (a select() they woke) rather
#: than only a bound.
Arrival = tuple[int, int, bool]


class TimedSelector(selectors.DefaultSelector):
    """The default selector, timing every ``select()`` and keeping per socket the arrival
    window of the bytes each report found (module docstring)."""

    def __init__(self, clock: Callable[[], int] = time.perf_counter_ns) -> None:
        super().__init__()
        self._clock = clock
        #: ``select()`` calls entered so far; a reader compares it to see whether it waited.
        self.selects = 0
        self.entered_ns = 0
        self.returned_ns = 0
        #: Per socket: the windows of the reports not yet consumed, oldest first.
        self.reports: dict[int, deque[Arrival]] = {}
        self._watched_from: dict[int, int] = {}  # fd -> `selects` when it was (re)watched
        self._seen_empty_ns: dict[int, int] = {}  # fd -> when its bytes were last drained
        self._reported_by: dict[int, int] = {}  # fd -> the select() that last reported it
        self._unread: dict[int, Arrival] = {}  # fd -> window of bytes reported, never read

    def _watch(self, fd: int) -> None:
        self._watched_from[fd] = self.selects
        self._seen_empty_ns.setdefault(fd, self.returned_ns)

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        """Register as the default selector does; a socket watched for reading is noted."""
        key = super().register(fileobj, events, data)
        if events & selectors.EVENT_READ:
            self._watch(key.fd)
        return key

    def modify(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        """Modify as the default selector does; a socket newly watched for reading, or no
        longer, is noted."""
        before = self.get_key(fileobj).events
        key = super().modify(fileobj, events, data)
        if events & selectors.EVENT_READ and not before & selectors.EVENT_READ:
            self._watch(key.fd)
        elif before & selectors.EVENT_READ and not events & selectors.EVENT_READ:
            self._unwatch(key.fd)
        return key

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        """Unregister as the default selector does; the socket's history stays (a paused
        reader unregisters between reads)."""
        key = super().unregister(fileobj)
        if key.events & selectors.EVENT_READ:
            self._unwatch(key.fd)
        return key

    def _unwatch(self, fd: int) -> None:
        if self._reported_by.get(fd) == self.selects:
            # Reported by this turn's select(), whose read the pause now cancels (the
            # reader's task runs before this turn's I/O callbacks): the bytes stay unread
            # and will be reported again, with the window they really arrived in.
            queue = self.reports.get(fd)
            if queue:
                self._unread[fd] = queue.pop()
        # The last select() watched it: empty then, or drained since (it was reported).
        if self._watched_from.get(fd, self.selects) < self.selects:
            self._seen_empty_ns[fd] = max(self._seen_empty_ns.get(fd, 0), self.returned_ns)

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        """``select()``, noting when it was entered and returned and what each readable
        socket's bytes are late by."""
        clock = self._clock
        previous_return = self.returned_ns
        self.selects = n = self.selects + 1
        entered = clock()
        ready = super().select(timeout)
        returned = clock()
        self.entered_ns = entered
        self.returned_ns = returned
        if not ready:
            return ready
        blocked = timeout != 0 and returned - entered > BLOCKED_NS
        reports = self.reports
        watched_from = self._watched_from
        seen_empty = self._seen_empty_ns
        for key, mask in ready:
            if not mask & selectors.EVENT_READ:
                continue
            fd = key.fd
            if blocked:
                window = (returned, returned, True)
            else:
                # Watched by the previous select(), which saw it empty: the bytes came since.
                if watched_from.get(fd, n) < n - 1:
                    floor = previous_return
                else:
                    floor = seen_empty.get(fd, previous_return)
                window = (floor, entered, False)
            seen_empty[fd] = returned
            self._reported_by[fd] = n
            if self._unread:
                window = self._unread.pop(fd, window)
            queue = reports.get(fd)
            if queue is None:
                queue = reports[fd] = deque(maxlen=REPORTS_KEPT)
            queue.append(window)
        return ready

    def forget(self, fd: int) -> None:
        """Drop a socket's history (its file descriptor is about to be reused)."""
        self.reports.pop(fd, None)
        self._watched_from.pop(fd, None)
        self._seen_empty_ns.pop(fd, None)
        self._reported_by.pop(fd, None)
        self._unread.pop(fd, None)


_CLOCKS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, TimedSelector] = (
    weakref.WeakKeyDictionary()
)


def new_event_loop() -> asyncio.AbstractEventLoop:
    """A selector event loop on a `TimedSelector` (for ``asyncio.Runner(loop_factory=...)``)."""
    selector = TimedSelector()
    loop = asyncio.SelectorEventLoop(selector)
    _CLOCKS[loop] = selector
    return loop


def run(main: Coroutine[Any, Any, T], *, debug: bool | None = None) -> T:
    """``asyncio.run(main)`` on a loop built by `new_event_loop`."""
    with asyncio.Runner(debug=debug, loop_factory=new_event_loop) as runner:
        return runner.run(main)


def loop_clock(loop: asyncio.AbstractEventLoop | None = None) -> TimedSelector | None:
    """The `TimedSelector` of `loop` (default: the running loop); None on any other loop."""
    if loop is None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return None
    return _CLOCKS.get(loop)


def socket_fd(extensions: Mapping[str, Any]) -> int | None:
    """The file descriptor under an httpx (or httpx2) response's ``network_stream``."""
    stream = extensions.get("network_stream")
    if stream is None:
        return None
    try:
        sock = stream.get_extra_info("socket")
        fd = sock.fileno() if sock is not None else -1
    except Exception:  # any stream without a socket (mock transports): no estimate
        return None
    return fd if fd >= 0 else None


class LatenessTracker:
    """Which report's bytes each chunk of one stream came from.

    Made when the response headers are in (the reports that brought them are consumed);
    then `note(t)` for each chunk the reader gets, stamped `t`. A chunk that comes without
    the loop having run a ``select()`` since the previous one is the rest of the same read;
    otherwise it is the next report's bytes (none: the chunk gets no estimate).
    `lateness_ns` turns that into each event's estimated lateness.
    """

    __slots__ = ("_clock", "_current", "_queue", "_selects", "stamps_ns", "windows")

    def __init__(self, clock: TimedSelector, fd: int) -> None:
        self._clock = clock
        queue = clock.reports.get(fd)
        if queue is None:
            queue = clock.reports[fd] = deque(maxlen=REPORTS_KEPT)
        self._queue = queue
        self._current: Arrival | None = queue[-1] if queue else None
        queue.clear()
        self._selects = clock.selects
        #: Per chunk read, in reading order: its stamp and its report's arrival window.
        self.stamps_ns: list[int] = []
        self.windows: list[Arrival] = []

    def note(self, t_ns: int) -> None:
        """Note a chunk stamped `t_ns`."""
        clock = self._clock
        if clock.selects != self._selects:
            self._selects = clock.selects
            # The loop ran while this reader waited: for the next report's bytes, or for
            # something else (a lock, a checkpoint) with no report to tell when bytes came.
            self._current = self._queue.popleft() if self._queue else None
        if self._current is not None:
            self.stamps_ns.append(t_ns)
            self.windows.append(self._current)

    def lateness_ns(self, event_stamps_ns: Sequence[int]) -> list[int]:
        """The estimated lateness of each event stamped as given (in stream order; events
        from chunks that were not noted are left out).

        The k events that one report's bytes brought arrived in its window ``[lo, hi]``:
        the j-th is taken to have arrived at ``lo + j (hi - lo) / (k + 1)`` (the expected
        j-th of k uniform arrivals), so a read that gathered many events is judged by its
        first, which came early in the window; where ``hi`` is the last one's arrival
        (a select() they woke), at ``lo + j (hi - lo) / k``.
        """
        window_of = dict(zip(self.stamps_ns, self.windows, strict=True))
        out: list[int] = []
        group: list[int] = []
        group_window: Arrival | None = None

        def flush() -> None:
            if group_window is None:
                return
            lo, hi, closed = group_window
            parts = len(group) + (0 if closed else 1)
            out.extend(t - (lo + (j * (hi - lo)) // parts) for j, t in enumerate(group, 1))

        for t in event_stamps_ns:
            window = window_of.get(t)
            if window is None:
                continue
            if window is not group_window:
                flush()
                group, group_window = [], window
            group.append(t)
        flush()
        return out
