"""Pacing a load level: when each request is due, and how requests are offered.

Closed loop (`closed_loop`): each stream sends its next request the moment its last one
ends, so the offered rate follows the server's speed. Open loop (`open_loop`): requests go
at due times fixed before the first is sent (`arrival_offsets_ns`: constant spacing, or
Poisson from a seeded generator, so a level is reproducible) whatever the server does, so a
slow server builds up requests in flight. Both loops stop starting requests at `deadline_ns`
(in-flight ones finish) and take `make(i)` to build request `i`, so every process of a
multi-process level builds the same requests.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from labkit.experiments.base import PlannedRequest
    from labkit.experiments.paced import SendFn

__all__ = ["Arrival", "arrival_offsets_ns", "closed_loop", "open_loop", "sleep_until"]

Arrival = Literal["constant", "poisson"]
Clock = Callable[[], int]

_NS = 1_000_000_000


def arrival_offsets_ns(
    rate: float,
    arrival: Arrival,
    *,
    seed: int | str,
    max_requests: int | None = None,
    duration_s: float | None = None,
) -> list[int]:
    """Due times (ns from the level's start) for `rate` requests per second.

    The first request is due at 0. The schedule ends after `max_requests` arrivals or at
    `duration_s`, whichever comes first (at least one of them must be given).

    Poisson arrivals are drawn conditioned on their count — `max_requests`, or
    ``rate × duration_s`` — : the exponential gaps are rescaled to span exactly
    ``(n - 1) / rate`` seconds (the gaps of a Poisson process given its number of
    arrivals), so a level offers the rate asked for with Poisson burstiness, rather than a
    rate off by ±1/√n by chance.
    """
    if rate <= 0:
        raise ValueError("rate must be positive")
    if max_requests is None and duration_s is None:
        raise ValueError("a schedule needs max_requests or duration_s")
    rng = random.Random(seed)
    gaps_s: list[float] | None = None
    if arrival == "poisson":
        n = max_requests
        if n is None and duration_s is not None:
            n = max(1, round(rate * duration_s))
        assert n is not None
        draws = [rng.expovariate(1.0) for _ in range(n - 1)]
        scale = (n - 1) / rate / sum(draws) if draws else 0.0
        gaps_s = [d * scale for d in draws]
    horizon = None if duration_s is None else duration_s * _NS
    out: list[int] = []
    t = 0.0
    while max_requests is None or len(out) < max_requests:
        if horizon is not None and t >= horizon:
            break
        out.append(round(t))
        if gaps_s is None:
            gap = 1.0 / rate
        elif len(out) <= len(gaps_s):
            gap = gaps_s[len(out) - 1]
        else:
            break
        t += gap * _NS
    return out


async def sleep_until(
    due_ns: int,
    *,
    clock: Callable[[], int] = time.perf_counter_ns,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> None:
    """Wait until `clock()` reaches `due_ns` (an absolute time on that clock)."""
    delay = due_ns - clock()
    if delay > 0:
        await sleep(delay / _NS)


async def closed_loop(
    streams: Iterable[Iterable[int]],
    make: Callable[[int], PlannedRequest],
    send: SendFn,
    *,
    deadline_ns: int | None = None,
    clock: Clock = time.perf_counter_ns,
) -> None:
    """Run each stream's requests back to back, all streams at once, until they run out or
    the deadline passes. Each stream has its own indices, so a level builds the same
    requests however its streams are spread over processes."""

    async def stream(indices: Iterable[int]) -> None:
        for i in indices:
            if deadline_ns is not None and clock() >= deadline_ns:
                return
            await send(make(i), 0.0)

    await asyncio.gather(*(stream(s) for s in streams))


async def open_loop(
    arrivals: Iterable[tuple[int, int]],
    t0_ns: int,
    make: Callable[[int], PlannedRequest],
    send: SendFn,
    *,
    max_in_flight: int | None = None,
    deadline_ns: int | None = None,
    clock: Clock = time.perf_counter_ns,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> None:
    """Send request `i` at `t0_ns + offset` for each `(i, offset)` of `arrivals`.

    Each due time is waited for on the absolute clock (`sleep_until`), so a late wake-up
    delays one request and never the ones after it: the achieved rate does not drift below
    the target. The wait between a request's due time and its send (a late wake-up, or the
    `max_in_flight` cap) is its ``client.queue_ms``; it is never part of TTFT.
    """
    cap = asyncio.Semaphore(max_in_flight) if max_in_flight else None
    tasks: set[asyncio.Task[None]] = set()

    async def one(i: int, due_ns: int) -> None:
        planned = make(i)
        if cap is None:
            await send(planned, max(0.0, (clock() - due_ns) / 1e6))
            return
        async with cap:
            await send(planned, max(0.0, (clock() - due_ns) / 1e6))

    try:
        for i, offset in arrivals:
            due = t0_ns + offset
            if deadline_ns is not None and due >= deadline_ns:
                break
            await sleep_until(due, clock=clock, sleep=sleep)
            task = asyncio.create_task(one(i, due))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        if tasks:
            await asyncio.gather(*tasks)
    finally:
        # Cancelled while waiting for the next arrival: the requests in flight go too, and
        # their partial records reach the run through the recorder's cancellation hook.
        for task in tasks:
            task.cancel()
        if tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.gather(*tasks, return_exceptions=True)
