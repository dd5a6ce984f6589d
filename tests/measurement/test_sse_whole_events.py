"""The SSE parser's fast path for reads of whole one-line `data:` events (one, or several a
late read gathered): the events, stamps and refusals of the line-by-line path."""

from __future__ import annotations

import pytest

from labkit.errors import MalformedStream
from labkit.measurement.sse import SSEEvent, SSEParser

pytestmark = pytest.mark.unit


def _line_by_line(data: bytes, t_ns: int) -> list[SSEEvent]:
    parser = SSEParser()
    out: list[SSEEvent] = []
    for i in range(len(data)):  # one byte a read: never a read of whole events
        out += parser.feed(data[i : i + 1], t_ns)
    return out


@pytest.mark.parametrize(
    "read",
    [
        b'data: {"a": 1}\n\n',
        b'data: {"a": 1}\n\ndata: {"b": 2}\n\ndata: [DONE]\n\n',
        b"data:  two spaces\n\ndata:\n\n",
        b": keep-alive\n\ndata: x\n\n",
        b"event: ping\ndata: x\n\n",
        b"data: x\n\n\ndata: y\n\n",
        b"data: a\ndata: b\n\n",
        "data: é\n\n".encode(),
    ],
)
def test_a_read_of_whole_events_parses_as_line_by_line(read: bytes) -> None:
    assert SSEParser().feed(read, 7) == _line_by_line(read, 7)


def test_events_after_a_whole_read_keep_their_own_stamps() -> None:
    parser = SSEParser()
    assert [e.t_ns for e in parser.feed(b"data: a\n\ndata: b\n\n", 1)] == [1, 1]
    assert [e.t_ns for e in parser.feed(b"data: c\n\n", 2)] == [2]
    assert not parser.has_pending


def test_an_event_over_the_limit_is_refused_after_the_ones_before_it() -> None:
    parser = SSEParser(max_event_bytes=4)
    assert [e.data for e in parser.feed(b"data: ok\n\ndata: too long\n\n", 1)] == ["ok"]
    with pytest.raises(MalformedStream, match="over the limit"):
        parser.feed(b"data: x\n\n", 2)


def test_an_event_that_is_not_utf8_is_refused() -> None:
    with pytest.raises(UnicodeDecodeError):
        SSEParser().feed(b"data: \xff\n\n", 1)
