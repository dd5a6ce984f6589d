"""The C read path (`labkit/wire/_readpath.c`) answers as the Python one does: the
same payload or events where both take the common case, None where either leaves the read to
the general code, and the same read and stamps off a real socket."""

from __future__ import annotations

import itertools
import os
import socket
import sys
import time

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from labkit.wire import readpath
from labkit.wire.lean.http11 import _Chunked
from labkit.wire.lean.stamps import (
    ANC_SIZE,
    KERNEL_STAMPS,
    STAMP_TYPE,
    STAMP_UNIT,
    loopback_pair,
    read_is_stamped,
)
from labkit.wire.sse import MAX_EVENT_BYTES, SSEEvent, SSEParser

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="built on Linux only")
unit = pytest.mark.unit
#: Real sockets: the integration tier.
integration = pytest.mark.integration

#: The built extension, whatever LABKIT_READPATH says (held to the Python twins here).
_C, _NOT_BUILT = readpath.compiled_module()


@unit
def test_labkit_is_built_with_its_c_read_path_on_linux() -> None:
    if not sys.platform.startswith("linux"):
        assert readpath.IMPLEMENTATION == "python"
        return
    assert _C is not None, f"setup.py did not build labkit/wire/_readpath.c ({_NOT_BUILT})"
    if readpath.READ_PATH.reason == "switched_off":
        return  # LABKIT_READPATH=python: tests/wire/test_readpath_switch.py
    assert readpath.IMPLEMENTATION == "c"
    assert readpath.whole_data_events is _C.whole_data_events
    assert readpath.RECV_STAMPED is _C.recv_stamped


def _chunk(payload: bytes, head: bytes | None = None) -> bytes:
    return (b"%x" % len(payload) if head is None else head) + b"\r\n" + payload + b"\r\n"


_heads = st.sampled_from(
    [None, b"0", b"00", b"0x5", b"5;ext", b" 5", b"5 ", b"zz", b"F" * 16, b"0" * 15 + b"3", b""]
)


@st.composite
def _chunked_reads(draw: st.DrawFn) -> bytes:
    """Whole chunks, now and then with an odd head, cut, extended or followed by the end."""
    payloads = draw(st.lists(st.binary(min_size=0, max_size=40), min_size=0, max_size=5))
    parts = [_chunk(p, draw(_heads) if draw(st.booleans()) else None) for p in payloads]
    read = b"".join(parts)
    tail = draw(st.sampled_from([b"", b"0\r\n\r\n", b"\r\n", b"3\r\nab", b"x"]))
    read += tail
    cut = draw(st.integers(min_value=0, max_value=len(read)))
    return read[:cut] if draw(st.booleans()) else read


def _python_chunked(data: bytes) -> tuple[bytes, bytes, bool] | str:
    try:
        return _Chunked().feed(data)
    except ValueError:
        return "refused"


@unit
@settings(max_examples=400, derandomize=True)
@given(st.one_of(_chunked_reads(), st.binary(max_size=80)))
@example(_chunk(b"a" * 300) + _chunk(b"b"))
@example(_chunk(b"x", b"0" * 15 + b"1"))
def test_whole_chunks_is_what_the_whole_decoder_makes_of_the_read(read: bytes) -> None:
    # Python only since its C version left (docs/accuracy.md): held to the general decoder
    fast = readpath.py_whole_chunks(read)
    if fast is not None and read:
        assert _python_chunked(read) == (fast, b"", False)


def _sse_line(text: str) -> bytes:
    return b"data: " + text.encode("utf-8", "surrogatepass") + b"\n\n"


_lines = st.one_of(
    st.text(max_size=30).map(_sse_line),
    st.sampled_from(
        [
            b"data: [DONE]\n\n",
            b"data:nospace\n\n",
            b"event: x\ndata: y\n\n",
            b": keep-alive\n\n",
            b"data: a\r\n\r\n",
            b"data: \xff\xfe\n\n",
            b"data: \xed\xa0\x80\n\n",
            b"data: a\n\n\n",
            b"\n\n",
            b"data: \n\n",
        ]
    ),
)


@st.composite
def _sse_reads(draw: st.DrawFn) -> bytes:
    read = b"".join(draw(st.lists(_lines, min_size=0, max_size=5)))
    if draw(st.booleans()):
        read = read[: draw(st.integers(min_value=0, max_value=len(read)))]
    return read


@unit
@settings(max_examples=400, derandomize=True)
@given(st.one_of(_sse_reads(), st.binary(max_size=60)), st.integers(min_value=6, max_value=40))
@example(b'data: {"a": 1}\n\ndata: [DONE]\n\n', MAX_EVENT_BYTES + 6)
@example(b"data: 123456\n\n", 12)
@example(b"data: 1234567\n\n", 12)
def test_whole_data_events_in_c_is_the_python_fast_path(read: bytes, limit: int) -> None:
    compiled = _C.whole_data_events(read, limit, 7, SSEEvent)
    assert compiled == readpath.py_whole_data_events(read, limit, 7, SSEEvent)
    if compiled is not None:
        assert all(type(e) is SSEEvent and e.event is None and e.t_ns == 7 for e in compiled)
        # and what the line-by-line parser makes of the read
        assert _line_by_line(read, limit - 6) == compiled


def _line_by_line(read: bytes, max_event_bytes: int) -> list[SSEEvent]:
    parser = SSEParser(max_event_bytes)
    # a partial line first takes the parser off its fast path; then the read's own lines
    parser.feed(b":", 7)
    return parser.feed(b"\n" + read, 7)


@st.composite
def _chunked_sse_reads(draw: st.DrawFn) -> bytes:
    """SSE reads (`_sse_reads`) cut into chunks (`_chunked_reads`' odd heads and tails)."""
    payload = draw(st.one_of(_sse_reads(), st.binary(max_size=60)))
    cuts = sorted(draw(st.sets(st.integers(0, len(payload)), max_size=4)))
    bounds = [0, *cuts, len(payload)]
    parts = [payload[a:b] for a, b in itertools.pairwise(bounds)]
    read = b"".join(
        _chunk(p, draw(_heads) if draw(st.integers(0, 5)) == 0 else None) for p in parts
    )
    read += draw(st.sampled_from([b"", b"", b"0\r\n\r\n", b"\r\n", b"3\r\nab"]))
    return read[: draw(st.integers(0, len(read)))] if draw(st.integers(0, 4)) == 0 else read


@unit
@settings(max_examples=600, derandomize=True)
@given(st.one_of(_chunked_sse_reads(), _chunked_reads()), st.integers(min_value=6, max_value=40))
@example(_chunk(b"data: a\n\n", b"0" * 15 + b"9"), 40)
@example(_chunk(b"data: a\n\n", b"0" * 16 + b"9"), 40)
@example(_chunk(b"data: a\n") + _chunk(b"\ndata: b\n\n"), 40)
@example(_chunk(b"data: a\n\n", b"9"), 40)
@example(_chunk(b"data: a\n\n", b"a"), 40)
@example(b"", 40)
def test_chunked_data_events_in_c_is_the_python_chain(read: bytes, limit: int) -> None:
    compiled = _C.chunked_data_events(read, limit, 7, SSEEvent)
    assert compiled == readpath.py_chunked_data_events(read, limit, 7, SSEEvent)
    if compiled is not None:
        payload = readpath.py_whole_chunks(read)
        assert payload is not None
        assert compiled == readpath.py_whole_data_events(payload, limit, 7, SSEEvent)


@unit
def test_labkit_binds_the_c_chain_where_it_runs_c() -> None:
    if readpath.IMPLEMENTATION == "c":
        assert readpath.chunked_data_events is _C.chunked_data_events
    else:
        assert readpath.chunked_data_events is readpath.py_chunked_data_events


@unit
def test_a_malformed_event_type_is_a_type_error_not_a_crash() -> None:
    with pytest.raises(TypeError):
        _C.whole_data_events(b"data: a\n\n", 10, 1, "not a type")
    with pytest.raises(TypeError):
        _C.chunked_data_events(b"9\r\ndata: a\n\n\r\n", 10, 1, "not a type")


needs_stamps = pytest.mark.skipif(KERNEL_STAMPS is None, reason="no kernel receive stamps here")


@integration
@needs_stamps
def test_recv_stamped_reads_a_kernel_stamped_segment() -> None:
    with loopback_pair() as (sender, receiver):
        # The kernel turns receive stamping on for the host a moment after the first socket
        # asks (deferred work): a segment sent before then comes unstamped. Wait for it.
        deadline = time.monotonic() + 60  # a hang guard, not a bound
        while not read_is_stamped(sender, receiver, b"x") and time.monotonic() < deadline:
            time.sleep(0.002)
        receiver.setblocking(False)
        assert (
            _C.recv_stamped(receiver.fileno(), 65536, ANC_SIZE, STAMP_TYPE, STAMP_UNIT, 0) is None
        )
        before = time.perf_counter_ns()
        sender.sendall(b"hello")
        time.sleep(0.01)
        data, t, seen, kernel = _C.recv_stamped(
            receiver.fileno(), 65536, ANC_SIZE, STAMP_TYPE, STAMP_UNIT, 0
        )
        assert (data, kernel) == (b"hello", True)
        # the kernel's stamp of the segment, on labkit's clock: after the send, never after
        # the read (how much earlier is the host's business: no time asserted)
        assert before <= t <= seen
        sender.sendall(b"again")
        time.sleep(0.01)
        data, t2, _, _ = _C.recv_stamped(
            receiver.fileno(), 65536, ANC_SIZE, STAMP_TYPE, STAMP_UNIT, seen + 10**9
        )
        assert data == b"again" and t2 == seen + 10**9  # never before the previous stamp
        sender.close()
        time.sleep(0.01)
        assert (
            _C.recv_stamped(receiver.fileno(), 65536, ANC_SIZE, STAMP_TYPE, STAMP_UNIT, 0)[0] == b""
        )


@integration
def test_recv_stamped_without_stamps_stamps_the_read() -> None:
    left, right = socket.socketpair()
    with left, right:
        right.setblocking(False)
        left.sendall(b"x" * 100)
        data, t, seen, kernel = _C.recv_stamped(right.fileno(), 64, 0, STAMP_TYPE, STAMP_UNIT, 0)
        assert (data, t, kernel) == (b"x" * 64, seen, False)


@integration
def test_recv_stamped_on_a_closed_descriptor_is_an_os_error() -> None:
    left, right = socket.socketpair()
    fd = right.detach()
    left.close()
    os.close(fd)
    with pytest.raises(OSError):
        _C.recv_stamped(fd, 64, 0, STAMP_TYPE, STAMP_UNIT, 0)
