"""On labkit's loop an async generator dropped unfinished is still closed (its ``finally``
runs, in the loop's next iteration), without a write to the loop's self-pipe when it was
dropped in the loop's own thread; dropped in another thread, the loop is woken as asyncio
wakes it."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator

import pytest

from labkit.wire import loopclock

pytestmark = [pytest.mark.unit, pytest.mark.usefixtures("timed_selector")]


def _counting_wakes(loop: asyncio.AbstractEventLoop) -> list[int]:
    wakes = [0]
    write = loop._write_to_self  # type: ignore[attr-defined]

    def counted() -> None:
        wakes[0] += 1
        write()

    loop._write_to_self = counted  # type: ignore[attr-defined]
    return wakes


async def _reads(closed: list[str], name: str) -> AsyncIterator[int]:
    try:
        for i in range(10):
            yield i
    finally:
        closed.append(name)


@pytest.mark.parametrize("kind", ["labkit", "asyncio"])
def test_a_generator_dropped_in_the_loop_thread_is_closed_in_the_next_iteration(
    kind: str,
) -> None:
    loop = loopclock.new_event_loop() if kind == "labkit" else asyncio.new_event_loop()
    wakes = _counting_wakes(loop)
    closed: list[str] = []

    async def main() -> tuple[list[str], list[str], int]:
        gen = _reads(closed, "a")
        async for _ in gen:
            break  # left at its first item, as a body's iterator is after a push
        woken_before = wakes[0]
        del gen  # the last reference: finalized here, in the loop's thread
        right_after = list(closed)
        await asyncio.sleep(0)  # the next iteration
        await asyncio.sleep(0)  # and the close task's own step
        return right_after, list(closed), wakes[0] - woken_before

    try:
        right_after, later, woke = loop.run_until_complete(main())
    finally:
        loop.close()
    assert right_after == [] and later == ["a"]
    assert woke == (0 if kind == "labkit" else 1)  # asyncio writes to its self-pipe


def test_a_generator_dropped_in_another_thread_wakes_the_loop_and_is_closed() -> None:
    loop = loopclock.new_event_loop()
    wakes = _counting_wakes(loop)
    closed: list[str] = []

    async def main() -> list[str]:
        gen = _reads(closed, "b")
        async for _ in gen:
            break
        holder = [gen]
        del gen
        dropped = threading.Event()

        def drop() -> None:
            holder.clear()  # the last reference, dropped in this thread
            dropped.set()

        threading.Thread(target=drop).start()
        async with asyncio.timeout(60):  # a bound on a hang, not on speed
            while not closed:  # the close was scheduled thread-safely: the loop woke for it
                await asyncio.sleep(0.01)
        assert dropped.is_set()
        return list(closed)

    try:
        assert loop.run_until_complete(main()) == ["b"]
    finally:
        loop.close()
    assert wakes[0] >= 1
