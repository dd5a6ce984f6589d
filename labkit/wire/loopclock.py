"""An event loop that knows when it looked at its sockets: labkit's estimate of its own lateness.

A stamp taken in user code (`time.perf_counter_ns` when a read reaches labkit) is late by
however long the bytes sat in the socket before the loop got to them. The loop learns that
bytes are waiting only from its selector, so the selector's own times bound the wait:
`TimedSelector` keeps, per socket, the window each report's bytes arrived in, and
`LatenessTracker` places each event in its window. Kernel receive stamps (`labkit.wire.lean`)
are exact but for reads that gathered events; this places those and the stamps taken in user
space (httpx, the SDKs). The rules and their cost: `PyTimedSelector`, the reference (the C
selector keeps the same; `choose` says which runs); the record's side: docs/measurement.md.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import os
import selectors
import sys
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Coroutine, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from labkit.errors import ConfigError
from labkit.wire import readpath

__all__ = [
    "BLOCKED_NS",
    "REPORTS_KEPT",
    "SCHEDSTAT_PATH",
    "SELECT_IMPLEMENTATION",
    "Arrival",
    "LatenessTracker",
    "PyTimedSelector",
    "TimedSelector",
    "loop_clock",
    "new_event_loop",
    "run",
    "socket_fd",
    "thread_schedstat",
]

T = TypeVar("T")

#: A ``select()`` that took longer than this blocked, so the bytes it reported woke it.
BLOCKED_NS = 50_000
#: Reporting select() calls kept for `TimedSelector.window_before`.
HISTORY_KEPT = 256
#: Reports kept per socket for a reader that has not consumed them yet.
REPORTS_KEPT = 32
#: The calling thread's scheduler counters (Linux): time on a CPU, time runnable but waiting
#: for one (ns), and how many times it was put on a CPU.
SCHEDSTAT_PATH = "/proc/thread-self/schedstat"

#: One report of waiting bytes: the window (earliest, latest) in which they arrived, in ns,
#: and whether the latest is the arrival of the last of them (a select() they woke) rather
#: than only a bound.
Arrival = tuple[int, int, bool]


class _Socket:
    """What the selector knows of one file descriptor watched for reading."""

    __slots__ = ("reported_by", "reports", "seen_empty_ns", "unread", "watched_from")

    def __init__(self, reports: deque[Arrival], seen_empty_ns: int) -> None:
        self.reports = reports  # windows of the reports not yet consumed, oldest first
        self.watched_from = -1  # `selects` when it was (re)watched; -1: not watched
        self.seen_empty_ns = seen_empty_ns  # when it was last seen empty (or drained)
        self.reported_by = 0  # the select() that last reported it
        self.unread: Arrival | None = None  # window of bytes reported but never read


class PyTimedSelector(selectors.DefaultSelector):
    """The default selector, timing every ``select()`` and keeping per socket the arrival
    window of the bytes each report found: the reference, and what runs where the C one
    (`_loopclock.TimedEpoll`) is not built or ``LABKIT_READPATH=python``.

    - a ``select()`` that blocked and returned at ``R`` was woken by the bytes: they arrived
      at about ``R``, and a read stamped at ``t`` is late by about ``t - R``;
    - a ``select()`` that returned at once (entered at ``E``) found bytes that came while the
      loop was busy, after the socket was last seen empty at ``L`` (the previous
      ``select()`` if it watched the socket, else the last one that did: a paused reader is
      not watched): they arrived in ``[L, E]``, so the read is late by ``t - E`` plus up to
      ``E - L``.

    A ``select()`` woken but back late (its thread waiting for a CPU another process or
    thread held, or for the GIL) is seen through the thread's scheduler counters (Linux,
    `thread_schedstat`, read around each ``select()`` that may block): the run-queue delay
    accrued puts the wake that much before the return (`_woken`). Still unseen: a GIL held
    by a C call beyond a switch interval, and any wake delay where the counters are missing.
    Each socket's windows wait in a short queue: a reader that falls behind consumes them in
    order, one per wait. Bytes reported by a ``select()`` whose read was then cancelled (the
    reader paused in the same turn) keep their window when they are reported again.

    Cost: two clock reads per ``select()``, the counters (a ``pread``, ~1 µs warm, 2-3 cold)
    before one that may block and again after one that did (the C reader reads them again
    only after a context switch, `getrusage`, ~0.2 µs: they cannot change without one); per
    socket reported, a look-up and a queued tuple; per read, a few list appends; per event,
    its share of one pass at the end of the stream (benchmarks/bench_recorder.py,
    bench_select.py, docs/accuracy.md).
    """

    def __init__(
        self,
        clock: Callable[[], int] = time.perf_counter_ns,
        schedstat: Callable[[], bytes] | None = None,
    ) -> None:
        super().__init__()
        self._clock = clock
        #: Reads this thread's scheduler counters (`thread_schedstat`); None: not read, a
        #: blocked select() is taken to have been woken when it returned.
        self.schedstat = schedstat
        #: ``select()`` calls entered so far; a reader compares it to see whether it waited.
        self.selects = 0
        self.entered_ns = 0
        self.returned_ns = 0
        #: Per socket: the windows of the reports not yet consumed, oldest first.
        self.reports: dict[int, deque[Arrival]] = {}
        self._sockets: dict[int, _Socket] = {}
        #: The latest select() calls that reported something: (returned, entered, blocked,
        #: woken), woken the earliest time the bytes can have woken it (`_woken`).
        self.history: deque[tuple[int, int, bool, int]] = deque(maxlen=HISTORY_KEPT)

    def _socket(self, fd: int) -> _Socket:
        state = self._sockets.get(fd)
        if state is None:
            queue = self.reports.get(fd)
            if queue is None:
                queue = self.reports[fd] = deque(maxlen=REPORTS_KEPT)
            state = self._sockets[fd] = _Socket(queue, self.returned_ns)
        return state

    def _watch(self, fd: int) -> None:
        self._socket(fd).watched_from = self.selects

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
        state = self._sockets.get(fd)
        if state is None:
            return
        if state.reported_by == self.selects and state.reports:
            # Reported by this turn's select(), whose read the pause now cancels (the
            # reader's task runs before this turn's I/O callbacks): the bytes stay unread
            # and will be reported again, with the window they really arrived in.
            state.unread = state.reports.pop()
        if 0 <= state.watched_from < self.selects:
            # The last select() watched it: empty then, or drained since (it was reported).
            state.seen_empty_ns = max(state.seen_empty_ns, self.returned_ns)
        state.watched_from = -1

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        """``select()``, noting when it was entered and returned and what each readable
        socket's bytes are late by."""
        clock = self._clock
        previous_return = self.returned_ns
        self.selects = n = self.selects + 1
        schedstat = self.schedstat if timeout != 0 else None
        counters = schedstat() if schedstat is not None else b""
        entered = clock()
        ready = _POLL(self, timeout)
        self.returned_ns = returned = clock()
        self.entered_ns = entered
        if not ready:
            return ready
        blocked = timeout != 0 and returned - entered > BLOCKED_NS
        woken = returned
        if blocked and schedstat is not None:
            woken = _woken(entered, returned, counters, schedstat())
        history = self.history
        history.append((returned, entered, blocked, woken))
        sockets = self._sockets
        # One window object per select() for what all its sockets share (the collector
        # tracks tuples, and each report is kept until read or pushed out).
        woke_window = (woken, woken, True)
        since_window = (previous_return, entered, False)
        for key, mask in ready:
            if not mask & _READ:
                continue
            state = sockets.get(key.fd)
            if state is None:
                state = self._socket(key.fd)
            if state.unread is not None:
                window = state.unread
                state.unread = None
            elif blocked:
                window = woke_window
            elif 0 <= state.watched_from < n - 1:
                # Watched by the previous select(), which saw it empty: the bytes came since.
                window = since_window
            else:
                window = (state.seen_empty_ns, entered, False)
            state.seen_empty_ns = returned
            state.reported_by = n
            state.reports.append(window)
        return ready

    def window_before(self, seen_ns: int) -> Arrival | None:
        """The window of bytes read (by an I/O callback) at `seen_ns`: read after the
        latest select() that returned before then, they came while it blocked (``(entered,
        woken, True)``: the first of them woke it, at `woken` or up to its return if the
        thread then waited for a CPU or the GIL, `_woken`) or since the one before it
        returned (``(that return, entered, False)``, for a socket watched all along). None
        if that select() is no longer in `history`."""
        return _window_before(self.history, seen_ns)

    def forget(self, fd: int) -> None:
        """Drop a socket's history (its file descriptor is about to be reused)."""
        self.reports.pop(fd, None)
        self._sockets.pop(fd, None)

    def close(self) -> None:
        """Close as the default selector does, and the scheduler counters' file."""
        super().close()
        closer = getattr(self.schedstat, "close", None)
        if closer is not None:
            closer()
            self.schedstat = None


def _window_before(history: deque[tuple[int, int, bool, int]], seen_ns: int) -> Arrival | None:
    """`PyTimedSelector.window_before` (shared by the C selector)."""
    for i in range(len(history) - 1, 0, -1):
        returned, entered, blocked, woken = history[i]
        if returned <= seen_ns:
            if blocked:
                return (entered, woken, True)
            return (history[i - 1][0], entered, False)
    return None


def _woken(entered: int, returned: int, before: bytes, after: bytes) -> int:
    """The earliest time the bytes that a blocked ``select()`` (entered, returned) reported
    can have woken it, from the thread's scheduler counters read around it.

    Woken and put on a CPU once, the thread waited for that CPU for the run-queue delay it
    accrued: the bytes woke it that much before it returned. Put on a CPU more than once, it
    was preempted (that wait is in the delay) or slept again after its wake, waiting for the
    GIL another Python thread held: with one alive, each extra run widens the wake by a
    switch interval (a holder running Python gives the GIL up within one of being asked); a
    C call holding it longer is unseen.
    """
    try:
        _, wait_before, runs_before = before.split()
        _, wait_after, runs_after = after.split()
        woken = returned - (int(wait_after) - int(wait_before))
        extra_runs = int(runs_after) - int(runs_before) - 1
    except ValueError:  # an unreadable line: nothing known beyond the select()'s own times
        return returned
    if extra_runs > 0 and threading.active_count() > 1:
        woken -= int(extra_runs * sys.getswitchinterval() * 1e9)
    return max(entered, woken)


class _Schedstat(functools.partial[bytes]):
    """Reads `SCHEDSTAT_PATH` of the thread that opened it: ``os.pread(fd, 64, 0)``, ~1 µs."""

    def close(self) -> None:
        """Close the file."""
        os.close(self.args[0])


def thread_schedstat() -> Callable[[], bytes] | None:
    """A reader of the calling thread's scheduler counters (for `TimedSelector`), or None
    where the kernel has none (not Linux, no schedstat, a sandbox that hides /proc); the C
    module's `Schedstat` where the C selector runs (it reads that one without a call)."""
    try:
        fd = os.open(SCHEDSTAT_PATH, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        fields = os.pread(fd, 64, 0).split()
    except OSError:
        fields = []
    if len(fields) != 3 or not all(field.isdigit() for field in fields):
        os.close(fd)
        return None
    if _C is not None:
        reader: Callable[[], bytes] = _C.Schedstat(fd)
        return reader
    return _Schedstat(os.pread, fd, 64, 0)


_POLL = selectors.DefaultSelector.select
_READ = selectors.EVENT_READ
_EVENTS = selectors.EVENT_READ | selectors.EVENT_WRITE


def compiled_module() -> tuple[Any | None, str | None]:
    """The built C selector (`labkit.wire._loopclock`) and None, or None and why it did not
    load; loaded whatever the switch says (the tests set it beside the Python one)."""
    try:
        return importlib.import_module("labkit.wire._loopclock"), None
    except ImportError as exc:
        return None, f"{type(exc).__name__}: {exc}"


def choose(
    wanted: readpath.Setting, module: Any | None, not_built: str | None
) -> Literal["c", "python"]:
    """Which timed select() runs for a ``LABKIT_READPATH`` setting (`readpath.SETTINGS`)
    and the C module as it loaded (None: `not_built` says why): ``python`` for
    ``python`` or without it, ConfigError for ``c`` without it."""
    if wanted == "python":
        return "python"
    if module is None:
        if wanted == "c":
            raise ConfigError(
                f"{readpath.ENV_VAR}=c but labkit was installed without its C timed select "
                f"({not_built}); reinstall it with a C compiler, or unset the variable"
            )
        return "python"
    return "c"


_SETTING = readpath.setting(os.environ.get(readpath.ENV_VAR))
_LOADED, _NOT_BUILT = (None, None) if _SETTING == "python" else compiled_module()
#: Which timed select() this process runs: ``"c"`` (`_loopclock.TimedEpoll`) or ``"python"``
#: (`PyTimedSelector`), as ``LABKIT_READPATH`` and the build allow (`choose`).
SELECT_IMPLEMENTATION = choose(_SETTING, _LOADED, _NOT_BUILT)
_C = _LOADED if SELECT_IMPLEMENTATION == "c" else None


def _fileobj_to_fd(fileobj: Any) -> int:
    """A file object's descriptor, as the selectors module finds it."""
    if isinstance(fileobj, int):
        fd = fileobj
    else:
        try:
            fd = int(fileobj.fileno())
        except (AttributeError, TypeError, ValueError):
            raise ValueError(f"Invalid file object: {fileobj!r}") from None
    if fd < 0:
        raise ValueError(f"Invalid file descriptor: {fd}")
    return fd


class _KeyMap(Mapping[Any, selectors.SelectorKey]):
    """A C selector's registrations as the mapping `get_map` gives (file object -> key)."""

    def __init__(self, selector: Any) -> None:
        self._selector = selector

    def __len__(self) -> int:
        return len(self._selector._keys)

    def __getitem__(self, fileobj: Any) -> selectors.SelectorKey:
        fd = self._selector._fileobj_lookup(fileobj)
        key: selectors.SelectorKey | None = self._selector._keys.get(fd)
        if key is None:
            raise KeyError(f"{fileobj!r} is not registered")
        return key

    def __iter__(self) -> Iterator[Any]:
        return iter(self._selector._keys)


def _c_selector_class(module: Any) -> type[PyTimedSelector]:
    """`TimedSelector` on the C module's `TimedEpoll`: the poll, clocks, counters and
    windows in one C call; registration checks and look-ups here, as `selectors` does."""

    class CTimedSelector(module.TimedEpoll, selectors.BaseSelector):  # type: ignore[misc]
        """`PyTimedSelector` with its ``select()`` and per-socket state in C (same windows,
        history, counts and states; tests/wire/test_loopclock_parity.py)."""

        #: As `PyTimedSelector.schedstat` (a property of the C object).
        schedstat: Callable[[], bytes] | None

        def __init__(
            self,
            clock: Callable[[], int] = time.perf_counter_ns,
            schedstat: Callable[[], bytes] | None = None,
        ) -> None:
            # perf_counter_ns is CLOCK_MONOTONIC on Linux: read in C without a call.
            super().__init__(None if clock is time.perf_counter_ns else clock, schedstat, _woken)
            self._map: _KeyMap | None = _KeyMap(self)

        def _fileobj_lookup(self, fileobj: Any) -> int:
            try:
                return _fileobj_to_fd(fileobj)
            except ValueError:
                for key in self._keys.values():
                    if key.fileobj is fileobj:
                        fd: int = key.fd
                        return fd
                raise

        def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
            """Register as the default selector does; a reader is noted as watched."""
            if not events or events & ~_EVENTS:
                raise ValueError(f"Invalid events: {events!r}")
            key = selectors.SelectorKey(fileobj, self._fileobj_lookup(fileobj), events, data)
            if key.fd in self._keys:
                raise KeyError(f"{fileobj!r} (FD {key.fd}) is already registered")
            self._add(key.fd, events, key)
            return key

        def unregister(self, fileobj: Any) -> selectors.SelectorKey:
            """Unregister as the default selector does; the socket's history stays."""
            key: selectors.SelectorKey | None = self._keys.get(self._fileobj_lookup(fileobj))
            if key is None:
                raise KeyError(f"{fileobj!r} is not registered")
            self._remove(key.fd)
            return key

        def modify(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
            """Modify as the default selector does; a reader newly watched, or no longer,
            is noted."""
            key: selectors.SelectorKey | None = self._keys.get(self._fileobj_lookup(fileobj))
            if key is None:
                raise KeyError(f"{fileobj!r} is not registered")
            if events != key.events or data != key.data:
                key = key._replace(events=events, data=data)
                self._modify(key.fd, events, key)
            return key

        def get_map(self) -> Mapping[Any, selectors.SelectorKey] | None:  # type: ignore[override]
            """File object -> key of what is registered; None once closed."""
            return self._map

        window_before = PyTimedSelector.window_before

        def close(self) -> None:
            """Close the epoll descriptor and the scheduler counters' file."""
            self._close_poll()
            self._map = None
            closer = getattr(self.schedstat, "close", None)
            if closer is not None:
                closer()
                self.schedstat = None

    return CTimedSelector


_C_CLASS: list[type[PyTimedSelector]] = []


def c_timed_selector() -> type[PyTimedSelector] | None:
    """The C-backed timed selector class, whatever the switch says (None where the module is
    not built): the tests and benchmarks set it beside `PyTimedSelector`."""
    if not _C_CLASS:
        module = _C if _C is not None else compiled_module()[0]
        if module is None:
            return None
        _C_CLASS.append(_c_selector_class(module))
    return _C_CLASS[0]


if TYPE_CHECKING:
    TimedSelector = PyTimedSelector
else:
    #: The timed selector labkit runs (`SELECT_IMPLEMENTATION`): C where built, else Python.
    TimedSelector = PyTimedSelector if _C is None else c_timed_selector()


_CLOCKS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, TimedSelector] = (
    weakref.WeakKeyDictionary()
)


class _Loop(asyncio.SelectorEventLoop):
    """asyncio's selector loop, but an async generator dropped unfinished in the loop's own
    thread has its ``aclose()`` scheduled with `call_soon`, not `call_soon_threadsafe`.

    A stream read by ``async for`` and left at its end (a body's iterator once the rest is
    pushed) was such a generator, one a request (the recorder now closes it itself): the
    thread-safe call wrote a byte to the loop's self-pipe, which woke the selector and cost
    a callback reading it back (~10-20 µs of a request's CPU in a loaded level). From the
    loop's thread nothing needs waking: the close runs in the next iteration either way.
    From another thread, as asyncio does.
    """

    def _asyncgen_finalizer_hook(self, agen: Any) -> None:
        if asyncio._get_running_loop() is not self:
            super()._asyncgen_finalizer_hook(agen)  # type: ignore[misc]
            return
        self._asyncgens.discard(agen)  # type: ignore[attr-defined]
        if not self.is_closed():
            self.call_soon(self.create_task, agen.aclose())


def new_event_loop() -> asyncio.AbstractEventLoop:
    """A selector event loop on a `TimedSelector` (for ``asyncio.Runner(loop_factory=...)``)."""
    # Called by the thread that will run the loop (asyncio.Runner's loop_factory), whose
    # scheduler counters are then the loop's.
    selector = TimedSelector(schedstat=thread_schedstat())
    loop = _Loop(selector)
    _CLOCKS[loop] = selector
    return loop


def run(main: Coroutine[Any, Any, T], *, debug: bool | None = None) -> T:
    """``asyncio.run(main)`` on a loop built by `new_event_loop`."""
    result: list[T] = []

    async def body() -> None:
        # The runner's task returns nothing: on its way out Python 3.11's Runner restores
        # SIGINT through `signal.signal`, whose enum lookup formats the old handler (which
        # holds this task) with repr(), and so the repr of all `main` returned (a run's
        # every record: milliseconds per thousand records).
        result.append(await main)

    with asyncio.Runner(debug=debug, loop_factory=new_event_loop) as runner:
        runner.run(body())
    return result[0]


def loop_clock(loop: asyncio.AbstractEventLoop | None = None) -> TimedSelector | None:
    """The `TimedSelector` of `loop` (default: the running loop); None on any other loop,
    uvloop included: there is no estimate there."""
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
        first, which came early in the window, and a lone one is put in its middle; where
        ``hi`` is the last one's arrival (a select() they woke), at ``lo + j (hi - lo) / k``.
        """
        window_of = dict(zip(self.stamps_ns, self.windows, strict=True))
        windows = [window_of.get(t) for t in event_stamps_ns]
        out: list[int] = []
        append = out.append
        n = len(windows)
        i = 0
        while i < n:
            window = windows[i]
            end = i + 1
            while end < n and windows[end] is window:
                end += 1
            if window is not None:
                lo, hi, closed = window
                if end - i == 1 and not closed:
                    append(event_stamps_ns[i] - (lo + hi) // 2)
                else:
                    parts = end - i + (0 if closed else 1)
                    span = hi - lo
                    for j in range(i, end):
                        append(event_stamps_ns[j] - lo - (j - i + 1) * span // parts)
            i = end
        return out
