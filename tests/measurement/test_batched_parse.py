"""The wire recorder parses a stream's reads in a batch (`StreamParser.end_markers`) with the
same outcome as parsing each read as it comes: every stamp, read list, loop window, parser
field and error is identical, for every provider kind's streams, valid and broken.

Each stream is read twice by `StreamRecorder._read_events` over the lean transport's real
`Body` (its chunk framing and its push of each read into the reader callback), fed by a
scripted connection whose reads carry scripted stamps: once as labkit runs (batched, where
the parser declares end markers) and once with the markers taken away (each read parsed
in the callback, as before batching). The loop clock's window is scripted to answer from the
read being delivered, so a window taken later than its read would differ.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from labkit.measurement import recorder as recorder_module
from labkit.measurement.recorder import Measurement, StreamRecorder
from labkit.providers.base import StreamParser
from labkit.wire.lean.http11 import Body
from labkit.wire.lean.tcp import Connection
from tests.providers.streams import anthropic_events, oa_chunk, openai_events, sse
from tests.support.fuzz_streams import (
    KINDS,
    PROVIDER_SETTINGS,
    VALID_STREAMS,
    mutated_streams,
)
from tests.providers.streams import make_provider

pytestmark = pytest.mark.unit

#: How a script's body ends after its reads: the last chunk ("complete"), the peer closing
#: ("close"), or no further read within the read timeout ("stall").
Ending = str


class _Owner:
    def release(self, conn: Connection) -> None:
        pass

    def discard(self, conn: Connection) -> None:
        pass


class _Loop:
    """A loop clock whose window answers from the read being delivered (`now`)."""

    def __init__(self) -> None:
        self.now = 0

    def window_before(self, seen_ns: int) -> tuple[int, int, bool] | None:
        if self.now % 3 == 0:
            return None  # that select() is no longer in its history
        return (seen_ns - 50, self.now - 20, self.now % 2 == 0)


def _connection(reads: list[tuple[bytes, int, int, bool]], ending: Ending, loop: _Loop) -> Any:
    """A lean `Connection` (no socket) whose reads come from `reads`."""
    conn = Connection.__new__(Connection)
    conn.key = ("http", "x", 80)
    conn.inbox = deque()
    conn.closed = False
    conn.buffer = bytearray()
    conn.buffer_stamp = (0, 0, False)
    conn._fd = -1
    conn._timer = None
    conn._waiter = None
    conn._unsent = bytearray()
    conn._ancillary_size = 1  # kernel stamping: the body pushes its reads
    script: Iterator[tuple[bytes, int, int, bool]] = iter(reads)

    def after_last() -> None:
        if ending == "stall":
            raise TimeoutError
        conn.closed = True

    async def read(timeout: float | None) -> tuple[bytes, int, int, bool] | None:
        for got in script:
            loop.now = got[2]
            return got
        after_last()
        return None

    async def push(sink: Any, timeout: float | None) -> None:
        for got in script:
            loop.now = got[2]
            if sink(*got):
                return
        after_last()

    conn.read = read  # type: ignore[method-assign]
    conn.push = push  # type: ignore[method-assign]
    return conn


def _snapshot(m: Measurement, parser: StreamParser, error: Exception | None) -> dict[str, Any]:
    state = {
        k: v for k, v in vars(parser).items() if not callable(v) and k != "end_markers"
    }
    return {
        "output_ns": m.output_ns,
        "first_event_ns": m.first_event_ns,
        "first_text_ns": m.first_text_ns,
        "end_ns": m.end_ns,
        "done": m.done,
        "error": m.error,
        "stamp_source": m.stamp_source,
        "read_stamps": m.read_stamps,
        "read_seen": m.read_seen,
        "read_kernel": m.read_kernel,
        "read_windows": m.read_windows,
        "parser": state,
        "raised": None if error is None else (type(error).__name__, str(error)),
    }


def _read(kind: str, chunks: list[bytes], ending: Ending, batched: bool) -> dict[str, Any]:
    """What reading `chunks` (one chunk of the chunked body a read) gives."""
    loop_clock = _Loop()
    reads = [
        (b"%x\r\n%s\r\n" % (len(c), c), 1_000 * (i + 1), 1_000 * (i + 1) + 7, True)
        for i, c in enumerate(chunks)
        if c
    ]
    if ending == "complete":
        reads.append((b"0\r\n\r\n", 1_000 * (len(reads) + 1), 1_000 * (len(reads) + 1) + 7, True))
    provider = make_provider(kind, **PROVIDER_SETTINGS[kind])
    parser = provider.new_parser()
    if not batched:
        parser.end_markers = ()  # type: ignore[misc]
    framer = provider.new_framer()
    m = Measurement(t_prepare=0)
    conn = _connection(reads, ending, loop_clock)
    request = httpx.Request("POST", "http://x/")
    body = Body(_Owner(), conn, request, "chunked", 0, True, 5.0)
    response = httpx.Response(
        200,
        headers={"content-type": "text/event-stream"},
        extensions={"labkit.arrival": body},
        request=request,
    )
    error: Exception | None = None
    original = recorder_module.loop_clock
    recorder_module.loop_clock = lambda: loop_clock  # type: ignore[assignment,return-value]
    try:
        asyncio.run(StreamRecorder()._read_events(response, framer, parser, m, str))
    except Exception as exc:
        error = exc
    finally:
        recorder_module.loop_clock = original
    return _snapshot(m, parser, error)


def _same(kind: str, chunks: list[bytes], ending: Ending) -> dict[str, Any]:
    batched = _read(kind, chunks, ending, batched=True)
    per_read = _read(kind, chunks, ending, batched=False)
    assert batched == per_read
    return batched


def _events(data: bytes, per_read: int) -> list[bytes]:
    """`data`'s SSE events, `per_read` of them to a read."""
    events = [e + b"\n\n" for e in data.split(b"\n\n") if e.strip()]
    return [b"".join(events[i : i + per_read]) for i in range(0, len(events), per_read)]


def test_each_parser_of_a_kind_declares_its_end_markers() -> None:
    # The four streaming APIs batch; a parser without markers would read one by one.
    for kind in KINDS:
        assert make_provider(kind, **PROVIDER_SETTINGS[kind]).new_parser().end_markers


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("per_read", [1, 2, 3])
@pytest.mark.parametrize("ending", ["complete", "close", "stall"])
def test_valid_streams_read_alike(kind: str, per_read: int, ending: Ending) -> None:
    for data in VALID_STREAMS[kind]:
        got = _same(kind, _events(data, per_read), ending)
        assert got["output_ns"], "the stream's output was stamped"
        assert got["raised"] is None or ending != "complete"


def test_a_terminator_before_the_bodys_end_stops_reading_there() -> None:
    # `[DONE]`, then more events and a body held open: neither path reads past the read
    # that completed the terminator, so the stall after it is never met.
    data = b"".join(openai_events(["a", "b", "c"]))
    chunks = [*_events(data, 1), sse(oa_chunk("late")), b"data: [DONE]\n\n"]
    got = _same("openai_compatible", chunks, "stall")
    assert got["raised"] is None and got["done"]
    done_read = len(_events(data, 1))
    assert got["end_ns"] == 1_000 * done_read
    assert len(got["read_stamps"]) == done_read


def test_a_terminator_mid_read_and_events_after_it_in_the_same_read() -> None:
    data = b"".join(openai_events(["a", "b"]))
    events = _events(data, 1)
    chunks = [*events[:-1], events[-1] + sse(oa_chunk("after")), sse(oa_chunk("later"))]
    got = _same("openai_compatible", chunks, "stall")
    assert got["done"] and got["raised"] is None


def test_a_marker_inside_a_tokens_text_is_no_end() -> None:
    # The marker misfires: the batch is parsed there and reading goes on.
    data = b"".join(openai_events(["say ", "[DONE]", " now", "message_stop true"]))
    got = _same("openai_compatible", _events(data, 1), "stall")
    assert got["done"] and "[DONE]" in "".join(got["parser"]["text_parts"])
    data = b"".join(anthropic_events(["message_stop", " true", " \\u0041"]))
    assert _same("anthropic", _events(data, 1), "close")["done"]


@pytest.mark.parametrize("size", [1, 7, 50])
def test_reads_splitting_events(size: int) -> None:
    for kind in ("openai_compatible", "anthropic", "ollama", "openai_responses"):
        data = VALID_STREAMS[kind][-1]
        chunks = [data[i : i + size] for i in range(0, len(data), size)]
        _same(kind, chunks, "complete")


def test_an_error_mid_stream_is_the_same_error_with_the_same_reads() -> None:
    # A malformed event in the middle, more reads after it and then the body held open: the
    # batch finds it when the read times out, and keeps the reads up to it only.
    data = b"".join(openai_events(["a", "b", "c", "d"]))
    events = _events(data, 1)
    chunks = [*events[:2], b"data: {not json\n\n", *events[2:-1]]
    got = _same("openai_compatible", chunks, "stall")
    assert got["raised"] is not None and "not JSON" in got["raised"][1]
    assert len(got["read_stamps"]) == 3


def test_an_error_event_mid_stream_and_a_stall() -> None:
    data = b"".join(openai_events(["a", "b"]))
    events = _events(data, 1)
    error = sse({"error": {"message": "overloaded", "type": "server_error"}})
    got = _same("openai_compatible", [*events[:2], error, events[2]], "stall")
    assert got["raised"] is not None and got["raised"][0] == "ReadTimeout"
    assert got["parser"]["error"] is not None


def test_a_stall_and_a_close_mid_stream_keep_every_stamp() -> None:
    data = b"".join(openai_events(["a", "b", "c"]))
    for ending in ("stall", "close"):
        got = _same("openai_compatible", _events(data, 1)[:-1], ending)
        assert got["raised"] is not None and got["output_ns"]


def test_an_undecodable_read_after_kept_ones() -> None:
    # The framing's own error (not UTF-8) in a later read: the kept reads are parsed first.
    data = b"".join(openai_events(["a", "b"]))
    events = _events(data, 1)
    _same("openai_compatible", [*events[:2], b"data: \xff\xfe\n", b"\n", events[2]], "close")


def test_several_events_a_read_keep_the_window_of_their_read() -> None:
    data = b"".join(openai_events(list("abcdefghij")))
    got = _same("openai_compatible", _events(data, 3), "complete")
    assert got["read_windows"], "reads of several output events have their windows"


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None
)
@given(data=st.data(), kind=st.sampled_from(KINDS), ending=st.sampled_from(["close", "stall"]))
def test_mutated_streams_read_alike(data: st.DataObject, kind: str, ending: Ending) -> None:
    stream = data.draw(mutated_streams(kind))
    _same(kind, stream.chunks, "close" if stream.drop else ending)


def test_an_end_named_only_by_its_event_line() -> None:
    # `event: message_stop` with data that does not repeat the name, the body held open.
    data = b"".join(anthropic_events(["a", "b"]))
    events = [e for e in _events(data, 1) if b"message_stop" not in e]
    got = _same("anthropic", [*events, b"event: message_stop\ndata: {}\n\n"], "stall")
    assert got["done"] and got["raised"] is None
