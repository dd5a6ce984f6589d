"""Requests that start together start one per loop iteration (`take_start_turn`), sharing
the turns of record assembly: a select() reads every socket between two starts."""

from __future__ import annotations

import asyncio

import pytest

from labkit.wire.turns import take_start_turn, take_turn
from tests.wire.test_turns import _CountingSelectorLoop

pytestmark = pytest.mark.unit


def test_starts_and_records_that_come_together_take_one_iteration_each() -> None:
    loop = _CountingSelectorLoop()
    ran: list[tuple[str, int]] = []

    async def start(i: int) -> None:
        await take_start_turn()
        ran.append((f"start {i}", loop.selects))

    async def record(i: int) -> None:
        await take_turn()
        ran.append((f"record {i}", loop.selects))

    async def main() -> None:
        await asyncio.gather(*(start(i) for i in range(4)), *(record(i) for i in range(2)))

    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
    assert [name for name, _ in ran] == [f"start {i}" for i in range(4)] + ["record 0", "record 1"]
    assert len({n for _, n in ran}) == 6  # a select() between any two


def test_a_start_alone_does_not_wait() -> None:
    loop = _CountingSelectorLoop()

    async def main() -> int:
        before = loop.selects
        await take_start_turn()
        return loop.selects - before

    try:
        assert loop.run_until_complete(main()) == 0
    finally:
        loop.close()
