"""A pushed stream's common reads taken whole in the connection's reader callback
(`readpath.CommonPush` and `readpath.Reader`, C only; issue 47), over a real socket pair:
a common read is taken as the recorder's reader would take it (the parser's texts, the
output stamps, the read's stamps, the measurement's first-event, first-text and end marks);
anything else reaches `on_other` untouched — another read, the peer's close, a failed
read — and the reader callback falls back to the connection's Python reader once no push
is set. The records a loaded stream gives either way: tests/wire/lean/test_push_records.py."""

from __future__ import annotations

import socket
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import example, given, settings

from labkit.measurement.recorder import Measurement
from labkit.providers.openai import OpenAIChatParser
from labkit.wire import readpath
from labkit.wire.lean.stamps import STAMP_TYPE, STAMP_UNIT
from labkit.wire.sse import MAX_EVENT_BYTES
from tests.wire.test_chat_content_events import _COMMON, _T, _fused, _measurement, _reads, _state
from tests.wire.test_chat_content_events import _parser as _chat_parser

_C, _NOT_BUILT = readpath.compiled_module()
pytestmark = [
    pytest.mark.unit,
    pytest.mark.skipif(
        not sys.platform.startswith("linux") or _C is None, reason="the C read path only"
    ),
]

_LIMIT = MAX_EVENT_BYTES + len(b"data: ")


def _chunk(payload: bytes) -> bytes:
    return b"%x\r\n" % len(payload) + payload + b"\r\n"


def _content(text: str) -> bytes:
    chunk = (
        b'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m",'
        b'"choices":[{"index":0,"delta":{"content":"%s"},"finish_reason":null}]}\n\n'
    ) % text.encode()
    return _chunk(chunk)


class _Push:
    """A CommonPush attached to one end of a socket pair, with what it hands on."""

    def __init__(self, sock: socket.socket, framed: bool = True) -> None:
        assert _C is not None
        self.parser = OpenAIChatParser()
        self.parser.response_id = "chatcmpl-1"  # the first event, read the general way
        self.m = Measurement(t_prepare=0)
        self.m.read_stamps = []
        self.others: list[Any] = []
        self.framed_sink: object | None = object() if framed else None
        self.push = _C.CommonPush(
            self.parser,
            self.m.output_ns,
            _LIMIT,
            self.m,
            self.m.read_stamps,
            self.m.read_seen,
            self.m.read_kernel,
            None,
            None,
        )
        self.push.enabled = 1
        self.push.attach(
            sock.fileno(), 0, STAMP_TYPE, STAMP_UNIT, 0, 10**9, self, self.others.append
        )


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    a, b = socket.socketpair()
    a.setblocking(False)
    try:
        yield a, b
    finally:
        a.close()
        b.close()


def test_a_common_read_is_taken_as_the_recorders_reader_takes_it(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    ours, peer = pair
    got = _Push(ours)
    peer.sendall(_content("Hel"))
    assert got.push() is False  # taken: nothing for the loop
    peer.sendall(_content("lo") + _content(""))
    assert got.push() is False
    assert got.parser.text_parts == ["Hel", "lo"]
    assert got.m.output_ns == got.m.read_stamps == [got.m.first_event_ns, got.push.t]
    assert got.m.first_text_ns == got.m.first_event_ns
    assert len(got.m.read_seen) == 2 and got.m.read_kernel == [False, False]
    assert got.push.taken == 2 and got.push.took_latest and not got.others
    assert got.push.deadline_ns == got.push.seen + 10**9
    assert not got.m.done and got.push.terminator_ns == -1
    peer.sendall(_chunk(b"data: [DONE]\n\n"))
    assert got.push() is None  # handed on: the stream's end
    assert got.others == [True] and got.m.done and got.push.terminator_ns == got.push.t


def test_any_other_read_reaches_on_other_whole_and_nothing_is_consumed(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    ours, peer = pair
    got = _Push(ours)
    role = _chunk(b'data: {"id":"chatcmpl-1","choices":[{"index":0,"delta":{"role":"x"}}]}\n\n')
    peer.sendall(role)
    got.push()
    assert len(got.others) == 1
    data, t, seen, kernel = got.others[0]
    assert data == role and t == got.push.t and seen == got.push.seen and kernel is False
    assert not got.parser.text_parts and not got.m.output_ns and not got.m.read_stamps
    assert got.m.first_event_ns is None and not got.push.took_latest and got.push.taken == 0


@pytest.mark.parametrize("why", ["framing mid-chunk", "parser mid-event"])
def test_a_read_is_not_taken_while_the_framing_or_the_parser_is_mid_way(
    pair: tuple[socket.socket, socket.socket], why: str
) -> None:
    ours, peer = pair
    got = _Push(ours, framed=why != "framing mid-chunk")
    if why == "parser mid-event":
        got.push.enabled = 0
    peer.sendall(_content("a"))
    got.push()
    assert [type(x) for x in got.others] == [tuple] and not got.parser.text_parts


def test_the_peers_close_and_a_failed_read_reach_on_other(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    ours, peer = pair
    got = _Push(ours)
    assert got.push() is None and not got.others  # nothing to read yet
    peer.close()
    got.push()
    assert got.others[0][0] == b""  # the close, for the connection to see
    broken = socket.socket()
    got.push.attach(broken.fileno(), 0, STAMP_TYPE, STAMP_UNIT, 0, -1, got, got.others.append)
    broken.close()  # the descriptor is gone: recvmsg fails with EBADF
    got.push()
    assert isinstance(got.others[-1], OSError)


def test_a_push_not_attached_refuses_to_read() -> None:
    assert _C is not None
    push = _C.CommonPush(
        OpenAIChatParser(), [], _LIMIT, Measurement(t_prepare=0), None, [], [], None, None
    )
    with pytest.raises(ValueError, match="not attached"):
        push()
    with pytest.raises(TypeError):
        _C.CommonPush(OpenAIChatParser(), (), _LIMIT, None, None, [], [], None, None)


def test_the_reader_calls_its_push_while_set_else_its_fallback(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    assert _C is not None
    ours, peer = pair
    fell_back: list[bool] = []
    reader = _C.Reader(lambda: fell_back.append(True))
    reader()
    assert fell_back == [True] and reader.common is None
    got = _Push(ours)
    reader.common = got.push
    peer.sendall(_content("x"))
    reader()
    assert fell_back == [True] and got.parser.text_parts == ["x"]
    reader.common = None
    reader()
    assert fell_back == [True, True]
    with pytest.raises(TypeError, match="CommonPush"):
        reader.common = object()  # type: ignore[assignment]
    with pytest.raises(TypeError):
        _C.Reader(42)


@settings(max_examples=600, derandomize=True, deadline=None)
@given(_reads())
@example(_chunk(_COMMON % b"hello"))
@example(_chunk(_COMMON % b"a" + _COMMON % b"b" + b"data: [DONE]\n\n"))
def test_any_read_is_taken_as_chat_content_events_takes_it_or_handed_on_whole(
    read: bytes,
) -> None:
    """Hostile and near-common reads (test_chat_content_events' generator) sent over a real
    socket: where the one-call step takes a read, CommonPush leaves the same parser state,
    output stamps and marks (its own stamp for the step's); else it hands on the read
    whole, nothing consumed."""
    assert _C is not None
    expected_got, expected = _fused(_C.chat_content_events, read, _chat_parser())
    ours, peer = socket.socketpair()
    ours.setblocking(False)
    try:
        got = _Push(ours)
        got.parser = parser = _chat_parser()
        got.push = _C.CommonPush(
            parser,
            got.m.output_ns,
            _LIMIT,
            got.m,
            got.m.read_stamps,
            got.m.read_seen,
            got.m.read_kernel,
            None,
            None,
        )
        got.push.enabled = 1
        got.push.attach(ours.fileno(), 0, STAMP_TYPE, STAMP_UNIT, 0, -1, got, got.others.append)
        peer.sendall(read)
        got.push()
    finally:
        ours.close()
        peer.close()
    state = _state(parser, got.m)
    if expected_got is None:
        assert [other[0] for other in got.others] == [read]
        assert state == _state(_chat_parser(), _measurement()) and not got.m.read_stamps
        return
    t = got.push.t
    for key in ("first_event_ns", "first_text_ns"):
        state[key] = _T if state[key] == t else state[key]
    state["output_ns"] = [_T if x == t else x for x in state["output_ns"]]
    assert state == expected
    assert got.m.read_stamps == [t] and got.push.taken == 1
    assert got.others == ([True] if expected_got & 1 else [])
