"""The private CPython attributes the C read path reads, as it relies on them, and the
fallback where they are gone.

The C timed ``select()`` (`readpath.TIMED_SELECT`, `loopclock.TimedSelector`) polls the
epoll selector's own ``_selector`` (a ``select.epoll``) with ``poll(timeout, maxevents)``,
looks each ready descriptor up in ``_fd_to_key`` (a dict, read with ``PyDict_GetItem``) and
reads a `selectors.SelectorKey` as a tuple (``key[1]`` its fd, ``key[2]`` its events). A
CPython that changes any of these fails a test here first; at run time labkit then runs the
Python ``select()`` instead (`readpath.selector_problem`) and the manifest says why
(`READ_PATH.python_steps`).
"""

from __future__ import annotations

import json
import os
import select
import selectors
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from labkit.wire import loopclock, readpath

pytestmark = [
    pytest.mark.unit,
    pytest.mark.skipif(not hasattr(select, "epoll"), reason="epoll: Linux only"),
]


@pytest.fixture
def pipe() -> Iterator[tuple[int, int]]:
    r, w = os.pipe()
    yield r, w
    os.close(r)
    os.close(w)


def test_selector_key_is_the_tuple_the_c_select_indexes() -> None:
    assert issubclass(selectors.SelectorKey, tuple)
    assert selectors.SelectorKey._fields == ("fileobj", "fd", "events", "data")


def test_the_epoll_selector_polls_a_select_epoll_in__selector() -> None:
    with selectors.EpollSelector() as selector:
        assert type(selector._selector) is select.epoll  # type: ignore[attr-defined]
    assert selectors.DefaultSelector is selectors.EpollSelector


def test__fd_to_key_is_a_dict_of_each_registered_key_by_fd(pipe: tuple[int, int]) -> None:
    r, _ = pipe
    with selectors.EpollSelector() as selector:
        table = selector._fd_to_key  # type: ignore[attr-defined]
        assert type(table) is dict and table == {}
        key = selector.register(r, selectors.EVENT_READ, "data")
        assert table == {r: key}
        assert type(next(iter(table))) is int
        assert (key[1], key[2]) == (r, selectors.EVENT_READ)
        selector.unregister(r)
        assert table == {}


def test_epoll_poll_takes_timeout_and_maxevents_and_gives_a_list_of_pairs(
    pipe: tuple[int, int],
) -> None:
    r, w = pipe
    with selectors.EpollSelector() as selector:
        selector.register(r, selectors.EVENT_READ)
        epoll = selector._selector  # type: ignore[attr-defined]
        assert epoll.poll(0.0, 1) == []
        os.write(w, b"x")
        got = epoll.poll(0.0, 1)
        assert type(got) is list and got == [(r, select.EPOLLIN)]
        assert type(got[0]) is tuple


def test_this_python_runs_the_c_select_where_built() -> None:
    assert readpath.selector_problem() is None
    assert "timed_select" not in readpath.READ_PATH.python_steps
    selector = loopclock.TimedSelector()
    try:
        assert selector._select_c is loopclock._SELECT_C
    finally:
        selector.close()


class _OtherEpoll:
    """An epoll behind another type than the C select checks for (a CPython that wraps
    it); the Python select() reads it as before."""

    def __init__(self) -> None:
        self._epoll = select.epoll()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._epoll, name)


class _OtherKeys(dict[int, Any]):
    """A fd-to-key table of another type than the C select reads with PyDict calls."""


def _reports_a_readable_pipe(selector: loopclock.TimedSelector, pipe: tuple[int, int]) -> None:
    r, w = pipe
    selector.register(r, selectors.EVENT_READ)
    os.write(w, b"x")
    ((key, mask),) = selector.select(0)
    assert (key.fd, mask) == (r, selectors.EVENT_READ)
    assert len(selector.reports[r]) == 1


def test_without_an_epoll__selector_the_python_select_runs(
    monkeypatch: pytest.MonkeyPatch, pipe: tuple[int, int]
) -> None:
    monkeypatch.setattr(selectors.EpollSelector, "_selector_cls", _OtherEpoll)
    assert readpath.selector_problem() == "EpollSelector has no _selector of type select.epoll"
    selector = loopclock.TimedSelector()
    try:
        assert selector._select_c is None
        _reports_a_readable_pipe(selector, pipe)
    finally:
        selector.close()


def test_without_a_dict__fd_to_key_the_python_select_runs(
    monkeypatch: pytest.MonkeyPatch, pipe: tuple[int, int]
) -> None:
    init = selectors._BaseSelectorImpl.__init__  # type: ignore[attr-defined]

    def other_keys(self: Any) -> None:
        init(self)
        self._fd_to_key = _OtherKeys()

    monkeypatch.setattr(selectors._BaseSelectorImpl, "__init__", other_keys)  # type: ignore[attr-defined]
    selector = loopclock.TimedSelector()
    try:
        assert readpath.selector_problem(selector) == "TimedSelector has no _fd_to_key dict"
        assert selector._select_c is None
        _reports_a_readable_pipe(selector, pipe)
    finally:
        selector.close()


def test_a_selector_without_the_attributes_at_all_is_named() -> None:
    assert readpath.selector_problem(object()) == "object has no _selector of type select.epoll"


#: A Python whose epoll selector the C select cannot read, from the start: what labkit then
#: chooses at import.
_CHANGED_PYTHON = """
import json, os, select, selectors
class OtherEpoll:
    def __init__(self):
        self._epoll = select.epoll()
    def __getattr__(self, name):
        return getattr(self._epoll, name)
selectors.EpollSelector._selector_cls = OtherEpoll
from labkit.wire import loopclock, readpath
selector = loopclock.TimedSelector()
r, w = os.pipe()
selector.register(r, selectors.EVENT_READ)
os.write(w, b"x")
ready = selector.select(0)
print(json.dumps({
    "read_path": readpath.READ_PATH.model_dump(mode="json"),
    "timed_select": readpath.TIMED_SELECT is not None or loopclock._SELECT_C is not None,
    "reported": [key.fd == r for key, _ in ready],
}))
"""


@pytest.mark.skipif(readpath.IMPLEMENTATION != "c", reason="the C path is not in use here")
def test_a_python_without_the_attributes_runs_and_records_the_python_select() -> None:
    env = {k: v for k, v in os.environ.items() if k != readpath.ENV_VAR}
    done = subprocess.run(
        [sys.executable, "-c", _CHANGED_PYTHON],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "read_path": {
            "implementation": "c",
            "reason": None,
            "detail": None,
            "python_steps": {"timed_select": "EpollSelector has no _selector of type select.epoll"},
        },
        "timed_select": False,
        "reported": [True],
    }
