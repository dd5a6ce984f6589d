"""`SSEParser.feed_whole_chunks`: a chunked body's read as it came, taken in one call when it
is whole chunks of whole one-line `data:` events and nothing is pending: the same events and
stamps as de-chunking the read and feeding it; anything else is left (None), untouched."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from labkit.wire.lean.http11 import _Chunked
from labkit.wire.sse import NDJSONParser, SSEEvent, SSEParser

pytestmark = pytest.mark.unit


def chunk(payload: bytes) -> bytes:
    return b"%x\r\n" % len(payload) + payload + b"\r\n"


def _fed_after_dechunking(reads: list[tuple[bytes, int]]) -> list[SSEEvent]:
    """The reference: every read de-chunked by the body's decoder, then fed."""
    parser, decoder = SSEParser(), _Chunked()
    out: list[SSEEvent] = []
    for data, t in reads:
        payload, _, _ = decoder.feed(data)
        out += parser.feed(payload, t)
    return out


def _offered_first(reads: list[tuple[bytes, int]]) -> tuple[list[SSEEvent], int]:
    """As `Body.deliver` offers them: whole while the decoder is between chunks, else
    de-chunked; and how many reads were taken whole."""
    parser, decoder = SSEParser(), _Chunked()
    out: list[SSEEvent] = []
    taken = 0
    for data, t in reads:
        if not decoder.buf and decoder.state == "size":
            events = parser.feed_whole_chunks(data, t)
            if events is not None:
                out += events
                taken += 1
                continue
        payload, _, _ = decoder.feed(data)
        out += parser.feed(payload, t)
    return out, taken


@pytest.mark.parametrize(
    "read",
    [
        chunk(b'data: {"a": 1}\n\n'),
        chunk(b"data: a\n\n") + chunk(b"data: b\n\ndata: [DONE]\n\n"),
        chunk(b"data: a\n") + chunk(b"\ndata: b\n\n"),  # an event across two chunks
        chunk("data: é\n\n".encode()),
    ],
)
def test_a_read_of_whole_chunks_of_whole_events_is_taken_as_fed(read: bytes) -> None:
    parser = SSEParser()
    events = parser.feed_whole_chunks(read, 7)
    assert events is not None and events == _fed_after_dechunking([(read, 7)])
    assert not parser.has_pending


@pytest.mark.parametrize(
    "read",
    [
        chunk(b"data: a\n\n")[:-1],  # the chunk cut by the read's end
        chunk(b"data: a\n\n") + b"0\r\n\r\n",  # the body's last chunk: the body's to see
        chunk(b"data: a\n\n") + b"3\r\ndat",  # a chunk begun
        chunk(b"data: a"),  # an event not ended in this read
        chunk(b"data: a\r\n\r\n"),  # CRLF lines: the line-by-line path
        chunk(b": keep-alive\n\n"),
        chunk(b"event: ping\ndata: x\n\n"),
        chunk(b"data: \xff\n\n"),  # not UTF-8: the line-by-line path raises it
        b"zz\r\ndata: a\n\n\r\n",  # not chunk framing
        b"",
    ],
)
def test_any_other_read_is_left_untouched(read: bytes) -> None:
    parser = SSEParser()
    assert parser.feed_whole_chunks(read, 1) is None
    assert not parser.has_pending
    assert parser.feed(b"data: next\n\n", 2) == [SSEEvent(None, "next", 2)]


def test_nothing_is_taken_while_the_parser_holds_part_of_an_event() -> None:
    parser = SSEParser()
    assert parser.feed(b"data: par", 1) == []
    assert parser.feed_whole_chunks(chunk(b"data: b\n\n"), 2) is None
    assert parser.feed(b"t\n\n", 3) == [SSEEvent(None, "part", 1)]
    crlf = SSEParser()
    assert crlf.feed(b"data: a\r\n\r", 1) == [SSEEvent(None, "a", 1)]
    assert crlf.feed_whole_chunks(chunk(b"\ndata: b\n\n"), 2) is None  # its "\n" is owed


def test_an_event_over_the_limit_is_left_for_feed_to_refuse() -> None:
    parser = SSEParser(max_event_bytes=4)
    assert parser.feed_whole_chunks(chunk(b"data: too long\n\n"), 1) is None
    assert parser.feed_whole_chunks(chunk(b"data: ok\n\n"), 2) == [SSEEvent(None, "ok", 2)]


def test_ndjson_reads_are_never_taken() -> None:
    assert NDJSONParser().feed_whole_chunks(chunk(b"data: a\n\n"), 1) is None


_EVENTS = st.lists(
    st.text(
        alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\n"),
        max_size=12,
    ).map(lambda s: f"data: {s}\n\n".encode()),
    min_size=1,
    max_size=8,
)


@settings(max_examples=300, deadline=None)
@given(
    events=_EVENTS,
    chunk_cuts=st.lists(st.integers(min_value=1, max_value=200), max_size=8),
    read_cuts=st.lists(st.integers(min_value=1, max_value=200), max_size=8),
)
def test_any_chunking_and_read_split_gives_the_events_of_the_reference(
    events: list[bytes], chunk_cuts: list[int], read_cuts: list[int]
) -> None:
    payload = b"".join(events)
    cuts = sorted({c for c in chunk_cuts if c < len(payload)})
    pieces = [payload[a:b] for a, b in zip([0, *cuts], [*cuts, len(payload)], strict=True)]
    body = b"".join(chunk(p) for p in pieces) + b"0\r\n\r\n"
    at = sorted({c for c in read_cuts if c < len(body)})
    reads = [
        (body[a:b], i) for i, (a, b) in enumerate(zip([0, *at], [*at, len(body)], strict=True))
    ]
    offered, taken = _offered_first(reads)
    assert offered == _fed_after_dechunking(reads)
    if not at:  # one read of the whole body: its last chunk keeps it from being taken
        assert taken == 0


def test_reads_of_a_chunk_each_are_taken_until_the_last_chunk() -> None:
    events = [f"data: {i}\n\n".encode() for i in range(5)]
    reads = [(chunk(e), i) for i, e in enumerate(events)] + [(b"0\r\n\r\n", 9)]
    offered, taken = _offered_first(reads)
    assert offered == _fed_after_dechunking(reads)
    assert [e.t_ns for e in offered] == [0, 1, 2, 3, 4] and taken == 5
