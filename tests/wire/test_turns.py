"""`labkit.turns`: heavy steps (a record's assembly) one per loop iteration, in order, with
the loop's select() — where sockets are read — between each two; and the recorder's use."""

from __future__ import annotations

import asyncio
from collections import Counter

import httpx
import pytest
import respx

from labkit.measurement.recorder import RecordContext, StreamRecorder
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


def test_steps_that_come_together_take_one_iteration_each_in_order() -> None:
    loop = _CountingSelectorLoop()
    ran: list[tuple[int, int]] = []

    async def step(i: int) -> None:
        await take_turn()
        ran.append((i, loop.selects))

    async def main() -> None:
        await asyncio.gather(*(step(i) for i in range(6)))

    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
    assert [i for i, _ in ran] == list(range(6))  # first come, first served
    iterations = [n for _, n in ran]
    assert len(set(iterations)) == 6  # never two in one iteration: a select() between each


def test_a_long_queue_shares_iterations_in_order() -> None:
    """Under `STEPS_PER_EXTRA_TURN` queued, one step an iteration; a longer queue runs one
    more per that many queued, first come first served, a select() between batches."""
    loop = _CountingSelectorLoop()
    ran: list[tuple[int, int]] = []
    n = 5 * STEPS_PER_EXTRA_TURN

    async def step(i: int) -> None:
        await take_turn()
        ran.append((i, loop.selects))

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
