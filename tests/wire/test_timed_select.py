"""The timed ``select()`` in C (`readpath.TIMED_SELECT`) keeps what the Python one keeps.

Two `TimedSelector`s watch the same pipes, one running the C select and one `_select_py`,
through the same random sequence of registrations, pauses, writes, drains and selects, with
the same scripted clock and scheduler counters (odd counter lines among them, and runs that
make `_woken` widen): after every step their answers, reports, history and per-socket
states are equal.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from labkit.wire import loopclock
from labkit.wire.loopclock import TimedSelector

pytestmark = [
    pytest.mark.unit,
    pytest.mark.skipif(loopclock._SELECT_C is None, reason="built without TIMED_SELECT"),
]

PIPES = 3
MS = 1_000_000


def _scripted(values: list[Any]) -> Callable[[], Any]:
    """Returns the values in turn, then repeats the last."""
    it: Iterator[Any] = iter(values)
    last = [values[-1]]

    def call() -> Any:
        last[0] = next(it, last[0])
        return last[0]

    return call


def _clock(gaps: list[int]) -> Callable[[], int]:
    """A clock that moves on by the gaps in turn, round and round."""
    t = [1_000]
    i = [0]

    def call() -> int:
        t[0] += gaps[i[0] % len(gaps)]
        i[0] += 1
        return t[0]

    return call


@st.composite
def _counter_lines(draw: st.DrawFn) -> list[bytes]:
    """A thread's counter lines as it reads them, each after the last: run time, wait and
    runs growing by a little (wake delays within a select()'s span), now and then a line
    the kernel would not write."""
    run, wait, runs = 10**9, 10**6, 100
    out = []
    for _ in range(draw(st.integers(1, 40))):
        if draw(st.integers(0, 9)) == 0:
            out.append(
                draw(st.sampled_from([b"1 2\n", b"x y z\n", b"1_0 2 3\n", b" 5 6 7 \n", b""]))
            )
            continue
        run += draw(st.integers(0, 10**6))
        wait += draw(st.integers(0, 150_000))
        runs += draw(st.sampled_from([0, 1, 1, 1, 2, 3]))
        out.append(b"%d %d %d\n" % (run, wait, runs))
    return out


# Writes and waiting selects the most: the states worth comparing are those of sockets
# reported again and again (unread bytes stay readable: epoll is level-triggered).
_ops = ["write"] * 4 + ["drain", "register", "unregister", "modify"] + ["select"] * 5
_steps = st.lists(
    st.tuples(
        st.sampled_from(_ops),
        st.integers(0, PIPES - 1),
        st.sampled_from([0, 0.0, -1.0, 0.0001, 0.0001, 0.0001]),
    ),
    min_size=1,
    max_size=30,
)


def _state(sel: TimedSelector, ready: list[tuple[selectors.SelectorKey, int]]) -> Any:
    sockets = {
        fd: (s.unread, s.watched_from, s.seen_empty_ns, s.reported_by, list(s.reports))
        for fd, s in sel._sockets.items()
    }
    return (
        [(key.fd, key.events, mask) for key, mask in ready],
        {fd: list(q) for fd, q in sel.reports.items()},
        list(sel.history),
        sockets,
        sel.selects,
        sel.entered_ns,
        sel.returned_ns,
    )


@settings(max_examples=300, deadline=None)
@given(
    steps=_steps,
    gaps=st.lists(
        st.one_of(st.integers(0, 60_000), st.integers(50_001, 400_000)), min_size=1, max_size=80
    ),
    counters=_counter_lines(),
    read_counters=st.booleans(),
)
def test_the_c_select_keeps_what_the_python_one_keeps(
    steps: list[tuple[str, int, float]],
    gaps: list[int],
    counters: list[bytes],
    read_counters: bool,
) -> None:
    pipes = [os.pipe() for _ in range(PIPES)]
    selectors_: list[TimedSelector] = []
    try:
        for use_c in (True, False):
            sel = TimedSelector(
                clock=_clock(gaps), schedstat=_scripted(counters) if read_counters else None
            )
            if not use_c:
                sel._select_c = None
            selectors_.append(sel)
        assert selectors_[0]._select_c is loopclock._SELECT_C
        assert selectors_[1]._select_c is None
        watched: dict[int, int] = {}
        for r, _ in pipes:  # watched from the start, as a stream's socket is
            watched[r] = selectors.EVENT_READ
            for s in selectors_:
                s.register(r, selectors.EVENT_READ)
        for op, pipe, timeout in steps:
            if op == "select":
                states = [_state(s, s.select(timeout=timeout)) for s in selectors_]
                assert states[0] == states[1]
                continue
            r, w = pipes[pipe]
            if op == "write":
                os.write(w, b"x")
            elif op == "drain":
                os.set_blocking(r, False)
                with contextlib.suppress(BlockingIOError):
                    os.read(r, 4096)
            elif op == "register" and r not in watched:
                watched[r] = selectors.EVENT_READ
                for s in selectors_:
                    s.register(r, selectors.EVENT_READ)
            elif op == "unregister" and r in watched:
                del watched[r]
                for s in selectors_:
                    s.unregister(r)
            elif op == "modify" and r in watched:
                # A read end is never writable: READ|WRITE keeps it read, WRITE pauses it.
                events = selectors.EVENT_WRITE if watched[r] & selectors.EVENT_READ else 3
                watched[r] = events
                for s in selectors_:
                    s.modify(r, events)
    finally:
        for s in selectors_:
            s.close()
        for r, w in pipes:
            os.close(r)
            os.close(w)


def test_a_loop_built_here_runs_the_c_select() -> None:
    if not sys.platform.startswith("linux"):
        pytest.skip("epoll: Linux only")
    loop = loopclock.new_event_loop()
    try:
        clock = loopclock.loop_clock(loop)
        assert clock is not None and clock._select_c is loopclock._SELECT_C
    finally:
        loop.close()
