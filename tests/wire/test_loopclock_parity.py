"""The C timed select() against the Python reference: the same windows, history, counts and
socket states for the same calls, sockets, clock readings and scheduler counters.

Both selectors watch the same socketpairs (each with its own epoll), take their clock and
counter readings from one script each, and go through one fuzzed sequence of registrations,
modifications, writes, drains, selects, reads by a stream's tracker and forgets; after each
step everything a reader can see of them is compared. A real loop then runs a few streams
with both selectors side by side, the C one replaying the clock and counters the Python
one read.
"""

from __future__ import annotations

import asyncio
import contextlib
import selectors
import socket
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from labkit.wire import loopclock

pytestmark = pytest.mark.unit

C_SELECTOR = loopclock.c_timed_selector()
needs_c = pytest.mark.skipif(C_SELECTOR is None, reason="built without labkit.wire._loopclock")

SOCKETS = 4
READ, WRITE = selectors.EVENT_READ, selectors.EVENT_WRITE


class Script:
    """Replays values in order (a clock or a counters reader); records what was asked."""

    def __init__(self, values: list[Any]) -> None:
        self.values = values
        self.at = 0

    def __call__(self) -> Any:
        value = self.values[self.at % len(self.values)]
        self.at += 1
        return value


def _state(sel: Any, fd: int) -> tuple[Any, ...] | None:
    """A socket's state as (watched_from, seen_empty_ns, reported_by, unread, reports)."""
    if isinstance(sel, loopclock.PyTimedSelector):
        state = sel._sockets.get(fd)
        if state is None:
            return None
        assert state.reports is sel.reports.get(fd)
        return (
            state.watched_from,
            state.seen_empty_ns,
            state.reported_by,
            state.unread,
            list(state.reports),
        )
    found = sel._state(fd)
    if found is None:
        return None
    watched_from, seen_empty_ns, reported_by, unread, reports = found
    assert reports is sel.reports.get(fd)
    return (watched_from, seen_empty_ns, reported_by, unread, list(reports))


def _seen(sel: Any, fds: list[int]) -> dict[str, Any]:
    """Everything a reader can see of a selector."""
    keys = sel.get_map()
    return {
        "selects": sel.selects,
        "entered": sel.entered_ns,
        "returned": sel.returned_ns,
        "history": list(sel.history),
        "reports": {fd: list(q) for fd, q in sel.reports.items()},
        "states": [_state(sel, fd) for fd in fds],
        "keys": None if keys is None else sorted((k.fd, k.events, k.data) for k in keys.values()),
        "window_before": [sel.window_before(t) for t in (0, 50_000, 10**6, 10**9, 10**12)],
    }


def _do(sel: Any, op: tuple[Any, ...], socks: list[socket.socket]) -> Any:
    """One step on one selector: its result, or the type of the exception it raised."""
    kind = op[0]
    try:
        if kind == "register":
            key = sel.register(socks[op[1]], op[2], op[3])
            return (key.fd, key.events, key.data)
        if kind == "modify":
            key = sel.modify(socks[op[1]], op[2], op[3])
            return (key.fd, key.events, key.data)
        if kind == "unregister":
            key = sel.unregister(socks[op[1]])
            return (key.fd, key.events, key.data)
        if kind == "select":
            return sorted((key.fd, mask) for key, mask in sel.select(op[1]))
        if kind == "track":  # a stream's tracker made on the socket (LatenessTracker)
            tracker = loopclock.LatenessTracker(sel, socks[op[1]].fileno())
            return tracker._current
        if kind == "consume":  # the tracker takes the next report
            queue = sel.reports.get(socks[op[1]].fileno())
            return queue.popleft() if queue else None
        if kind == "forget":
            sel.forget(socks[op[1]].fileno())
            return None
        if kind == "get_key":
            key = sel.get_key(socks[op[1]])
            return (key.fd, key.events, key.data)
    except (KeyError, ValueError, OSError) as exc:
        return type(exc).__name__
    raise AssertionError(op)


index = st.integers(0, SOCKETS - 1)
events = st.sampled_from([READ, WRITE, READ | WRITE])
data = st.sampled_from([None, "a", "b"])
ops = st.one_of(
    st.tuples(st.just("register"), index, events, data),
    st.tuples(st.just("modify"), index, events, data),
    st.tuples(st.just("unregister"), index),
    st.tuples(st.just("write"), index),
    st.tuples(st.just("drain"), index),
    st.tuples(st.just("select"), st.sampled_from([0, 0.0, 0.0001, 1.0, None])),
    st.tuples(st.just("track"), index),
    st.tuples(st.just("consume"), index),
    st.tuples(st.just("forget"), index),
    st.tuples(st.just("get_key"), index),
)
#: Scheduler counter lines: the common one, and what the Python reference reads its own way.
line = st.one_of(
    st.builds(
        lambda a, b, c: b"%d %d %d\n" % (a, b, c),
        st.integers(0, 10**12),
        st.integers(0, 10**9),
        st.integers(0, 10),
    ),
    st.sampled_from([b"", b"1 2\n", b"x y z\n", b"1 2 3 4\n", b" 5\t6 7 ", b"+1 -2 3", b"1_0 2 3"]),
)


@contextlib.contextmanager
def socketpairs() -> Iterator[tuple[list[socket.socket], list[socket.socket]]]:
    """Socketpairs: the watched ends and their peers."""
    pairs = [socket.socketpair() for _ in range(SOCKETS)]
    for a, _ in pairs:
        a.setblocking(False)
    yield [a for a, _ in pairs], [b for _, b in pairs]
    for a, b in pairs:
        a.close()
        b.close()


def _ready_now(socks: list[socket.socket], registered: dict[int, int]) -> bool:
    """Whether some registered socket is ready (else a select() with a timeout would sleep)."""
    probe = selectors.DefaultSelector()
    try:
        for i, ev in registered.items():
            probe.register(socks[i], ev)
        return bool(probe.select(0))
    finally:
        probe.close()


@needs_c
@settings(max_examples=150, deadline=None)
@given(
    steps=st.lists(ops, max_size=40),
    gaps=st.lists(
        st.one_of(st.integers(0, 200_000), st.sampled_from([45_000, 50_000, 50_001])),
        min_size=1,
        max_size=20,
    ),
    lines=st.lists(line, min_size=1, max_size=8),
    scheduled=st.booleans(),
)
def test_c_select_keeps_what_the_python_one_keeps(
    steps: list[tuple[Any, ...]],
    gaps: list[int],
    lines: list[bytes],
    scheduled: bool,
) -> None:
    with socketpairs() as (watched, peers):
        _run_both(watched, peers, steps, gaps, lines, scheduled)


def _run_both(
    watched: list[socket.socket],
    peers: list[socket.socket],
    steps: list[tuple[Any, ...]],
    gaps: list[int],
    lines: list[bytes],
    scheduled: bool,
) -> None:
    """The steps on both selectors, compared after each."""
    clock_values: list[int] = []
    t = 1_000
    for i in range(400):
        t += gaps[i % len(gaps)]
        clock_values.append(t)
    assert C_SELECTOR is not None
    both: list[Any] = [
        selector_class(clock=Script(clock_values), schedstat=Script(lines) if scheduled else None)
        for selector_class in (loopclock.PyTimedSelector, C_SELECTOR)
    ]
    fds = [s.fileno() for s in watched]
    registered: dict[int, int] = {}
    try:
        for op in steps:
            if op[0] == "write":
                peers[op[1]].send(b"x")
                continue
            if op[0] == "drain":
                with contextlib.suppress(BlockingIOError):
                    watched[op[1]].recv(4096)
                continue
            if op[0] == "select" and op[1] not in (0, 0.0) and not _ready_now(watched, registered):
                op = ("select", 0)  # nothing would wake it: not worth a sleep
            results = [_do(sel, op, watched) for sel in both]
            assert results[0] == results[1], op
            if op[0] in ("register", "modify") and not isinstance(results[0], str):
                registered[op[1]] = op[2]
            elif op[0] == "unregister" and not isinstance(results[0], str):
                registered.pop(op[1], None)
            assert _seen(both[0], fds) == _seen(both[1], fds), op
            assert both[0].schedstat is None or both[0].schedstat.at == both[1].schedstat.at
    finally:
        for sel in both:
            sel.close()
    assert [sel.get_map() for sel in both] == [None, None]


@needs_c
def test_a_closed_socket_unregisters_by_its_object_as_the_default_selector_does() -> None:
    assert C_SELECTOR is not None
    a, b = socket.socketpair()
    sel = C_SELECTOR()
    try:
        sel.register(a, READ)
        a.close()  # fileno() is -1 now: found by identity
        assert sel.unregister(a).fileobj is a
        assert len(sel.get_map() or {}) == 0
        with pytest.raises(ValueError):
            sel.register(-1, READ)
        with pytest.raises(ValueError):
            sel.register(b, 0)
        with pytest.raises(KeyError):
            sel.unregister(b)
    finally:
        b.close()
        sel.close()


class _Tee(selectors.BaseSelector):
    """Both selectors behind one: the loop's calls go to both, the Python one's answer is the
    loop's, and the C one reads back the clock and counters the Python one read."""

    def __init__(self, c_class: type[loopclock.PyTimedSelector]) -> None:
        self.clock_values: list[int] = []
        self.lines: list[bytes] = []
        self.read = 0
        self.py = loopclock.PyTimedSelector(clock=self._clock, schedstat=self._counters)
        self.c: Any = c_class(clock=self._replay_clock, schedstat=self._replay_counters)
        self.replayed_clock = 0
        self.replayed_lines = 0
        self.compared = 0

    def _clock(self) -> int:
        self.clock_values.append(time.perf_counter_ns())
        return self.clock_values[-1]

    def _counters(self) -> bytes:
        reader = loopclock.thread_schedstat()
        line = reader() if reader is not None else b""
        close: Callable[[], None] | None = getattr(reader, "close", None)
        if close is not None:
            close()
        self.lines.append(line)
        return line

    def _replay_clock(self) -> int:
        self.replayed_clock += 1
        return self.clock_values[self.replayed_clock - 1]

    def _replay_counters(self) -> bytes:
        self.replayed_lines += 1
        return self.lines[self.replayed_lines - 1]

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        self.c.register(fileobj, events, data)
        return self.py.register(fileobj, events, data)

    def modify(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        self.c.modify(fileobj, events, data)
        return self.py.modify(fileobj, events, data)

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        self.c.unregister(fileobj)
        return self.py.unregister(fileobj)

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        ready = self.py.select(timeout)
        # The C one sees the same sockets (nothing ran between) and replays the same clock
        # and counter readings; where nothing was ready it waits briefly, not for as long.
        c_ready = self.c.select(timeout if ready or timeout == 0 else 0.001)
        assert sorted(k.fd for k, _ in c_ready) == sorted(k.fd for k, _ in ready)
        fds = list(self.py.reports)
        assert _seen(self.py, fds) == _seen(self.c, fds)
        self.compared += 1
        return ready

    def get_map(self) -> Any:
        return self.py.get_map()

    def close(self) -> None:
        self.c.close()
        self.py.close()


@needs_c
def test_c_select_agrees_with_the_python_one_on_a_real_loop() -> None:
    assert C_SELECTOR is not None
    tee = _Tee(C_SELECTOR)

    async def stream(reader: asyncio.StreamReader, writer: socket.socket, n: int) -> int:
        loop = asyncio.get_running_loop()
        for i in range(n):
            loop.call_later(0.001 * (i % 3), writer.send, b"token %d\n" % i)
        got = 0
        while got < n:
            await reader.readline()
            got += 1
        return got

    async def main() -> list[int]:
        pairs = [socket.socketpair() for _ in range(3)]
        writers: list[asyncio.StreamWriter] = []
        try:
            readers = []
            for a, _ in pairs:
                reader, writer = await asyncio.open_connection(sock=a)
                readers.append(reader)
                writers.append(writer)
            return await asyncio.gather(
                *(stream(r, b, 20) for r, (_, b) in zip(readers, pairs, strict=True))
            )
        finally:
            for writer in writers:
                writer.close()
                await writer.wait_closed()
            for _, b in pairs:
                b.close()

    loop = asyncio.SelectorEventLoop(tee)
    try:
        assert loop.run_until_complete(main()) == [20, 20, 20]
    finally:
        loop.close()
    assert tee.compared > 0 and tee.py.history
    assert tee.replayed_clock == len(tee.clock_values)
    assert tee.replayed_lines == len(tee.lines)
