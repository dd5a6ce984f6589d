"""When each round of a watch is due, and the clocks it is read on.

Round ``i`` is due at ``anchor + i × every + jitter(i)``: the jitter is drawn once per
round from a generator seeded by the watch id and the index, so a restarted watch keeps
the same schedule. A round may start up to `Schedule.tolerance_s` after it was due (a slow
start, a round that just overran); later than that it is *missed*, recorded and never run
late in a burst. Clocks: `WallClock` (real time, real sleeps), `SimulatedClock` (compressed:
sleeping moves it at once, so rounds run back to back, each standing for its scheduled
time) and `ManualClock` (one a test or an embedding moves itself).
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Protocol

__all__ = ["Clock", "ManualClock", "Schedule", "SimulatedClock", "WallClock"]

#: The longest single sleep of the wall clock: a host suspended meanwhile wakes on time.
_SLEEP_SLICE_S = 30.0


@dataclass(frozen=True)
class Schedule:
    """A watch's schedule: round 0 at `anchor`, one every `every_s`, each up to
    `jitter_s` after its slot."""

    watch_id: str
    anchor: datetime
    every_s: float
    jitter_s: float = 0.0

    def jitter(self, index: int) -> float:
        """Round `index`'s jitter in seconds, in [0, jitter_s): the same on every restart."""
        if self.jitter_s <= 0:
            return 0.0
        return random.Random(f"{self.watch_id}/{index}").random() * self.jitter_s

    def due(self, index: int) -> datetime:
        """When round `index` is due."""
        return self.anchor + timedelta(seconds=index * self.every_s + self.jitter(index))

    @property
    def tolerance_s(self) -> float:
        """How late a round may still start: a quarter of the period."""
        return self.every_s / 4

    def missed(self, index: int, now: datetime) -> bool:
        """Whether round `index` is too late to start at `now`."""
        return (now - self.due(index)).total_seconds() > self.tolerance_s

    def first_not_missed(self, index: int, now: datetime) -> int:
        """The first round from `index` on that can still start at `now` (or later)."""
        late = (now - self.anchor).total_seconds() - self.tolerance_s - self.jitter_s
        i = max(index, int(late // self.every_s))  # a jump past a long downtime, then steps
        while i > index and not self.missed(i - 1, now):
            i -= 1
        while self.missed(i, now):
            i += 1
        return i


class Clock(Protocol):
    """What a watch reads the time on."""

    #: True for a compressed clock: requests carry the simulated time (X-Labkit-Sim-Time).
    simulated: bool

    def now(self) -> datetime:
        """The current time (UTC)."""
        ...

    async def sleep_until(self, when: datetime) -> None:
        """Return at `when` (at once if it is past)."""
        ...


class WallClock:
    """Real time."""

    simulated = False

    def now(self) -> datetime:
        """The wall clock, UTC."""
        return datetime.now(UTC)

    async def sleep_until(self, when: datetime) -> None:
        """Sleep in slices, so a suspended host or a clock step wakes on time."""
        while (left := (when - self.now()).total_seconds()) > 0:
            await asyncio.sleep(min(left, _SLEEP_SLICE_S))


class ManualClock:
    """A clock that moves only when told (`advance`) or slept on: a test's scripted time."""

    simulated = False

    def __init__(self, start: datetime) -> None:
        self.t = start

    def now(self) -> datetime:
        """The clock's time."""
        return self.t

    def advance(self, seconds: float) -> None:
        """Move the clock on by `seconds`."""
        self.t += timedelta(seconds=seconds)

    async def sleep_until(self, when: datetime) -> None:
        """Jump to `when` (never back)."""
        self.t = max(self.t, when)
        await asyncio.sleep(0)


class SimulatedClock(ManualClock):
    """A compressed clock: sleeping jumps, so rounds run back to back, and each request
    carries the simulated time it stands for."""

    simulated = True
