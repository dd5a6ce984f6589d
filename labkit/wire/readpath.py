"""A streamed token's read steps, in C where labkit was built with it, else in Python.

One token is one socket read on the lean transport, and its steps run cold between context
switches: the read and its kernel stamp (`tcp.Connection`), its chunk framing
(`whole_chunks`) and its SSE split (`whole_data_events`). `_readpath.c` does the common case
of each in one call (setup.py builds it on Linux; a build without a compiler skips it) and
answers None for anything else, which the Python code then reads its general way. Both give
the same answers (tests/wire/test_readpath.py); `IMPLEMENTATION` says which runs.
`chunked_data_events` runs the framing's and the SSE split's common cases back to back, for
a reader that takes a chunked body's read as it came (`SSEParser.feed_whole_chunks`).
`TIMED_SELECT` is the event loop's timed ``select()`` (`loopclock.TimedSelector`) in one call.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, Literal

__all__ = [
    "IMPLEMENTATION",
    "RECV_STAMPED",
    "TIMED_SELECT",
    "TIMED_SELECT_BLOCKED_NS",
    "chunked_data_events",
    "whole_chunks",
    "whole_data_events",
]


#: ``recv_stamped(fd, size, ancillary_size, stamp_type, stamp_unit, last_t)``: one
#: ``recvmsg()`` and its stamps as `Connection` takes them, ``(data, t_ns, seen_ns,
#: kernel_stamped)``, or None when the socket has nothing now (OSError on a failed read).
#: None without the C module: `Connection` then reads through the socket object.
RecvStamped = Callable[[int, int, int, int, int, int], tuple[bytes, int, int, bool] | None]


def py_whole_chunks(data: bytes) -> bytes | None:
    """The payload of `data` when it is whole non-empty chunks with bare hex sizes and
    nothing else; None otherwise (the general decoder then reads it)."""
    parts = []
    at = 0
    total = len(data)
    while at < total:
        end = data.find(b"\r\n", at, at + 18)
        if end <= at:
            return None
        head = data[at:end]
        if not (head.isalnum() and head.isascii()) or head[1:2] in (b"x", b"X"):
            return None
        try:
            size = int(head, 16)
        except ValueError:  # not hex: the general decoder names it
            return None
        stop = end + 2 + size
        if not size or data[stop : stop + 2] != b"\r\n":
            return None  # the last chunk (size 0), or one cut by the read's end
        parts.append(data[end + 2 : stop])
        at = stop + 2
    return parts[0] if len(parts) == 1 else b"".join(parts)


def py_whole_data_events(chunk: bytes, limit: int, t_ns: int, event_type: Any) -> list[Any] | None:
    """The events of a read that is only ``data: ...`` lines each followed by a blank line,
    ``\n`` line ends only (``event_type(None, data, t_ns)`` each); None for any other read,
    or one with a line over `limit` bytes or not UTF-8."""
    if chunk[-2:] != b"\n\n" or b"\r" in chunk:
        return None
    out = []
    for part in chunk[:-2].split(b"\n\n"):
        if part[:6] != b"data: " or part.find(b"\n") >= 0 or len(part) > limit:
            return None
        try:
            data = part[6:].decode("utf-8")
        except UnicodeDecodeError:
            return None
        out.append(event_type(None, data, t_ns))
    return out


def _compiled() -> Any | None:
    try:
        return importlib.import_module("labkit.wire._readpath")
    except ImportError:
        return None


_C = _compiled()

#: Which read path runs: ``"c"`` (labkit built with `_readpath`) or ``"python"``.
IMPLEMENTATION: Literal["c", "python"] = "c" if _C is not None else "python"

RECV_STAMPED: RecvStamped | None = _C.recv_stamped if _C is not None else None

whole_chunks: Callable[[bytes], bytes | None] = (
    _C.whole_chunks if _C is not None else py_whole_chunks
)

whole_data_events: Callable[[bytes, int, int, Any], list[Any] | None] = (
    _C.whole_data_events if _C is not None else py_whole_data_events
)


#: ``timed_select(selector, timeout, woken)``: `loopclock.TimedSelector.select` on an epoll
#: selector in one call (the poll, the clocks, the counters and each socket's report), and
#: the `loopclock.BLOCKED_NS` it was built with; None without the C module.
TIMED_SELECT: Callable[[Any, float | None, Any], list[Any]] | None = getattr(
    _C, "timed_select", None
)
TIMED_SELECT_BLOCKED_NS: int | None = getattr(_C, "BLOCKED_NS", None)


def py_chunked_data_events(data: bytes, limit: int, t_ns: int, event_type: Any) -> list[Any] | None:
    """The events of a read as it came off a chunked body: whole non-empty chunks
    (`whole_chunks`) whose payload is whole one-line ``data:`` events
    (`whole_data_events`); None where either is not so."""
    payload = whole_chunks(data)
    return None if payload is None else whole_data_events(payload, limit, t_ns, event_type)


#: `py_chunked_data_events` in one C call where labkit was built with it (a read of one
#: chunk is split where it lies, not copied out first).
chunked_data_events: Callable[[bytes, int, int, Any], list[Any] | None] = getattr(
    _C, "chunked_data_events", py_chunked_data_events
)
