"""One pushed read's Python work, warm, split by step: what `bench_cpu.py` prints beside the
loaded level's figures, for each side (run with that side's labkit first on sys.path).

A 32-stream level on a shared 2-core host swings by several µs a token between runs of the
same code, so a change of a microsecond a read cannot be seen there. Here the same reads
go through the same code in one process with nothing else to do: the truth server's Chat
chunk (100 tokens and ``[DONE]``, one chunk a read, as `labkit.truth` sends them) pushed by a
lean connection's own reader callback (`Connection._on_readable`) over a scripted `recvmsg`
(no socket: the read itself and the loop are not in it) into the
lean `Body` and `StreamRecorder._read_events` on labkit's own loop (`loopclock.run`), each
step the minimum over rounds:

- ``framing + SSE split``: `SSEParser.feed_whole_chunks` of each read;
- ``JSON decode + provider parse + stamp``: the parser's `on_event` and `Measurement.event`
  of each event;
- ``common read ... one call`` (issue 47, where the labkit measured has it): the parser's
  common chunk read, classified and stamped in one call a read
  (`labkit.wire.readpath.common_reader`), which replaces both steps above on every read but
  a stream's first;
- ``read path, whole``: the body's sink, the recorder's `on_read` and the steps it takes
  (the common read where there is one, else both steps above); ``glue`` is what it has
  beyond them.

Where labkit has `readpath.CommonPush` (the whole common read, socket read included, as
the connection's reader callback in C), a loaded level's common reads take it instead of
the path measured here, which its other reads still take.

Prints one JSON object: µs a read by step. Warm figures are smaller than a loaded level's
(each read there runs cold, after a context switch), but they move with the code alone.
"""

from __future__ import annotations

import json
import sys
import time
from collections import deque
from typing import Any

import httpx

from labkit.measurement.recorder import Measurement, StreamRecorder
from labkit.providers import provider_class
from labkit.wire import loopclock, readpath
from labkit.wire.lean import tcp
from labkit.wire.lean.http11 import Body
from labkit.wire.lean.tcp import Connection

TOKENS = 100
STREAMS = 100
ROUNDS = 15
#: The common read's step (issue 47), where the labkit measured has it.
COMMON_STEP = "common read: framing + decode + parse + stamp, one call"
_HEAD = (
    b'{"id":"chatcmpl-truth0001","object":"chat.completion.chunk","created":1700000000,'
    b'"model":"m","system_fingerprint":null,"choices":'
)


def _payloads() -> list[bytes]:
    out = [
        b"data: "
        + _HEAD
        + b'[{"index":0,"delta":{"content":"tok%d "},"logprobs":null,"finish_reason":null}]}' % i
        + b"\n\n"
        for i in range(TOKENS)
    ]
    return [*out, b"data: [DONE]\n\n"]


READS = [b"%x\r\n%s\r\n" % (len(p), p) for p in _payloads()]


def _provider() -> Any:
    cls = provider_class("openai_compatible")
    settings = {"id": "s", "kind": "openai_compatible", "model": "m", "base_url": "http://x/v1"}
    return cls(cls.settings_model.model_validate(settings), api_key=None)


class _Owner:
    def release(self, conn: Connection) -> None:
        pass

    def discard(self, conn: Connection) -> None:
        pass


#: The reads `_scripted_recv` hands out next (the connection being pushed's).
_SCRIPT: list[Any] = []


def _scripted_recv(*_: Any) -> tuple[bytes, int, int, bool]:
    """`readpath.RECV_STAMPED`'s answer for the next scripted read; b"" (closed) after."""
    return next(_SCRIPT[0], (b"", 0, 0, False))


def _connection() -> Connection:
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
    conn._ancillary_size = 1
    conn._common = None
    conn._reader = None
    reads = iter([(r, 1000 * (i + 1), 1000 * (i + 1) + 7, True) for i, r in enumerate(READS)])

    async def read(timeout: float | None) -> Any:
        return next(reads, None)

    async def push(
        sink: Any, timeout: float | None, framed: Any = None, common: Any = None
    ) -> None:
        # `Connection.push`'s set-up and tear-down around its own reader callback
        # (`_on_readable`, whatever this labkit's is), called once a read as the loop would,
        # its recvmsg the scripted one (`_scripted_recv`). A `readpath.CommonPush` (its own
        # recvmsg, in C) cannot read a script: left out, the Python path's steps measured.
        conn._sink, conn._sink_timeout_ns, conn._sink_error = sink, None, None
        conn.framed_sink, conn.framed_stamp, conn.framed_stopped = framed, None, False
        conn._last_t = 0
        _SCRIPT[:] = [reads]
        try:
            while conn._sink is not None and not conn.closed:
                conn._on_readable()
        finally:
            conn._sink = None
            conn.framed_sink = None
            error, conn._sink_error = conn._sink_error, None
        if error is not None:
            raise error

    conn.read = read  # type: ignore[method-assign]
    conn.push = push  # type: ignore[method-assign]
    return conn


async def _whole(provider: Any) -> float:
    recorder = StreamRecorder()
    t0 = time.perf_counter_ns()
    for _ in range(STREAMS):
        parser, framer, m = provider.new_parser(), provider.new_framer(), Measurement(t_prepare=0)
        request = httpx.Request("POST", "http://x/")
        body = Body(_Owner(), _connection(), request, "chunked", 0, True, 5.0)
        response = httpx.Response(
            200,
            headers={"content-type": "text/event-stream"},
            extensions={"labkit.arrival": body},
            request=request,
        )
        await recorder._read_events(response, framer, parser, m, str)
        assert len(m.output_ns) == TOKENS and m.done
    return (time.perf_counter_ns() - t0) / STREAMS / len(READS) / 1000


def _framing(provider: Any) -> float:
    t0 = time.perf_counter_ns()
    for _ in range(STREAMS):
        feed = provider.new_framer().feed_whole_chunks
        for i, r in enumerate(READS):
            feed(r, i)
    return (time.perf_counter_ns() - t0) / STREAMS / len(READS) / 1000


def _parse(provider: Any) -> float:
    events = [ev for r in READS for ev in provider.new_framer().feed_whole_chunks(r, 1)]
    t0 = time.perf_counter_ns()
    for _ in range(STREAMS):
        on_event, stamp = provider.new_parser().on_event, Measurement(t_prepare=0).event
        for ev in events:
            stamp(on_event(ev), ev.t_ns)
    return (time.perf_counter_ns() - t0) / STREAMS / len(READS) / 1000


def _common(provider: Any) -> float | None:
    """The common read's one call (issue 47: `readpath.common_reader` of the parser's
    `common_chunk`) over the same reads, the response id set as the first event sets it;
    None where this labkit has none (the side before it)."""
    common_reader = getattr(readpath, "common_reader", None)
    if common_reader is None:
        return None
    limit = provider.new_framer().one_line_max
    t0 = time.perf_counter_ns()
    for _ in range(STREAMS):
        parser, m = provider.new_parser(), Measurement(t_prepare=0)
        parser.response_id = "chatcmpl-truth0001"
        read = common_reader(parser.common_chunk())
        output_ns = m.output_ns
        for i, r in enumerate(READS):
            read(r, limit, i, parser, output_ns)
        assert len(output_ns) == TOKENS
    return (time.perf_counter_ns() - t0) / STREAMS / len(READS) / 1000


def main() -> None:
    """Print each step's µs a read (the minimum over `ROUNDS`) as JSON."""
    real_recv, tcp.RECV_STAMPED = tcp.RECV_STAMPED, _scripted_recv  # its recvmsg, scripted
    try:
        best = _measure()
    finally:
        tcp.RECV_STAMPED = real_recv
    json.dump(best, sys.stdout)


def _measure() -> dict[str, float]:
    """Each step's minimum over `ROUNDS`, µs a read."""
    provider = _provider()
    best: dict[str, float] = {}
    for _ in range(ROUNDS):
        got = {
            "framing + SSE split": _framing(provider),
            "JSON decode + provider parse + stamp": _parse(provider),
            # on labkit's own loop (its timed selector), as a run reads its streams
            "read path, whole": loopclock.run(_whole(provider)),
        }
        common = _common(provider)
        if common is not None:
            got[COMMON_STEP] = common
        for name, value in got.items():
            best[name] = min(value, best.get(name, value))
    # The whole path's reads take the common read where there is one (all but the first),
    # the two steps above where there is not.
    taken = best.get(COMMON_STEP)
    steps = (
        taken
        if taken is not None
        else best["framing + SSE split"] + best["JSON decode + provider parse + stamp"]
    )
    best["glue (sink, on_read)"] = best["read path, whole"] - steps
    return best


if __name__ == "__main__":
    main()
