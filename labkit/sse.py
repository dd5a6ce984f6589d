"""Server-sent events reassembled from raw bytes, each event stamped at its first byte.

The parser is fed chunks exactly as the transport hands them over, with the clock reading
taken when each read returned. It handles several events per read, one event split over
reads (it keeps the stamp of the read that brought its first byte), ``\\n``, ``\\r\\n`` and
``\\r`` line endings (also a ``\\r\\n`` pair split between two reads), comments and
keep-alives (lines starting with ``:``, which never start or make an event).

This is the hot path of a measurement, so the per-chunk work is kept to a split and a loop.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SSEEvent", "SSEParser"]


@dataclass(slots=True)
class SSEEvent:
    """One dispatched event: its ``event:`` name (None when absent), joined data, stamp."""

    event: str | None
    data: str
    t_ns: int


class SSEParser:
    """Incremental SSE framing (WHATWG event-stream rules, ``id``/``retry`` ignored)."""

    __slots__ = ("_data", "_event", "_event_t_ns", "_line_t_ns", "_partial", "_skip_lf")

    def __init__(self) -> None:
        self._partial = b""  # bytes of a line whose end has not arrived yet
        self._line_t_ns = 0  # stamp of the read that brought the partial line's first byte
        self._skip_lf = False  # last read ended with "\r": a leading "\n" is its pair
        self._event: str | None = None
        self._data: list[str] = []
        self._event_t_ns: int | None = None

    def feed(self, chunk: bytes, t_ns: int) -> list[SSEEvent]:
        """Parse one read; return the events it completed, in order."""
        if self._skip_lf:
            self._skip_lf = False
            if chunk[:1] == b"\n":
                chunk = chunk[1:]
        if not chunk:
            return []
        if self._partial:
            buf = self._partial + chunk
            first_t = self._line_t_ns
        else:
            buf = chunk
            first_t = t_ns
        lines = buf.splitlines(keepends=True)
        last = lines[-1]
        if last[-1:] not in (b"\n", b"\r"):
            self._partial = lines.pop()
            # The partial line started in this read unless it is the carried-over one.
            self._line_t_ns = first_t if not lines else t_ns
        else:
            self._partial = b""
            if last[-1:] == b"\r":
                self._skip_lf = True
        out: list[SSEEvent] = []
        for i, raw in enumerate(lines):
            line_t = first_t if i == 0 else t_ns
            self._line(raw.rstrip(b"\r\n"), line_t, out)
        return out

    def _line(self, line: bytes, t_ns: int, out: list[SSEEvent]) -> None:
        if not line:
            if self._data:
                stamp = self._event_t_ns if self._event_t_ns is not None else t_ns
                out.append(SSEEvent(self._event, "\n".join(self._data), stamp))
            self._event = None
            self._data = []
            self._event_t_ns = None
            return
        if line[0] == 0x3A:  # ":" comment / keep-alive
            return
        if self._event_t_ns is None:
            self._event_t_ns = t_ns
        field, sep, value = line.partition(b":")
        if sep and value[:1] == b" ":
            value = value[1:]
        if field == b"data":
            self._data.append(value.decode("utf-8"))
        elif field == b"event":
            self._event = value.decode("utf-8")
        # "id", "retry" and unknown fields are ignored.

    def close(self) -> list[SSEEvent]:
        """End of stream: flush an event whose terminating blank line never came."""
        out: list[SSEEvent] = []
        if self._partial:
            self._line(self._partial.rstrip(b"\r\n"), self._line_t_ns, out)
            self._partial = b""
        self._line(b"", 0, out)
        return out

    @property
    def has_pending(self) -> bool:
        """True when bytes of an unfinished event are buffered."""
        return bool(self._partial or self._data)
