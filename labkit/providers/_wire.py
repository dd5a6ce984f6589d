"""Reading values off the wire: each checks the JSON type it was given, cheaply.

The parsers call these where they read a field, so a value of the wrong type becomes a
`MalformedStream` naming the field and what arrived, never a TypeError deep in labkit.
Plain ``type(x) is ...`` checks: this runs on the per-event path (no pydantic per event).
"""

from __future__ import annotations

import json
import math
from typing import Any

from labkit.errors import MalformedStream
from labkit.wire import fastjson

__all__ = [
    "describe",
    "load_event_object",
    "wire_count",
    "wire_id",
    "wire_list",
    "wire_number",
    "wire_object",
    "wire_str",
]


def load_event_object(data: str) -> dict[str, Any]:
    """The JSON object one event carries; `MalformedStream` for anything else.

    Undecodable JSON, JSON nested too deeply for the decoder (RecursionError) and JSON that
    is not an object are malformed streams, each named with what arrived.
    """
    try:
        obj = _FAST(data)
    except Exception:  # what the fast decoder refuses, json decides
        obj = _decode_or_name(data)
    if type(obj) is not dict:
        raise MalformedStream(f"event data is a JSON {type(obj).__name__}, not an object")
    return obj


_FAST = fastjson.FAST


def _decode_or_name(data: str) -> Any:
    """`json.loads` decides what the fast decoder refused: a value, or a `MalformedStream`
    naming why not."""
    try:
        return json.loads(data)
    except ValueError as exc:
        msg = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
        raise MalformedStream(f"event data is not JSON: {msg} ({describe(data)})") from None
    except RecursionError:
        raise MalformedStream("event data is JSON nested too deeply to decode") from None


def wire_count(value: Any, field: str) -> int | None:
    """A token count: a non-negative int (a bool is not one), or None when absent or null."""
    if value is None:
        return None
    if type(value) is not int or value < 0:
        raise MalformedStream(f"{field} is {describe(value)}, not a non-negative integer")
    return value


def wire_number(value: Any, field: str) -> float | None:
    """A duration or rate: an int or float (not a bool), or None when absent or null."""
    if value is None:
        return None
    kind = type(value)
    if kind is not float and kind is not int:
        raise MalformedStream(f"{field} is {describe(value)}, not a number")
    try:
        number = float(value)
    except OverflowError:  # an integer past float range is no duration either
        return None
    return number if math.isfinite(number) else None  # `1e400` parses as infinity: no value


def wire_str(value: Any, field: str) -> str | None:
    """A reason or label: a string, or None when absent or null."""
    if value is None or type(value) is str:
        return value
    raise MalformedStream(f"{field} is {describe(value)}, not a string")


def wire_id(value: Any, field: str) -> str | None:
    """An identifier: a string as sent; an integer is kept as its decimal string (some
    compatible servers number their responses); anything else is malformed."""
    if value is None or type(value) is str:
        return value
    if type(value) is int:
        return str(value)
    raise MalformedStream(f"{field} is {describe(value)}, not a string")


def wire_object(value: Any, field: str) -> dict[str, Any] | None:
    """A nested object, or None when absent or null."""
    if value is None or type(value) is dict:
        return value
    raise MalformedStream(f"{field} is {describe(value)}, not an object")


def wire_list(value: Any, field: str) -> list[Any] | None:
    """A nested array, or None when absent or null."""
    if value is None or type(value) is list:
        return value
    raise MalformedStream(f"{field} is {describe(value)}, not an array")


def describe(value: Any) -> str:
    """What arrived, briefly: its JSON-ish type and a short excerpt."""
    text = repr(value)
    if len(text) > 40:
        text = text[:37] + "..."
    return f"{type(value).__name__} {text}"
