"""The loop clock's lateness estimate, from scripted select() times (pipes, no sockets)."""

from __future__ import annotations

import os
import selectors
import socket
import sys
import threading
import time
from collections import deque
from collections.abc import Iterator
from pathlib import Path

import pytest

from labkit.wire import loopclock
from labkit.wire.loopclock import (
    LatenessTracker,
    TimedSelector,
    loop_clock,
    new_event_loop,
    run,
)

pytestmark = [pytest.mark.unit, pytest.mark.usefixtures("timed_selector")]

MS = 1_000_000


class ScriptedClock:
    """Returns the given stamps in order, one per call."""

    def __init__(self, *stamps: int) -> None:
        self._stamps = iter(stamps)

    def __call__(self) -> int:
        return next(self._stamps)


@pytest.fixture
def pipe() -> Iterator[tuple[int, int]]:
    r, w = os.pipe()
    yield r, w
    os.close(r)
    os.close(w)


def test_bytes_that_woke_a_blocked_select_arrived_when_it_returned(
    pipe: tuple[int, int],
) -> None:
    r, w = pipe
    sel = TimedSelector(clock=ScriptedClock(1 * MS, 5 * MS))
    sel.register(r, selectors.EVENT_READ)
    os.write(w, b"x")
    assert sel.select(timeout=1.0)
    assert sel.reports[r][-1] == (5 * MS, 5 * MS, True)


def test_bytes_found_at_once_arrived_since_the_previous_select(pipe: tuple[int, int]) -> None:
    r, w = pipe
    # select 1: 0 -> 0.01 ms, nothing; the loop is busy until 2 ms; select 2 finds the byte.
    sel = TimedSelector(clock=ScriptedClock(0, 10_000, 2 * MS, 2 * MS + 5_000))
    sel.register(r, selectors.EVENT_READ)
    assert sel.select(timeout=0) == []
    os.write(w, b"x")
    assert sel.select(timeout=0)
    assert sel.reports[r][-1] == (10_000, 2 * MS, False)


def test_a_paused_reader_is_judged_from_the_last_select_that_watched_it(
    pipe: tuple[int, int],
) -> None:
    r, w = pipe
    other_r, other_w = os.pipe()
    try:
        sel = TimedSelector(clock=ScriptedClock(0, 1 * MS, 3 * MS, 4 * MS, 9 * MS, 9 * MS + 1))
        sel.register(r, selectors.EVENT_READ)
        sel.register(other_r, selectors.EVENT_READ)
        os.write(other_w, b"x")
        sel.select(timeout=0)  # watched r, saw it empty at 1 ms
        sel.unregister(r)  # the reader pauses ...
        os.read(other_r, 1)
        os.write(other_w, b"x")
        sel.select(timeout=0)  # ... while the loop selects without it (3 -> 4 ms) ...
        sel.register(r, selectors.EVENT_READ)  # ... and resumes
        os.write(w, b"x")
        sel.select(timeout=0)
        # Not watched by the previous select(): since the last one that did (1 ms).
        assert sel.reports[r][-1] == (1 * MS, 9 * MS, False)
    finally:
        os.close(other_r)
        os.close(other_w)


def _tracker(*windows: tuple[int, int, bool]) -> tuple[TimedSelector, LatenessTracker]:
    sel = TimedSelector(clock=ScriptedClock())
    sel.reports[7] = deque(windows)
    return sel, LatenessTracker(sel, 7)


def test_chunks_of_one_read_share_its_report_and_a_new_wait_takes_the_next() -> None:
    sel, tracker = _tracker((0, 0, True))  # the headers' report: its bytes are read next
    tracker.note(1 * MS)
    tracker.note(2 * MS)  # no select() since: the rest of the same read
    sel.reports[7].append((4 * MS, 6 * MS, False))
    sel.selects += 1
    tracker.note(7 * MS)
    sel.selects += 1  # the reader waited, but no bytes were reported: no estimate
    tracker.note(8 * MS)
    assert tracker.stamps_ns == [1 * MS, 2 * MS, 7 * MS]
    assert tracker.lateness_ns([1 * MS, 2 * MS, 7 * MS, 8 * MS]) == [1 * MS, 2 * MS, 2 * MS]


def test_events_gathered_by_one_read_are_spread_over_its_window() -> None:
    _, tracker = _tracker((0, 8 * MS, False))
    tracker.note(10 * MS)
    # Three events in one read that waited from 0 to 8 ms: arrivals at 2, 4 and 6 ms.
    assert tracker.lateness_ns([10 * MS] * 3) == [8 * MS, 6 * MS, 4 * MS]


def test_a_late_read_of_a_blocked_select_is_late_by_the_whole_delay() -> None:
    _, tracker = _tracker((5 * MS, 5 * MS, True))
    tracker.note(35 * MS)
    assert tracker.lateness_ns([35 * MS, 35 * MS]) == [30 * MS, 30 * MS]


def test_bytes_whose_read_a_pause_cancelled_keep_their_window(pipe: tuple[int, int]) -> None:
    r, w = pipe
    sel = TimedSelector(clock=ScriptedClock(0, 1 * MS, 3 * MS, 3 * MS + 1, 9 * MS, 9 * MS + 1))
    sel.register(r, selectors.EVENT_READ)
    sel.select(timeout=0)  # empty at 1 ms
    os.write(w, b"x")
    assert sel.select(timeout=0)  # reported: arrived in [1, 3] ms ...
    sel.unregister(r)  # ... but the reader pauses in the same turn: nothing is read
    sel.register(r, selectors.EVENT_READ)
    assert sel.select(timeout=0)  # the same bytes, reported again
    assert list(sel.reports[r]) == [(1 * MS, 3 * MS, False)]


def test_run_uses_a_timed_loop_and_other_loops_have_none() -> None:
    async def which() -> TimedSelector | None:
        return loop_clock()

    assert isinstance(run(which()), TimedSelector)
    loop = new_event_loop()
    try:
        assert isinstance(loop_clock(loop), TimedSelector)
    finally:
        loop.close()
    assert loop_clock() is None  # no running loop


def test_a_callback_read_is_placed_after_the_select_before_it(pipe: tuple[int, int]) -> None:
    r, w = pipe
    sel = TimedSelector(clock=ScriptedClock(0, 1 * MS, 3 * MS, 3 * MS + 1, 5 * MS, 7 * MS))
    sel.register(r, selectors.EVENT_READ)
    os.write(w, b"x")
    sel.select(timeout=0)  # 0 -> 1 ms
    sel.select(timeout=0)  # 3 ms, at once
    sel.select(timeout=1.0)  # blocked 5 -> 7 ms
    assert sel.window_before(3 * MS + 500) == (1 * MS, 3 * MS, False)
    assert sel.window_before(7 * MS + 10) == (5 * MS, 7 * MS, True)
    assert sel.window_before(0) is None


class ScriptedCounters:
    """Scheduler counter lines (as `thread_schedstat` reads them), one per call."""

    def __init__(self, *counters: tuple[int, int]) -> None:
        self._lines = iter(f"100 {wait} {runs}\n".encode() for wait, runs in counters)

    def __call__(self) -> bytes:
        return next(self._lines)


def test_a_wake_that_waited_for_a_cpu_is_placed_before_the_return(
    pipe: tuple[int, int],
) -> None:
    r, w = pipe
    # Blocked 1 -> 40 ms; put on a CPU once, after waiting 30 ms for it: woken at 10 ms.
    sel = TimedSelector(
        clock=ScriptedClock(1 * MS, 40 * MS),
        schedstat=ScriptedCounters((5 * MS, 7), (35 * MS, 8)),
    )
    sel.register(r, selectors.EVENT_READ)
    os.write(w, b"x")
    assert sel.select(timeout=1.0)
    assert sel.reports[r][-1] == (10 * MS, 10 * MS, True)
    sel.history.appendleft((0, 0, False, 0))  # an earlier select(), as in a running loop
    assert sel.window_before(40 * MS) == (1 * MS, 10 * MS, True)


@pytest.mark.parametrize(("threads", "woken_ms"), [(2, 35), (1, 40)])
def test_a_wake_followed_by_another_sleep_is_widened_by_a_switch_interval(
    pipe: tuple[int, int], monkeypatch: pytest.MonkeyPatch, threads: int, woken_ms: int
) -> None:
    r, w = pipe
    # Put on a CPU twice, no run-queue wait: asleep again after the wake, on the GIL if
    # another Python thread is alive (widened by its 5 ms switch interval), else preempted.
    monkeypatch.setattr(loopclock.threading, "active_count", lambda: threads)
    sel = TimedSelector(
        clock=ScriptedClock(1 * MS, 40 * MS),
        schedstat=ScriptedCounters((0, 7), (0, 9)),
    )
    sel.register(r, selectors.EVENT_READ)
    os.write(w, b"x")
    interval = sys.getswitchinterval()
    sys.setswitchinterval(0.005)
    try:
        assert sel.select(timeout=1.0)
    finally:
        sys.setswitchinterval(interval)
    assert sel.reports[r][-1] == (woken_ms * MS, woken_ms * MS, True)


def test_a_prompt_wake_or_a_select_at_once_reads_no_counters(pipe: tuple[int, int]) -> None:
    r, w = pipe
    # Woken once, no wait: the return is the wake. A select(0) reads no counters at all.
    sel = TimedSelector(
        clock=ScriptedClock(1 * MS, 40 * MS, 41 * MS, 41 * MS + 1),
        schedstat=ScriptedCounters((5 * MS, 7), (5 * MS, 8)),
    )
    sel.register(r, selectors.EVENT_READ)
    os.write(w, b"x")
    assert sel.select(timeout=1.0)
    assert sel.select(timeout=0)
    assert list(sel.reports[r]) == [(40 * MS, 40 * MS, True), (40 * MS, 41 * MS, False)]


def test_no_scheduler_counters_where_the_file_is_missing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(loopclock, "SCHEDSTAT_PATH", str(tmp_path / "absent"))
    assert loopclock.thread_schedstat() is None
    garbled = tmp_path / "garbled"
    garbled.write_text("garbled\n")
    monkeypatch.setattr(loopclock, "SCHEDSTAT_PATH", str(garbled))
    assert loopclock.thread_schedstat() is None
    loop = new_event_loop()  # and the loop is built without them
    try:
        clock = loop_clock(loop)
        assert clock is not None and clock.schedstat is None
    finally:
        loop.close()


def _sleeping(tid: int) -> bool:
    """Whether thread `tid` of this process is asleep (state S in its /proc stat)."""
    with open(f"/proc/self/task/{tid}/stat", "rb") as stat:
        return stat.read().rsplit(b")", 1)[1].split()[0] == b"S"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux /proc")
def test_the_counters_are_read_again_once_the_thread_was_switched_out(tmp_path: Path) -> None:
    # The C reader keeps its last reading while the thread's context switches stand still
    # (the run-queue delay and the run count change only across a switch). A file stands
    # in for the counters: they "change" while the thread sleeps, and again while it waits
    # in the select() (woken, it waited 1 ms for a CPU). Read again both times, the wake is
    # placed 1 ms before the return; the stale first reading would put it up to 7 ms earlier.
    module, why = loopclock.compiled_module()
    if module is None:
        pytest.skip(f"labkit was built without labkit.wire._loopclock ({why})")
    counters = tmp_path / "schedstat"
    counters.write_bytes(b"100 1000000 1\n")
    fd = os.open(counters, os.O_RDONLY)
    sel = TimedSelector(schedstat=module.Schedstat(fd))
    a, b = socket.socketpair()
    selecting = threading.get_native_id()

    def send_once_asleep() -> None:
        while not _sleeping(selecting):
            time.sleep(0.0005)
        time.sleep(0.005)  # well blocked (`BLOCKED_NS`), and longer than the 1 ms below
        counters.write_bytes(b"100 9000000 3\n")
        b.send(b"x")

    try:
        sel.register(a, selectors.EVENT_READ)
        assert sel.select(timeout=0.01) == []  # the counters read before it: 1 ms, one run
        counters.write_bytes(b"100 8000000 2\n")
        time.sleep(0.002)  # switched out
        writer = threading.Thread(target=send_once_asleep)
        writer.start()
        assert sel.select(timeout=10.0)
        writer.join()
        returned, _, blocked, woken = sel.history[-1]
        assert blocked
        assert woken == returned - 1_000_000
    finally:
        sel.close()
        a.close()
        b.close()
