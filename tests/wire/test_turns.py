"""`labkit.turns`: heavy steps (a record's assembly) one per loop iteration, in order, with
the loop's select() — where sockets are read — between each two; and the recorder's use."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from collections.abc import Callable

import httpx
import pytest
import respx

from labkit.measurement.recorder import RecordContext, StreamRecorder
from labkit.wire.loopclock import loop_clock, new_event_loop
from labkit.wire.turns import STEPS_PER_EXTRA_TURN, take_turn
from tests.measurement.test_recorder import ADAPTERS
from tests.providers.streams import chat

pytestmark = pytest.mark.unit


class _CountingSelectorLoop(asyncio.SelectorEventLoop):
    """Counts its select() calls: one per loop iteration."""

    def __init__(self) -> None:
        super().__init__()
        self.selects = 0
        inner = self._selector.select

        def select(timeout: float | None = None) -> list:  # type: ignore[type-arg]
            self.selects += 1
            return inner(timeout)

        self._selector.select = select  # type: ignore[method-assign]


#: The loops turns are taken on: asyncio's own (each taken turn frees itself by a callback
#: in the next iteration) and labkit's timed loop (by its count of select() calls).
LOOP_KINDS = ["asyncio", "timed"]


def counting_loop(kind: str) -> tuple[asyncio.AbstractEventLoop, Callable[[], int]]:
    """A loop of `kind` and a function giving its select() calls so far."""
    if kind == "asyncio":
        loop = _CountingSelectorLoop()
        return loop, lambda: loop.selects
    timed = new_event_loop()
    selector = loop_clock(timed)
    assert selector is not None
    return timed, lambda: selector.selects


@pytest.mark.parametrize("kind", LOOP_KINDS)
def test_steps_that_come_together_take_one_iteration_each_in_order(kind: str) -> None:
    loop, selects = counting_loop(kind)
    ran: list[tuple[int, int]] = []

    async def step(i: int) -> None:
        await take_turn()
        ran.append((i, selects()))

    async def main() -> None:
        await asyncio.gather(*(step(i) for i in range(6)))

    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
    assert [i for i, _ in ran] == list(range(6))  # first come, first served
    iterations = [n for _, n in ran]
    assert len(set(iterations)) == 6  # never two in one iteration: a select() between each


@pytest.mark.parametrize("kind", LOOP_KINDS)
def test_a_long_queue_shares_iterations_in_order(kind: str) -> None:
    """Under `STEPS_PER_EXTRA_TURN` queued, one step an iteration; a longer queue runs one
    more per that many queued, first come first served, a select() between batches."""
    loop, selects = counting_loop(kind)
    ran: list[tuple[int, int]] = []
    n = 5 * STEPS_PER_EXTRA_TURN

    async def step(i: int) -> None:
        await take_turn()
        ran.append((i, selects()))

    async def main() -> None:
        await asyncio.gather(*(step(i) for i in range(n)))

    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
    assert [i for i, _ in ran] == list(range(n))
    per_iteration = Counter(selects for _, selects in ran)
    assert max(per_iteration.values()) == 1 + (n - 1) // STEPS_PER_EXTRA_TURN  # the first: alone
    assert len(per_iteration) < n  # fewer iterations than steps
    assert list(per_iteration.values())[-3:] == [1, 1, 1]  # the queue's tail: one each


@pytest.mark.parametrize("kind", LOOP_KINDS)
def test_steps_one_iteration_apart_each_take_their_own_turn_at_once(kind: str) -> None:
    """A step alone never waits, however the turns before it were taken: each of these
    steps comes an iteration after the one before and runs in the iteration it came in."""
    loop, selects = counting_loop(kind)
    ran: list[tuple[int, int, int]] = []

    async def main() -> None:
        for i in range(5):
            came = selects()
            await take_turn()
            ran.append((i, came, selects()))
            await asyncio.sleep(0)  # the next step comes in the next iteration

    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
    assert [(came, now) for _, came, now in ran] == [(now, now) for _, _, now in ran]
    assert len({now for _, _, now in ran}) == 5


def test_on_the_timed_loop_a_step_alone_leaves_the_next_select_free_to_wait() -> None:
    """On labkit's timed loop a turn taken alone schedules nothing: the loop's next select()
    waits for I/O (no timeout: no timer either) instead of returning at once to pass the
    turn on. On asyncio's loop that callback is still there (a timeout of 0)."""
    timeouts: dict[str, list[float | None]] = {}
    for kind in LOOP_KINDS:
        loop, _ = counting_loop(kind)
        selector = loop._selector  # type: ignore[attr-defined]
        inner = selector.select
        seen: list[float | None] = []
        timeouts[kind] = seen

        def select(timeout: float | None = None, inner=inner, seen=seen) -> list:  # type: ignore[no-untyped-def, type-arg]
            seen.append(timeout)
            return inner(timeout)

        selector.select = select

        async def main(loop: asyncio.AbstractEventLoop = loop, seen: list = seen) -> None:  # type: ignore[type-arg]
            woken: asyncio.Future[None] = loop.create_future()
            await take_turn()
            seen.clear()
            # Woken from another thread once the loop sleeps: no timer in the loop.
            threading.Timer(0.05, loop.call_soon_threadsafe, (woken.set_result, None)).start()
            await woken

        try:
            loop.run_until_complete(main())
        finally:
            loop.close()
    assert timeouts["timed"][0] is None
    assert timeouts["asyncio"][0] == 0


def test_a_step_alone_does_not_wait_and_a_cancelled_waiter_does_not_block_the_next() -> None:
    async def main() -> list[str]:
        done: list[str] = []
        await take_turn()  # alone: no wait (the turn passes on in the next iteration)

        async def step(name: str) -> None:
            await take_turn()
            done.append(name)

        first = asyncio.create_task(step("first"))
        cancelled = asyncio.create_task(step("cancelled"))
        last = asyncio.create_task(step("last"))
        await asyncio.sleep(0)
        cancelled.cancel()
        await asyncio.gather(first, last)
        with pytest.raises(asyncio.CancelledError):
            await cancelled
        return done

    assert asyncio.run(main()) == ["first", "last"]


def test_a_request_cancelled_while_its_record_waits_for_a_turn_is_kept_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The stream was read to its end; the cancellation came while the record waited for its
    # turn: the whole record (no error) goes to on_cancelled, then CancelledError.
    adapter = ADAPTERS["openai_compatible"]
    kept = []
    waiting = asyncio.Event()

    async def a_turn_that_never_comes() -> None:
        waiting.set()
        await asyncio.Event().wait()

    monkeypatch.setattr("labkit.measurement.recorder.take_turn", a_turn_that_never_comes)

    async def go() -> None:
        provider = adapter.provider()
        recorder = StreamRecorder(on_cancelled=kept.append)
        try:
            task = asyncio.create_task(
                recorder.record(provider, chat(), RecordContext(run_id="r", experiment="t"))
            )
            await waiting.wait()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        finally:
            await provider.aclose()

    with respx.mock() as router:
        router.post(adapter.url).mock(
            return_value=httpx.Response(
                200,
                headers={"content-type": "text/event-stream"},
                content=b"".join(adapter.stream(["a", "b"])),
            )
        )
        asyncio.run(go())
    assert len(kept) == 1
    rec = kept[0]
    assert rec.error is None, rec.error
    assert rec.output_text == "ab" and rec.client.ttft_ms is not None
