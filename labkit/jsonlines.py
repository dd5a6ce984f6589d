"""Reading JSON Lines files that may come from anywhere (a truth log, a schedule file, an
agent trace) one line at a time: memory bounded by the longest line allowed, never by the file;
every way a line can be wrong is one `ConfigError` line naming ``file:line`` (a leaf module:
imports only labkit.errors and pydantic). A reader that may stop early reads in
``with contextlib.closing(...)``, so the file is closed at once. Refused, each with its reason:
a line longer than the cap, bytes that are not UTF-8, text that is not JSON, ``NaN``,
``Infinity`` and ``1e999`` (JSON has no such numbers; Python's decoder takes them), and nesting
deeper than `MAX_DEPTH` (checked before decoding, so the decoder never recurses into a
RecursionError). `loads_strict` is the one strict decoder, for a document read whole too (a
peer's results file).
"""

from __future__ import annotations

import contextlib
import json
import math
import re
from collections.abc import Generator
from pathlib import Path
from typing import Any, BinaryIO

from pydantic import ValidationError

from labkit.errors import ConfigError

__all__ = [
    "MAX_DEPTH",
    "MAX_LINE_BYTES",
    "JsonLine",
    "RawLine",
    "iter_json_lines",
    "iter_lines",
    "loads_strict",
    "one_line",
]

#: The longest line read (bytes): a truth record of a 100,000-token reply with sampling
#: steps is about 10 MB.
MAX_LINE_BYTES = 64 * 1024 * 1024
#: The deepest nesting of arrays and objects in one line (labkit's own lines nest 4 deep).
MAX_DEPTH = 64

_BRACKETS = re.compile(rb'[\[\]{}"\\]')


def _too_deep(line: bytes, limit: int) -> bool:
    """Whether `line` nests arrays and objects deeper than `limit` (brackets in strings
    skipped; one pass over the line's brackets and quotes)."""
    if line.count(b"[") + line.count(b"{") <= limit:
        return False
    depth = 0
    in_string = escaped = False
    last = -1
    for match in _BRACKETS.finditer(line):
        char = match.group()
        if in_string:
            if escaped and match.start() == last + 1:
                escaped = False  # this character is the escaped one
            elif char == b"\\":
                escaped = True
            else:
                escaped = False
                in_string = char != b'"'
            last = match.start()
            continue
        if char == b'"':
            in_string, escaped = True, False
        elif char in b"[{":
            depth += 1
            if depth > limit:
                return True
        elif char in b"]}":
            depth -= 1
        last = match.start()
    return False


class _NotFinite(ValueError):
    """A JSON number that is not finite (NaN, Infinity, 1e999)."""


def _no_constant(name: str) -> Any:
    raise _NotFinite(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NotFinite(f"{text[:40]} is not a finite number")
    return value


def loads_strict(text: str, where: str, *, document: bool = False) -> Any:
    """`text` as JSON, strictly: NaN, Infinity and numbers out of a float's range refused,
    nesting too deep for the decoder refused; every fault one ConfigError ``where: reason``
    (`document`: `where` gains the line of the fault, for a file that is one document)."""
    try:
        return json.loads(text, parse_constant=_no_constant, parse_float=_finite_float)
    except json.JSONDecodeError as exc:
        where += f":{exc.lineno}" if document else ""
        raise ConfigError(f"{where}: not JSON ({exc.msg}, column {exc.colno})") from None
    except RecursionError:
        raise ConfigError(f"{where}: JSON nested too deeply") from None
    except ValueError as exc:  # _NotFinite, an integer of too many digits
        raise ConfigError(f"{where}: not JSON ({str(exc).splitlines()[0][:120]})") from None


class RawLine:
    """One line's bytes (UTF-8), its number (1-based), and whether it lacks its newline at
    the end of the file (`cut`)."""

    __slots__ = ("cut", "data", "number")

    def __init__(self, number: int, data: bytes, cut: bool) -> None:
        self.number = number
        self.data = data
        self.cut = cut


class JsonLine:
    """One decoded line: its number (1-based) and its value."""

    __slots__ = ("number", "value")

    def __init__(self, number: int, value: Any) -> None:
        self.number = number
        self.value = value


def iter_lines(
    path: Path, what: str, *, max_line_bytes: int = MAX_LINE_BYTES, last_may_be_cut: bool = False
) -> Generator[RawLine, None, None]:
    """Each non-blank line of `path` as UTF-8 bytes, undecoded (for a parser of its own,
    such as pydantic's ``model_validate_json``); ConfigError ``path:line: reason`` for a line
    too long or not UTF-8. `what` names the file in messages ("truth log"). `last_may_be_cut`:
    a last line without its newline is marked `cut` (a writer killed mid-line)."""
    try:
        file = path.open("rb")  # here, not in the generator: a missing file fails at the call
    except OSError as exc:
        raise ConfigError(f"cannot read the {what} {path}: {exc.strerror or exc}") from None
    return _lines(file, path, what, max_line_bytes, last_may_be_cut)


def _lines(
    file: BinaryIO, path: Path, what: str, max_line_bytes: int, last_may_be_cut: bool
) -> Generator[RawLine, None, None]:
    with file:
        number = 0
        while True:
            try:
                raw = file.readline(max_line_bytes + 1)
            except OSError as exc:
                raise ConfigError(f"cannot read the {what} {path}: {exc.strerror or exc}") from None
            if not raw:
                return
            number += 1
            if len(raw) > max_line_bytes:
                raise ConfigError(
                    f"{path}:{number}: a line longer than {max_line_bytes} bytes; not a {what}"
                )
            if not raw.strip():
                continue
            cut = last_may_be_cut and not raw.endswith(b"\n")
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                if not cut:
                    raise ConfigError(
                        f"{path}:{number}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at "
                        f"column {exc.start + 1})"
                    ) from None
            yield RawLine(number, raw, cut)


def iter_json_lines(
    path: Path, what: str, *, max_line_bytes: int = MAX_LINE_BYTES
) -> Generator[JsonLine, None, None]:
    """Each non-blank line of `path` decoded (`what` names the file in messages: "schedule
    file"); ConfigError ``path:line: reason`` on the first bad one."""
    return _json_lines(iter_lines(path, what, max_line_bytes=max_line_bytes), path)


def _json_lines(
    lines: Generator[RawLine, None, None], path: Path
) -> Generator[JsonLine, None, None]:
    with contextlib.closing(lines):  # the file is closed when this generator is
        for line in lines:
            yield JsonLine(line.number, _decode(line.data, path, line.number))


def _decode(raw: bytes, path: Path, number: int) -> Any:
    if _too_deep(raw, MAX_DEPTH):
        raise ConfigError(f"{path}:{number}: JSON nested deeper than {MAX_DEPTH} levels")
    return loads_strict(raw.decode("utf-8"), f"{path}:{number}")  # UTF-8 checked by iter_lines


def one_line(exc: ValidationError) -> str:
    """A pydantic error as one line: the first problem's field path and message, and how
    many more there are (never the value itself: it may be long, or a secret)."""
    errors = exc.errors()
    if not errors:
        return "not valid"
    first = errors[0]
    where = ".".join(str(p) for p in first["loc"])
    more = f" (and {len(errors) - 1} more problems)" if len(errors) > 1 else ""
    return f"{where}: {first['msg']}{more}" if where else f"{first['msg']}{more}"
