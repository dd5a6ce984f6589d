"""A streamed token's read steps, in C where labkit was built with it, else in Python.

One token is one socket read on the lean transport, and its steps run cold between context
switches: the read and its kernel stamp (`tcp.Connection`), its chunk framing
(`whole_chunks`) and its SSE split (`whole_data_events`). `_readpath.c` does the common case
of the read (`RECV_STAMPED`) and of the SSE split in one call each (setup.py builds it on
Linux; a build without a compiler skips it) and answers None for anything else, which the
Python code then reads its general way. Both give the same answers
(tests/wire/test_readpath.py); `READ_PATH` says which runs and why.
`chunked_data_events` does the framing's and the SSE split's common cases in one call, for
a reader that takes a chunked body's read as it came (`SSEParser.feed_whole_chunks`): in C
where built (issue 47: three Python frames and a payload copy less a read).

The framing alone (`whole_chunks`, for the body's own decoder) and the event loop's timed
``select()`` (`loopclock.TimedSelector`) are Python whatever the setting: their C versions
saved some 1 and 0.3 µs a token, within the noise of a 32-stream level on the 2-core host
(docs/accuracy.md, `make bench-readpath`), and the select's read CPython's private selector
attributes.

``LABKIT_READPATH`` (read once, at import) chooses: unset or ``auto``, C where built, else
Python; ``c``, C or an error where it is not built; ``python``, the Python twin of every C
step even where the extension is built (the extension is then not loaded). Any other value is
a `ConfigError`. Worker processes inherit the variable; Ray actors get it in their
``runtime_env``, and every worker is held to the runner's read path (`labkit.runner`).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from typing import Any, Literal

from labkit.errors import ConfigError
from labkit.manifest import ReadPathManifest

__all__ = [
    "ENV_VAR",
    "IMPLEMENTATION",
    "READ_PATH",
    "RECV_STAMPED",
    "SETTINGS",
    "choose",
    "chunked_data_events",
    "compiled_module",
    "setting",
    "whole_chunks",
    "whole_data_events",
]

#: The switch: which read path labkit runs (`SETTINGS`).
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
    (`whole_data_events`); None where either is not so. Each step in C where it is."""
    payload = whole_chunks(data)
    return None if payload is None else whole_data_events(payload, limit, t_ns, event_type)


#: `py_chunked_data_events`, in C where labkit runs its C read path (one call for the
#: framing and the split of a pushed read, the payload split where it lies): the name a
#: reader binds.
chunked_data_events: Callable[[bytes, int, int, Any], list[Any] | None] = (
    _C.chunked_data_events if _C is not None else py_chunked_data_events
)
