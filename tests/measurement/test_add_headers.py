"""`add_headers` adds a request's own headers (its trace context) as `httpx.Headers.update`
does: the same fields, in the same order, the same bytes, the same error."""

from __future__ import annotations

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from labkit.measurement.recorder import add_headers

pytestmark = pytest.mark.unit

_NAMES = st.sampled_from(
    [
        "traceparent",
        "TraceParent",
        "x-request-id",
        "X-Request-Id",
        "authorization",
        "accept",
        "content-length",
        "x-é",
        "x-a",
        "X-A",
    ]
)
_VALUES = st.sampled_from(["00-abc-def-01", "v", "", "caf\xe9", "a b", "x" * 40])


def _outcome(base: list[tuple[str, str]], new: dict[str, str], fast: bool) -> object:
    headers = httpx.Headers([(k.encode("utf-8"), v.encode("utf-8")) for k, v in base])
    try:
        if fast:
            add_headers(headers, new)
        else:
            headers.update(new)
    except Exception as exc:  # the same class of error either way
        return type(exc)
    return headers.raw


@given(
    base=st.lists(st.tuples(_NAMES, _VALUES), max_size=6),
    new=st.dictionaries(_NAMES, _VALUES, max_size=4),
)
def test_headers_are_added_as_update_adds_them(
    base: list[tuple[str, str]], new: dict[str, str]
) -> None:
    assert _outcome(base, new, fast=True) == _outcome(base, new, fast=False)


def test_trace_headers_go_after_the_requests_own() -> None:
    headers = httpx.Headers({"host": "h", "content-length": "2"})
    add_headers(headers, {"traceparent": "00-a-b-01", "x-request-id": "r1"})
    assert headers.raw == [
        (b"host", b"h"),
        (b"content-length", b"2"),
        (b"traceparent", b"00-a-b-01"),
        (b"x-request-id", b"r1"),
    ]
