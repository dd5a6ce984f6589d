"""The timed selector's two implementations, for the loop clock's tests to run against both."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from labkit.wire import loopclock


@pytest.fixture(params=["python", "c"])
def timed_selector(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[type[loopclock.PyTimedSelector]]:
    """`loopclock.TimedSelector` (and the test module's own name for it, and so
    `new_event_loop`'s) set to the Python reference or the C selector; the C one skips
    only where labkit was built without it (`make test` builds it)."""
    if request.param == "python":
        chosen: type[loopclock.PyTimedSelector] | None = loopclock.PyTimedSelector
    else:
        chosen = loopclock.c_timed_selector()
        if chosen is None:
            pytest.skip("labkit was built without labkit.wire._loopclock")
    monkeypatch.setattr(loopclock, "TimedSelector", chosen)
    if hasattr(request.module, "TimedSelector"):
        monkeypatch.setattr(request.module, "TimedSelector", chosen)
    yield chosen
