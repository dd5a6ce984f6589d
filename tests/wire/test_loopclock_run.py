"""`loopclock.run` hands back what its coroutine returned, its exception as raised, and never
formats the returned value (Python 3.11's Runner did, once per run, on restoring SIGINT: the
repr of a run's every record)."""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest

from labkit.wire import loopclock

pytestmark = [pytest.mark.unit, pytest.mark.usefixtures("timed_selector")]


class _CountsRepr:
    def __init__(self) -> None:
        self.formatted = 0

    def __repr__(self) -> str:
        self.formatted += 1
        return "a result"


@pytest.fixture
def default_sigint() -> Iterator[None]:
    """SIGINT as a plain `python` process has it (the Runner takes it over only then)."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)


@pytest.mark.usefixtures("default_sigint")
def test_the_result_comes_back_unformatted() -> None:
    value = _CountsRepr()

    async def main() -> _CountsRepr:
        assert loopclock.loop_clock() is not None  # on the timed loop
        return value

    assert loopclock.run(main()) is value
    assert value.formatted == 0


def test_an_exception_comes_back_as_raised() -> None:
    async def main() -> None:
        raise KeyError("why")

    with pytest.raises(KeyError, match="why"):
        loopclock.run(main())
