"""A streamed token's read steps, in C where labkit was built with it, else in Python.

One token is one socket read on the lean transport, and its steps run cold between context
switches: the read and its kernel stamp (`tcp.Connection`), its chunk framing
(`whole_chunks`) and its SSE split (`whole_data_events`). `_readpath.c` does the common cases
in one call each (setup.py builds it on Linux; a build without a compiler skips it) and
answers None for anything else, which the Python code then reads its general way. Both give
the same answers (tests/wire/test_readpath.py); `READ_PATH` says which runs and why, as
``LABKIT_READPATH`` chooses (docs/configuration.md). Which steps are C, and why the framing
alone is not: docs/accuracy.md, "The C read path, side by side".
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from typing import Any, Literal, Protocol

from labkit.errors import ConfigError
from labkit.manifest import ReadPathManifest

__all__ = [
    "CHAT_CONTENT",
    "COMMON_CHUNKS",
    "COMMON_PUSHES",
    "ENV_VAR",
    "IMPLEMENTATION",
    "READER",
    "READ_PATH",
    "RECV_STAMPED",
    "SETTINGS",
    "CommonPush",
    "Reader",
    "chat_content_events",
    "choose",
    "chunked_data_events",
    "common_push",
    "common_reader",
    "compiled_module",
    "setting",
    "whole_chunks",
    "whole_data_events",
]

#: The switch: which read path labkit runs (`SETTINGS`); the event loop's timed ``select()``,
#: its own extension (`loopclock`, `_loopclock.c`), is switched by the same variable.
ENV_VAR = "LABKIT_READPATH"
#: `ENV_VAR`'s values: ``auto`` (the default: C where built, else Python), ``c`` (C, an
#: error where not built) and ``python`` (the Python twins, the extension not loaded).
Setting = Literal["auto", "c", "python"]
SETTINGS: tuple[Setting, ...] = ("auto", "c", "python")


def setting(value: str | None) -> Setting:
    """`ENV_VAR`'s value as a setting (unset or empty: ``auto``); ConfigError, naming the
    variable and the values it takes, for anything else."""
    if value is None or value == "":
        return "auto"
    for known in SETTINGS:
        if value == known:
            return known
    raise ConfigError(
        f"{ENV_VAR}={value!r} is not a read path: use 'c', 'python' or 'auto' (the default, "
        "unset: C where labkit was built with it, else Python)"
    )


def compiled_module() -> tuple[Any | None, str | None]:
    """The built extension (`labkit.wire._readpath`) and None, or None and why it did not
    load; loaded whatever the switch says (the tests and benchmarks set it beside the
    Python twins)."""
    try:
        return importlib.import_module("labkit.wire._readpath"), None
    except ImportError as exc:
        return None, f"{type(exc).__name__}: {exc}"


def choose(wanted: Setting, built: bool, not_built: str | None) -> ReadPathManifest:
    """The read path for a setting and whether the extension loaded (else `not_built` says
    why); ConfigError for ``c`` without the extension."""
    if wanted == "python":
        return ReadPathManifest(
            implementation="python", reason="switched_off", detail=f"{ENV_VAR}=python"
        )
    if not built:
        if wanted == "c":
            raise ConfigError(
                f"{ENV_VAR}=c but labkit was installed without its C read path ({not_built}); "
                "reinstall it with a C compiler and Python's headers, or unset the variable"
            )
        return ReadPathManifest(implementation="python", reason="not_built", detail=not_built)
    return ReadPathManifest(implementation="c", reason=None, detail=None)


_SETTING = setting(os.environ.get(ENV_VAR))
_C, _NOT_BUILT = (None, None) if _SETTING == "python" else compiled_module()
#: The read path this process runs, and why Python where it does (a run's manifest).
READ_PATH = choose(_SETTING, _C is not None, _NOT_BUILT)

#: Which read path runs: ``"c"`` (labkit built with `_readpath`) or ``"python"``.
IMPLEMENTATION: Literal["c", "python"] = READ_PATH.implementation

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


RECV_STAMPED: RecvStamped | None = _C.recv_stamped if _C is not None else None

#: The framing's common case: Python whatever the read path (`py_whole_chunks`).
whole_chunks: Callable[[bytes], bytes | None] = py_whole_chunks

whole_data_events: Callable[[bytes, int, int, Any], list[Any] | None] = (
    _C.whole_data_events if _C is not None else py_whole_data_events
)


def py_chunked_data_events(data: bytes, limit: int, t_ns: int, event_type: Any) -> list[Any] | None:
    """The events of a read as it came off a chunked body: whole non-empty chunks
    (`whole_chunks`) whose payload is whole one-line ``data:`` events
    (`whole_data_events`); None where either is not so. Each step in C where it is.

    The framing's and the SSE split's common cases in one call, for a reader that takes a
    chunked body's read as it came (`SSEParser.feed_whole_chunks`); `chunked_data_events`
    is it in C where built (issue 47: three Python frames and a payload copy less a read)."""
    payload = whole_chunks(data)
    return None if payload is None else whole_data_events(payload, limit, t_ns, event_type)


#: `py_chunked_data_events`, in C where labkit runs its C read path (one call for the
#: framing and the split of a pushed read, the payload split where it lies): the name a
#: reader binds.
chunked_data_events: Callable[[bytes, int, int, Any], list[Any] | None] = (
    _C.chunked_data_events if _C is not None else py_chunked_data_events
)


# --- The common chat chunk (issue 47) ----------------------------------------------------

#: At most this many events a read take the common chat path (a read of more goes the
#: general way): the C version keeps them on its stack.
MAX_COMMON_EVENTS = 256
_WS = b" \t\n\r"
_SIMPLE_ESCAPES = {
    ord('"'): '"',
    ord("\\"): "\\",
    ord("/"): "/",
    ord("b"): "\b",
    ord("f"): "\f",
    ord("n"): "\n",
    ord("r"): "\r",
    ord("t"): "\t",
}
_HEX = frozenset(b"0123456789abcdefABCDEF")
_CHUNK_KEYS = (
    b"id",
    b"object",
    b"created",
    b"model",
    b"system_fingerprint",
    b"choices",
    b"service_tier",
    b"obfuscation",
    b"usage",
)
_CHOICE_KEYS = (b"index", b"delta", b"logprobs", b"finish_reason")
_NUMBER_END = frozenset(b".eE0123456789")


class _NotCommon(Exception):
    """The read is not the common chat read: the general path takes it."""


def _skip_ws(data: bytes, at: int, end: int) -> int:
    while at < end and data[at] in _WS:
        at += 1
    return at


def _expect(data: bytes, at: int, end: int, word: bytes) -> int:
    at = _skip_ws(data, at, end)
    if data[at : at + len(word)] != word or at + len(word) > end:
        raise _NotCommon
    return at + len(word)


def _hex4(data: bytes, at: int, end: int) -> int:
    """The code unit of a ``\\uXXXX`` escape at `at`, or -1 where there is none."""
    digits = data[at + 2 : at + 6]
    if end - at < 6 or data[at : at + 2] != b"\\u" or not all(d in _HEX for d in digits):
        return -1
    return int(digits, 16)


def _scan_string(data: bytes, at: int, end: int, ascii_only: bool) -> tuple[int, bool]:
    """A JSON string from the byte after its opening quote: the byte after its closing
    quote and whether it holds an escape (`_NotCommon` for what the C scanner refuses: a
    raw control character, a bad escape or a lone surrogate, a byte over 0x7f where
    `ascii_only`)."""
    escaped = False
    while at < end:
        c = data[at]
        if c == 0x22:
            return at + 1, escaped
        if c < 0x20 or (c >= 0x80 and ascii_only):
            raise _NotCommon
        if c == 0x5C:
            if at + 1 >= end:
                raise _NotCommon
            escaped = True
            kind = data[at + 1]
            if kind in _SIMPLE_ESCAPES:
                at += 2
                continue
            code = _hex4(data, at, end)
            if code < 0 or 0xDC00 <= code <= 0xDFFF:
                raise _NotCommon
            if 0xD800 <= code <= 0xDBFF:  # a high surrogate: its low one must follow
                if not 0xDC00 <= _hex4(data, at + 6, end) <= 0xDFFF:
                    raise _NotCommon
                at += 6
            at += 6
            continue
        at += 1
    raise _NotCommon


def _scan_scalar(data: bytes, at: int, end: int) -> int:
    """An ignored value (a plain ASCII string, an integer of at most 18 characters, null,
    true, false): the byte after it."""
    if at >= end:
        raise _NotCommon
    c = data[at]
    if c == 0x22:
        return _scan_string(data, at + 1, end, True)[0]
    if c == ord("-") or 0x30 <= c <= 0x39:
        q = at + 1 if c == ord("-") else at
        if q >= end or not 0x30 <= data[q] <= 0x39:
            raise _NotCommon
        if data[q] == 0x30:
            q += 1
        else:
            while q < end and 0x30 <= data[q] <= 0x39:
                q += 1
        if q - at > 18 or (q < end and data[q] in _NUMBER_END):
            raise _NotCommon
        return q
    for word in (b"null", b"true", b"false"):
        if data.startswith(word, at) and at + len(word) <= end:
            return at + len(word)
    raise _NotCommon


def _scan_key(data: bytes, at: int, end: int, names: tuple[bytes, ...]) -> tuple[int, int]:
    """An object key (plain ASCII, no escape) that is one of `names`: its index and the
    first byte of its value (past the colon and whitespace)."""
    at = _skip_ws(data, at, end)
    if at >= end or data[at] != 0x22:
        raise _NotCommon
    q = at + 1
    while q < end and data[q] != 0x22 and data[q] != 0x5C and 0x20 <= data[q] < 0x80:
        q += 1
    if q >= end or data[q] != 0x22:
        raise _NotCommon
    try:
        key = names.index(data[at + 1 : q])
    except ValueError:
        raise _NotCommon from None
    return key, _skip_ws(data, _expect(data, q + 1, end, b":"), end)


def _next_member(data: bytes, at: int, end: int) -> tuple[int, bool]:
    """After a member's value: the byte after its ',' (True) or '}' (False)."""
    at = _skip_ws(data, at, end)
    if at >= end or data[at] not in b",}":
        raise _NotCommon
    return at + 1, data[at] == 0x2C


def _scan_choices(data: bytes, at: int, end: int) -> tuple[int, tuple[int, int, bool]]:
    """``[{"index": 0, "delta": {"content": "..."}, "logprobs": null, "finish_reason":
    null}]``: the byte after it and the content's span (start, stop, escaped)."""
    at = _expect(data, _expect(data, at, end, b"["), end, b"{")
    seen: set[int] = set()
    span: tuple[int, int, bool] | None = None
    more = True
    while more:
        key, at = _scan_key(data, at, end, _CHOICE_KEYS)
        if key in seen:
            raise _NotCommon
        seen.add(key)
        if key == 0:
            if at >= end or data[at] != 0x30:
                raise _NotCommon
            at += 1
            if at < end and data[at] in _NUMBER_END:
                raise _NotCommon
        elif key == 1:
            at = _expect(data, at, end, b"{")
            _, at = _scan_key(data, at, end, (b"content",))
            if at >= end or data[at] != 0x22:
                raise _NotCommon
            stop, escaped = _scan_string(data, at + 1, end, False)
            span = (at + 1, stop - 1, escaped)
            at = _expect(data, stop, end, b"}")
        else:
            if not data.startswith(b"null", at) or at + 4 > end:
                raise _NotCommon
            at += 4
        at, more = _next_member(data, at, end)
    if span is None:
        raise _NotCommon
    return _expect(data, at, end, b"]"), span


def _common_event(
    data: bytes, at: int, end: int, fingerprint: bytes | None
) -> tuple[int, int, bool] | None:
    """One event's data: None for ``[DONE]``, the content's span for the common chunk."""
    if data[at:end] == b"[DONE]":
        return None
    at = _expect(data, at, end, b"{")
    seen: set[int] = set()
    span: tuple[int, int, bool] | None = None
    more = True
    while more:
        key, at = _scan_key(data, at, end, _CHUNK_KEYS)
        if key in seen:
            raise _NotCommon
        seen.add(key)
        if key == 0:
            if at >= end or data[at] != 0x22:
                raise _NotCommon
            at = _scan_string(data, at + 1, end, True)[0]
        elif key == 4:
            if data.startswith(b"null", at) and at + 4 <= end:
                at += 4
            else:
                if fingerprint is None or at >= end or data[at] != 0x22:
                    raise _NotCommon
                stop, escaped = _scan_string(data, at + 1, end, True)
                if escaped or data[at + 1 : stop - 1] != fingerprint:
                    raise _NotCommon
                at = stop
        elif key == 5:
            at, span = _scan_choices(data, at, end)
        elif key == 8:  # usage: null (the usage chunk itself goes the general way)
            if not data.startswith(b"null", at) or at + 4 > end:
                raise _NotCommon
            at += 4
        else:
            at = _scan_scalar(data, at, end)
        at, more = _next_member(data, at, end)
    if span is None or _skip_ws(data, at, end) != end:
        raise _NotCommon
    return span


def _content_text(data: bytes, start: int, stop: int, escaped: bool) -> str:
    """A content span as json.loads reads it (UnicodeDecodeError where it is not UTF-8)."""
    raw = data[start:stop]
    if not escaped:
        return raw.decode("utf-8")
    out = bytearray()
    at = 0
    while at < len(raw):
        c = raw[at]
        if c != 0x5C:
            out.append(c)
            at += 1
        elif raw[at + 1] == ord("u"):
            code = int(raw[at + 2 : at + 6], 16)
            at += 6
            if 0xD800 <= code <= 0xDBFF:  # with its low surrogate
                code = 0x10000 + ((code - 0xD800) << 10) + int(raw[at + 2 : at + 6], 16) - 0xDC00
                at += 6
            out += chr(code).encode("utf-8")
        else:
            out += _SIMPLE_ESCAPES[raw[at + 1]].encode()
            at += 2
    return out.decode("utf-8")


def py_chat_content_events(
    data: bytes, limit: int, t_ns: int, parser: Any, output_ns: list[int]
) -> int | None:
    """The Python twin of the C ``chat_content_events``, for the commonest read of all, a
    token of a Chat Completions stream (issue 47): a pushed read (chunk framing and all) of
    whole one-line ``data:`` events, each ``[DONE]`` or the plain Chat Completions content
    chunk, framed, split, decoded and classified in one call, with the parser's response id
    already set; each non-empty content appended to ``parser.text_parts`` and `t_ns` to
    `output_ns` once for it, answering texts × 2 + (1 where ``[DONE]`` came). None, with
    nothing consumed, for any other read (the general path reads it: a parser names the
    shape it can take, `labkit.providers.base.StreamParser.common_chunk`, `common_reader`)."""
    if parser.response_id is None:
        return None
    fingerprint_str = parser.system_fingerprint
    fingerprint: bytes | None = None
    if type(fingerprint_str) is str:
        try:
            fingerprint = fingerprint_str.encode("utf-8")
        except UnicodeEncodeError:
            fingerprint = None
    payload = whole_chunks(data)
    if payload is None:
        return None
    if payload[-2:] != b"\n\n" or b"\r" in payload:
        return None
    done = 0
    texts: list[str] = []
    parts = payload[:-2].split(b"\n\n")
    if len(parts) > MAX_COMMON_EVENTS:
        return None
    try:
        spans = []
        at = 0
        for part in parts:
            if part[:6] != b"data: " or b"\n" in part or len(part) > limit:
                return None
            spans.append(_common_event(payload, at + 6, at + len(part), fingerprint))
            at += len(part) + 2
        for span in spans:
            if span is None:
                done = 1
            elif span[1] > span[0]:
                texts.append(_content_text(payload, *span))
    except (_NotCommon, UnicodeDecodeError):
        return None
    text_parts = parser.text_parts
    if type(text_parts) is not list:
        return None
    for text in texts:
        text_parts.append(text)
        output_ns.append(t_ns)
    return len(texts) * 2 + done


ChatContentEvents = Callable[[bytes, int, int, Any, list[int]], int | None]

#: `py_chat_content_events`, in C where labkit runs its C read path: the name a reader binds.
chat_content_events: ChatContentEvents = (
    _C.chat_content_events if _C is not None else py_chat_content_events
)

#: `StreamParser.common_chunk`'s name for the plain Chat Completions content chunk.
CHAT_CONTENT = "chat.content"

#: Each common chunk a parser may name and the step that reads a pushed read of them in
#: one call (`common_reader`). A test empties it to hold records to the general path.
COMMON_CHUNKS: dict[str, ChatContentEvents] = {CHAT_CONTENT: chat_content_events}


def common_reader(spec: str | None) -> ChatContentEvents | None:
    """The one-call reader of a parser's common chunk (`StreamParser.common_chunk`), in C
    where the read path is; None where the parser names none or one not known here."""
    return None if spec is None else COMMON_CHUNKS.get(spec)


class CommonPush(Protocol):
    """A pushed stream's common reads taken whole (`_readpath.CommonPush`, C only): built by
    the reader with what a common read updates (its parser, output stamps, measurement and
    read stamps), then the lean connection's reader callback for one push (`attach`). Each
    call reads once and takes a common read itself (while the connection's ``framed_sink``
    is set and `enabled`); anything else goes to ``on_other``: True (a common read that
    ended the stream), ``(data, t_ns, seen_ns, kernel_stamped)`` with nothing consumed (any
    other read, the peer's close) or the exception raised. The same records as the general
    path (tests/wire/test_common_push.py, tests/wire/lean/test_push_records.py)."""

    enabled: int
    last_t: int

    @property
    def t(self) -> int:
        """The latest read's stamp."""

    @property
    def seen(self) -> int:
        """When labkit saw the latest read."""

    @property
    def kernel(self) -> int:
        """Whether the kernel stamped the latest read."""

    @property
    def took_latest(self) -> int:
        """Whether the latest read was taken here."""

    @property
    def parse_ns(self) -> int:
        """The reads' parse time taken here (ns)."""

    @property
    def terminator_ns(self) -> int:
        """The stamp of the read that ended the stream here, or -1."""

    @property
    def deadline_ns(self) -> int:
        """The latest read's seen_ns plus the timeout (0: none yet)."""

    @property
    def taken(self) -> int:
        """The reads taken here."""

    def attach(
        self,
        fd: int,
        ancillary_size: int,
        stamp_type: int,
        stamp_unit: int,
        last_t: int,
        timeout_ns: int,
        connection: Any,
        on_other: Callable[[Any], None],
    ) -> None:
        """Bind to a connection for one push (`timeout_ns` -1: none)."""

    def detach(self) -> None:
        """Let go of the connection (no more reads)."""

    def __call__(self) -> None:
        """Read once; take a common read, or hand anything else to ``on_other``."""


class Reader(Protocol):
    """A lean connection's one reader callback (`_readpath.Reader(fallback)`, C only): its
    `common` `CommonPush` while one is set (a pushed stream), else ``fallback()``; a push
    attaches by setting `common`, not by registering anew with the loop."""

    common: CommonPush | None

    def __call__(self) -> None:
        """The push's `common` read, or ``fallback()`` where none is set."""


#: `Reader`'s type where the C read path runs, else None (the connection registers its
#: Python reader itself).
READER: Callable[[Callable[[], None]], Reader] | None = None if _C is None else _C.Reader


#: Each one-call reader of a common chunk and the type that also reads the socket for it in
#: the reader callback; C only (the Python path keeps the two apart). Tests wrap it.
COMMON_PUSHES: dict[Any, Callable[..., CommonPush]] = (
    {} if _C is None else {_C.chat_content_events: _C.CommonPush}
)


def common_push(
    reader: ChatContentEvents | None,
    parser: Any,
    output_ns: list[int],
    limit: int,
    measurement: Any,
    read_stamps: list[int] | None,
    read_seen: list[int],
    read_kernel: list[bool],
    read_windows: dict[int, tuple[int, int, bool]] | None,
    window_before: Callable[[int], Any] | None,
) -> CommonPush | None:
    """The `CommonPush` for a common reader (`common_reader`), None where it has none."""
    make = None if reader is None else COMMON_PUSHES.get(reader)
    if make is None:
        return None
    return make(
        parser,
        output_ns,
        limit,
        measurement,
        read_stamps,
        read_seen,
        read_kernel,
        read_windows,
        window_before,
    )
