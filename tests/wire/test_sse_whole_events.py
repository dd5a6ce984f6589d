"""The SSE parser's fast path for reads of whole one-line `data:` events (one, or several a
late read gathered): the events, stamps and refusals of the line-by-line path."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from labkit.errors import MalformedStream
from labkit.wire.sse import SSEEvent, SSEParser

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


#: Lines as servers write them, and odd ones (no space, a bare field, CR, bytes not UTF-8).
_SSE_LINES = st.one_of(
    st.sampled_from(
        [b"data: {}", b"data: x", b"data:x", b"data:", b"event: e", b": c", b"", b"x", b"\r"]
    ),
    st.binary(max_size=6),
)


@settings(max_examples=400, deadline=None)
@given(
    lines=st.lists(_SSE_LINES, max_size=24),
    cuts=st.lists(st.integers(min_value=0, max_value=200), max_size=6),
)
def test_any_stream_cut_into_any_reads_parses_as_one_byte_reads(
    lines: list[bytes], cuts: list[int]
) -> None:
    """Fuzzed: whatever the bytes and however the reads cut them, the fast path gives the
    events (data, stamps) of one-byte reads, and the same refusal after them (a refusal
    comes with the next read after the events before it: `SSEParser.feed`)."""
    data = b"\n".join(lines) + b"\n\n"
    bounds = sorted({0, len(data), *(c for c in cuts if c < len(data))})
    reads = [(data[a:b], a) for a, b in itertools.pairwise(bounds)]
    one_byte_reads = [(r[i : i + 1], t) for r, t in reads for i in range(len(r))]
    assert _parsed(reads) == _parsed(one_byte_reads)


def _parsed(reads: list[tuple[bytes, int]]) -> tuple[list[SSEEvent], str | None]:
    """The events of `reads` in order, then the refusal that stopped them (None: none)."""
    parser, out = SSEParser(), []
    try:
        for read, t_ns in [*reads, (b"", 0)]:  # the empty read meets a refusal held back
            out += parser.feed(read, t_ns)
    except (MalformedStream, UnicodeDecodeError) as exc:
        return out, type(exc).__name__
    return out, None
