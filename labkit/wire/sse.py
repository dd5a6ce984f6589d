"""Server-sent events reassembled from raw bytes, each event stamped at its first byte.

The parser is fed chunks exactly as the transport hands them over, with the clock reading
taken when each read returned; one event split over reads keeps the stamp of the read that
brought its first byte (what else it handles: `SSEParser`). This is the hot path of a
measurement, so the per-chunk work is kept to a split and a loop. Work is linear in the bytes
read, however long a line: the reads of an unfinished line are collected and joined once,
when its end arrives. An event larger than `max_event_bytes` (default `MAX_EVENT_BYTES`) is a
`MalformedStream`, raised as soon as the limit is passed.
"""

from __future__ import annotations

from dataclasses import dataclass

from labkit.errors import MalformedStream
from labkit.wire.readpath import chunked_data_events, whole_data_events

__all__ = ["COMMENT_KEPT_BYTES", "MAX_EVENT_BYTES", "NDJSONParser", "SSEEvent", "SSEParser"]

#: The largest event accepted: far above any chat chunk (a few kB; a tool call's arguments or
#: llama.cpp's per-token probabilities reach tens of kB), far below what would exhaust memory.
MAX_EVENT_BYTES = 8 * 1024 * 1024
#: How much of the first comment before the first event is kept (`SSEParser.first_comment`).
COMMENT_KEPT_BYTES = 64


@dataclass(slots=True)
class SSEEvent:
    """One dispatched event: its ``event:`` name (None when absent), joined data, stamp."""

    event: str | None
    data: str
    t_ns: int


class SSEParser:
    """Incremental SSE framing (WHATWG event-stream rules, ``id``/``retry`` ignored).

    It handles several events per read, one event split over reads (it keeps the stamp of
    the read that brought its first byte), ``\\n``, ``\\r\\n`` and ``\\r`` line endings (also a
    ``\\r\\n`` pair split between two reads), comments and keep-alives (lines starting with
    ``:``, which never start or make an event).
    """

    #: A 2xx body that starts like HTML or JSON is a document, not this framing's stream.
    json_first_byte_is_a_document = True
    #: Whether a read of whole one-line ``data:`` events may skip the line split.
    _single_data_lines = True

    __slots__ = (
        "_data",
        "_data_line_max",
        "_dispatched",
        "_event",
        "_event_bytes",
        "_event_t_ns",
        "_failure",
        "_line_t_ns",
        "_max",
        "_partial",
        "_partial_len",
        "_skip_lf",
        "comments_before_first_event",
        "first_comment",
        "last_comment_t_ns",
    )

    def __init__(self, max_event_bytes: int = MAX_EVENT_BYTES) -> None:
        self._partial: list[bytes] = []  # reads of a line whose end has not arrived yet
        self._partial_len = 0
        self._line_t_ns = 0  # stamp of the read that brought the partial line's first byte
        self._skip_lf = False  # last read ended with "\r": a leading "\n" is its pair
        self._event: str | None = None
        self._data: list[str] = []
        self._event_bytes = 0  # data bytes of the event being assembled
        self._event_t_ns: int | None = None
        self._max = max_event_bytes
        self._data_line_max = max_event_bytes + len(b"data: ")  # a one-line event, whole
        self._failure: Exception | None = None
        self._dispatched = False
        #: Comment lines (`: keep-alive`) read before the first event, and the stamp of the
        #: last of them: a server's sign that the request is waiting (a queue signal).
        self.comments_before_first_event = 0
        self.last_comment_t_ns = 0
        #: The first of those comments' text (after the colon, at most `COMMENT_KEPT_BYTES`):
        #: who sent them (`OPENROUTER PROCESSING`: a gateway's own wait, not a queue).
        self.first_comment = b""

    def feed(self, chunk: bytes, t_ns: int) -> list[SSEEvent]:
        """Parse one read; return the events it completed, in order.

        A malformed line (over the size limit, not UTF-8) is raised by the next call, after
        the events completed before it in this read were returned and stamped.
        """
        if self._failure is not None:
            raise self._failure
        if self._skip_lf:
            self._skip_lf = False
            if chunk[:1] == b"\n":
                chunk = chunk[1:]
        if not chunk:
            return []
        if self._single_data_lines and not self._partial and self._event_t_ns is None:
            # The common read: whole events of one `data:` line each (one, or several a late
            # read gathered), nothing pending: the same events as the line-by-line path
            # below, without splitting the read into lines. Anything else goes that way.
            events = whole_data_events(chunk, self._data_line_max, t_ns, SSEEvent)
            if events is not None:
                self._dispatched = True
                return events
        if self._partial:
            if b"\n" not in chunk and b"\r" not in chunk:
                # Still inside one long line: keep the read, join once at its end.
                self._partial.append(chunk)
                self._partial_len += len(chunk)
                if self._partial_len + self._event_bytes > self._max:
                    self._too_large(self._partial_len + self._event_bytes)
                return []
            self._partial.append(chunk)
            buf = b"".join(self._partial)
            first_t = self._line_t_ns
        else:
            buf = chunk
            first_t = t_ns
        lines = buf.splitlines(keepends=True)
        last = lines[-1]
        if last[-1:] not in (b"\n", b"\r"):
            tail = lines.pop()
            self._partial = [tail]
            self._partial_len = len(tail)
            # The partial line started in this read unless it is the carried-over one.
            self._line_t_ns = first_t if not lines else t_ns
        else:
            self._partial = []
            self._partial_len = 0
            if last[-1:] == b"\r":
                self._skip_lf = True
        out: list[SSEEvent] = []
        try:
            for i, raw in enumerate(lines):
                line_t = first_t if i == 0 else t_ns
                self._line(raw.rstrip(b"\r\n"), line_t, out)
        except (MalformedStream, UnicodeDecodeError) as exc:
            if not out:
                raise
            self._failure = exc
        return out

    def feed_whole_chunks(self, data: bytes, t_ns: int) -> list[SSEEvent] | None:
        """The events of one read of a chunked body as it came (chunk framing and all),
        when it is the common read: whole chunks of whole one-line ``data:`` events, and
        nothing pending here. None otherwise, with nothing consumed: the caller de-chunks
        the read and `feed`s it. One call where framing and `feed` take several."""
        if (
            self._partial
            or self._event_t_ns is not None
            or self._skip_lf
            or self._failure is not None
            or not self._single_data_lines
        ):
            return None
        events = chunked_data_events(data, self._data_line_max, t_ns, SSEEvent)
        if events is not None:
            self._dispatched = True
        return events

    @property
    def one_line_max(self) -> int:
        """The longest one-line ``data:`` event line the whole-event readers take, its
        ``data: `` included (the `limit` of `labkit.wire.readpath`'s readers)."""
        return self._data_line_max

    def at_event_boundary(self) -> bool:
        """Whether nothing is pending here (no partial line or event, no failure, no
        ``\r`` awaiting its ``\n``) and this framing is one-line ``data:`` events: a read
        of whole events may then be read without it (`labkit.wire.readpath.common_reader`,
        which leaves this parser as it is; the caller has had an event through it)."""
        return not (
            self._partial
            or self._event_t_ns is not None
            or self._skip_lf
            or self._failure is not None
            or not self._single_data_lines
        )

    def _line(self, line: bytes, t_ns: int, out: list[SSEEvent]) -> None:
        if not line:
            if self._data:
                stamp = self._event_t_ns if self._event_t_ns is not None else t_ns
                out.append(SSEEvent(self._event, "\n".join(self._data), stamp))
                self._dispatched = True
            self._event = None
            self._data = []
            self._event_bytes = 0
            self._event_t_ns = None
            return
        if line[0] == 0x3A:  # ":" comment / keep-alive
            if not self._dispatched:
                if not self.comments_before_first_event:
                    self.first_comment = line[1 : 1 + COMMENT_KEPT_BYTES]
                self.comments_before_first_event += 1
                self.last_comment_t_ns = t_ns
            return
        if self._event_t_ns is None:
            self._event_t_ns = t_ns
        field, sep, value = line.partition(b":")
        if sep and value[:1] == b" ":
            value = value[1:]
        if field == b"data":
            self._event_bytes += len(value)
            if self._event_bytes > self._max:
                self._too_large(self._event_bytes)
            self._data.append(value.decode("utf-8"))
        elif field == b"event":
            self._event = value.decode("utf-8")
        # "id", "retry" and unknown fields are ignored.

    def _too_large(self, size: int) -> None:
        raise MalformedStream(
            f"an event of more than {self._max:,} bytes (at least {size:,}): over the limit"
        )

    def close(self) -> list[SSEEvent]:
        """End of stream: flush an event whose terminating blank line never came."""
        if self._failure is not None:
            raise self._failure
        out: list[SSEEvent] = []
        if self._partial:
            self._line(b"".join(self._partial).rstrip(b"\r\n"), self._line_t_ns, out)
            self._partial = []
            self._partial_len = 0
        self._line(b"", 0, out)
        return out

    @property
    def has_pending(self) -> bool:
        """True when bytes of an unfinished event are buffered."""
        return bool(self._partial or self._data)


class NDJSONParser(SSEParser):
    """Newline-delimited JSON framing (Ollama's native stream): every non-empty line is one
    event with no name, stamped like an SSE event; the same linear reads and size limit."""

    __slots__ = ()

    json_first_byte_is_a_document = False
    _single_data_lines = False

    def _line(self, line: bytes, t_ns: int, out: list[SSEEvent]) -> None:
        if not line.strip():
            return
        if len(line) > self._max:
            self._too_large(len(line))
        out.append(SSEEvent(None, line.decode("utf-8"), t_ns))
