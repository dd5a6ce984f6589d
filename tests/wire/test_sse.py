"""SSE framing: events reassembled from arbitrary reads, each stamped at its first byte."""

from __future__ import annotations

import pytest

from labkit.wire.sse import SSEEvent, SSEParser
from tests.providers.streams import load_sse, split_every

pytestmark = pytest.mark.unit


def feed_all(parser: SSEParser, reads: list[tuple[bytes, int]]) -> list[SSEEvent]:
    out: list[SSEEvent] = []
    for chunk, t in reads:
        out.extend(parser.feed(chunk, t))
    return out


def test_several_events_in_one_read_get_that_reads_stamp() -> None:
    p = SSEParser()
    events = p.feed(b"data: a\n\ndata: b\n\nevent: x\ndata: c\n\n", 100)
    assert [(e.event, e.data, e.t_ns) for e in events] == [
        (None, "a", 100),
        (None, "b", 100),
        ("x", "c", 100),
    ]


def test_event_split_across_reads_gets_its_first_parts_stamp() -> None:
    p = SSEParser()
    assert p.feed(b"da", 10) == []
    assert p.feed(b"ta: hel", 20) == []
    assert p.has_pending
    events = p.feed(b"lo\n\ndata: next\n", 30)
    assert [(e.data, e.t_ns) for e in events] == [("hello", 10)]
    # "next" started in the read stamped 30; its terminator arrives at 40.
    events = p.feed(b"\n", 40)
    assert [(e.data, e.t_ns) for e in events] == [("next", 30)]
    assert not p.has_pending


def test_event_whose_lines_span_reads_keeps_first_line_stamp() -> None:
    p = SSEParser()
    assert p.feed(b"event: content_block_delta\n", 5) == []
    events = p.feed(b'data: {"x":1}\n\n', 9)
    assert events == [SSEEvent("content_block_delta", '{"x":1}', 5)]


def test_comment_never_starts_an_event() -> None:
    p = SSEParser()
    assert p.feed(b": keep-alive\n\n", 1) == []
    assert p.feed(b": ping\n", 2) == []
    events = p.feed(b"data: real\n\n", 3)
    assert [(e.data, e.t_ns) for e in events] == [("real", 3)]
    # A comment inside an event is skipped without moving the event's stamp.
    assert p.feed(b"data: one\n", 4) == []
    events = p.feed(b": note\ndata: two\n\n", 6)
    assert [(e.data, e.t_ns) for e in events] == [("one\ntwo", 4)]


def test_blank_lines_alone_dispatch_nothing() -> None:
    p = SSEParser()
    assert p.feed(b"\n\n\r\n\n", 1) == []


def test_close_flushes_an_unterminated_event() -> None:
    p = SSEParser()
    assert p.feed(b"data: [DONE]", 7) == []
    assert p.close() == [SSEEvent(None, "[DONE]", 7)]
    # A terminated-line but un-dispatched event too.
    p = SSEParser()
    assert p.feed(b"data: x\n", 8) == []
    assert p.close() == [SSEEvent(None, "x", 8)]
    assert SSEParser().close() == []


@pytest.mark.parametrize("eol", [b"\n", b"\r\n", b"\r"])
def test_line_endings(eol: bytes) -> None:
    p = SSEParser()
    raw = b"event: e" + eol + b"data: 1" + eol + eol + b"data: 2" + eol + eol
    events = p.feed(raw, 1)
    assert [(e.event, e.data) for e in events] == [("e", "1"), (None, "2")]


def test_crlf_split_between_reads() -> None:
    p = SSEParser()
    assert p.feed(b"data: a\r", 1) == []
    # The "\n" completing "\r\n" must not be taken for a blank line (which would dispatch).
    assert p.feed(b"\ndata: b\r", 2) == []
    events = p.feed(b"\n\r\n", 3)
    assert [(e.data, e.t_ns) for e in events] == [("a\nb", 1)]


def test_utf8_sequence_split_between_reads() -> None:
    raw = "data: 日本🙂\n\n".encode()
    cut = raw.index("本".encode()) + 1  # inside the 3-byte sequence
    p = SSEParser()
    assert p.feed(raw[:cut], 1) == []
    assert [(e.data, e.t_ns) for e in p.feed(raw[cut:], 2)] == [("日本🙂", 1)]


def test_multiline_data_joined_and_field_without_space() -> None:
    p = SSEParser()
    events = p.feed(b"data:a\ndata: b\nid: 7\nretry: 10\nfoo: bar\n\n", 1)
    assert [(e.event, e.data) for e in events] == [(None, "a\nb")]


@pytest.mark.parametrize("name", ["openai_chat.sse", "anthropic_messages.sse", "llamacpp_chat.sse"])
@pytest.mark.parametrize("size", [1, 7, 64, 100_000])
def test_recorded_streams_parse_the_same_however_they_are_cut(name: str, size: int) -> None:
    raw = load_sse(name)
    whole = [(e.event, e.data) for e in SSEParser().feed(raw, 0)]
    p = SSEParser()
    pieces = feed_all(p, [(c, i) for i, c in enumerate(split_every(raw, size))]) + p.close()
    assert [(e.event, e.data) for e in pieces] == whole
    assert len(whole) == raw.count(b"data: ")
    # Stamps never decrease and each is the read that brought the event's first byte.
    stamps = [e.t_ns for e in pieces]
    assert stamps == sorted(stamps)


def test_recorded_stream_with_crlf_cut_everywhere() -> None:
    raw = load_sse("anthropic_messages.sse").replace(b"\n", b"\r\n")
    whole = [(e.event, e.data) for e in SSEParser().feed(raw, 0)]
    assert len(whole) == 9
    for size in (1, 2, 3, 5):
        p = SSEParser()
        got = feed_all(p, [(c, 0) for c in split_every(raw, size)]) + p.close()
        assert [(e.event, e.data) for e in got] == whole


def test_ndjson_lines_are_events_stamped_at_their_first_byte() -> None:
    from labkit.wire.sse import NDJSONParser

    p = NDJSONParser()
    assert p.feed(b'{"a": 1}\n{"b"', 10) == [SSEEvent(None, '{"a": 1}', 10)]
    assert p.feed(b': 2}\n\n{"c": 3}\n', 20) == [
        SSEEvent(None, '{"b": 2}', 10),
        SSEEvent(None, '{"c": 3}', 20),
    ]
    assert p.feed(b'{"done": true}', 30) == []
    assert p.close() == [SSEEvent(None, '{"done": true}', 30)]
