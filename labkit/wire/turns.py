"""One heavy step per event-loop iteration, so the loop keeps reading while records are made.

Why. A socket that is not read before its stream's next event arrives has both events
merged by the kernel into one queued segment carrying the later one's receive stamp: the
earlier event is then stamped late by a whole token gap, and no stamping can undo it
(`labkit.wire.lean`). Assembling a finished stream's record costs ~0.1–0.2 ms, and streams
that started together end together: at 32 streams 32 records were assembled in one or two
loop iterations, 3–6 ms in which no socket was read (the 2 ms stamp-error p99 of
`benchmarks/bench_load.py`). Taking a turn (`take_turn`) spreads such steps one per
iteration; each iteration begins with a select() that reads every socket with bytes waiting.
"""

from __future__ import annotations

import asyncio
import weakref
from collections import deque

from labkit.wire.loopclock import TimedSelector, loop_clock

__all__ = ["STEPS_PER_EXTRA_TURN", "take_start_turn", "take_turn"]

#: Per this many steps queued, one more step runs in each iteration (under it: one).
STEPS_PER_EXTRA_TURN = 64


class _Turns:
    """The queue of steps waiting for their iteration on one loop.

    On labkit's own loop (`loopclock.TimedSelector`, which counts its select() calls) a step
    alone takes its iteration by that count and schedules nothing: the turn is free again in
    the next iteration by itself. Only a step that finds the turn taken starts the chain that
    passes it on (`_pass_on`, a callback each iteration while steps wait). On any other loop
    each taken turn schedules one `_pass_on` for the next iteration, which frees it; that
    callback also made the loop's next select() return at once, an iteration more per
    request start and record on a level that would otherwise have waited in it.
    """

    __slots__ = ("_busy", "_loop", "_selector", "_taken_in", "_waiters")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        # The busy flag: a turn is being passed on (`_pass_on` scheduled); on a loop without
        # a select() count, also: a step has taken this iteration's turn.
        self._busy = False
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._selector: TimedSelector | None = loop_clock(loop)
        self._taken_in = -1  # the select() count of the iteration whose turn a step took

    async def take(self) -> None:
        if not self._busy:
            selector = self._selector
            if selector is None:
                self._busy = True
                self._loop.call_soon(self._pass_on)
                return
            if self._taken_in != selector.selects:
                self._taken_in = selector.selects  # free again in the next iteration
                return
            # This iteration's turn is taken: pass it on from the next one.
            self._busy = True
            self._loop.call_soon(self._pass_on)
        turn = self._loop.create_future()
        self._waiters.append(turn)
        await turn

    def _pass_on(self) -> None:
        # Runs in the iteration after a turn was taken: wake the next waiters (one, or more
        # for a long queue), whose steps then run in the iteration after this one, and pass
        # the turn on again from there.
        waiters = self._waiters
        share = 1 + len(waiters) // STEPS_PER_EXTRA_TURN
        woken = 0
        while waiters and woken < share:
            turn = waiters.popleft()
            if not turn.done():  # a waiter cancelled meanwhile has left the queue
                turn.set_result(None)
                woken += 1
        if woken:
            self._loop.call_soon(self._pass_on)
        else:
            self._busy = False


_TURNS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Turns] = weakref.WeakKeyDictionary()


async def take_turn() -> None:
    """Wait until no other heavy step has taken this loop iteration (module doc: why).

    A step waits at most one iteration per step queued before it; alone, it does not wait.
    A long queue shares an iteration (`STEPS_PER_EXTRA_TURN`): at 1,000 streams the ends and
    starts queued faster than one an iteration went (some 300 iterations a second, each
    reading a hundred sockets), so the level's first wave took 3.5 s to start, and a
    thousand finished streams waited at once, holding their requests' objects (one young
    collection of 28,000 of them stopped the loop for 35 ms, and the next tokens of every
    stream were read together). Where that many streams are held at all, each stream's
    events are far apart (one loop reads only so many events a second in all), so a few
    steps between two reads gather none.
    """
    loop = asyncio.get_running_loop()
    turns = _TURNS.get(loop)
    if turns is None:
        turns = _TURNS[loop] = _Turns(loop)
    await turns.take()


async def take_start_turn() -> None:
    """A request's start (its request built and sent) is a heavy step too: a level's first
    wave of a thousand streams, all sent in one iteration, held every socket unread for
    ~0.1 s while the first events arrived, and they came out gathered (late by the gap)."""
    await take_turn()
