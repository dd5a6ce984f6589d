"""Fixtures shared by the wire tests."""

from __future__ import annotations

import pytest

from labkit.wire import loopclock


@pytest.fixture(params=["c", "python"])
def select_implementation(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Runs a test on both `TimedSelector.select`s: the C one (where labkit was built with
    it) and `_select_py` (`pytest.mark.usefixtures("select_implementation")`)."""
    if request.param == "python":
        monkeypatch.setattr(loopclock, "_SELECT_C", None)
    elif loopclock._SELECT_C is None:
        pytest.skip("labkit was built without readpath.TIMED_SELECT")
    return str(request.param)
