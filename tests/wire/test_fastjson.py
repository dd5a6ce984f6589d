"""labkit.fastjson: msgspec's speed, json's answers — the same value or the same exception,
with msgspec installed or not."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from labkit.errors import MalformedStream
from labkit.providers import _wire
from labkit.providers._wire import load_event_object
from labkit.wire import fastjson

pytestmark = pytest.mark.unit

DEEP = "[" * 100_000 + "]" * 100_000

# Inputs msgspec refuses or reads differently from orjson, each with json's own answer.
EDGE_CASES = [
    '{"a": NaN}',
    '{"a": -Infinity, "b": Infinity}',
    '{"a": 1e400}',
    f'{{"a": {10**30}}}',
    f'{{"a": {-(2**63) - 1}}}',
    '{"a": 18446744073709551616}',
    '{"a": 1, "a": 2}',
    '{"a": "\\ud800"}',
    '{"a": "\\ud83d\\ude00"}',
    "[" * 900 + "]" * 900,
    '{"a": 0.1000000000000000055511151231257827, "b": -0.0, "c": 1E5}',
]

BAD = ["", "{not json", '{"a": 1} x', '{"a": "\x01"}', "\ufeff{}", '{"a": "\\x"}', DEEP]


def outcome(data: str) -> tuple[str, str]:
    """What decoding gives: the value's exact JSON text and type, or the exception."""
    try:
        value = fastjson.loads(data)
    except (ValueError, RecursionError) as exc:
        return type(exc).__name__, str(exc)
    return type(value).__name__, json.dumps(value)


def json_outcome(data: str) -> tuple[str, str]:
    try:
        value = json.loads(data)
    except (ValueError, RecursionError) as exc:
        return type(exc).__name__, str(exc)
    return type(value).__name__, json.dumps(value)


@pytest.fixture(params=["msgspec", "json"])
def decoder(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each test runs with msgspec (where installed) and with the pure-json fallback."""
    if request.param == "json":
        monkeypatch.setattr(fastjson, "_fast", None)
        monkeypatch.setattr(_wire, "_FAST", json.loads)  # the per-event path calls msgspec itself
    elif fastjson.DECODER != "msgspec":
        pytest.fail("msgspec is a labkit dependency: install it")
    return str(request.param)


@pytest.mark.parametrize("data", EDGE_CASES + BAD)
def test_every_edge_case_decodes_exactly_as_json_does(decoder: str, data: str) -> None:
    assert outcome(data) == json_outcome(data)


def test_huge_integers_stay_exact_integers(decoder: str) -> None:
    value = fastjson.loads('{"n": 123456789012345678901234567890}')
    assert value == {"n": 123456789012345678901234567890} and type(value["n"]) is int


def test_bytes_decode_like_json_too(decoder: str) -> None:
    assert fastjson.loads(b'{"a": [1, 2.5, "\xc3\xa9"]}') == {"a": [1, 2.5, "é"]}


json_values: Any = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**40), max_value=10**40)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=12,
)


@settings(max_examples=300)
@given(value=json_values, ascii_only=st.booleans())
def test_any_value_json_writes_reads_back_as_json_reads_it(value: Any, ascii_only: bool) -> None:
    data = json.dumps(value, ensure_ascii=ascii_only)
    assert outcome(data) == json_outcome(data)


@settings(max_examples=500)
@given(data=st.text(alphabet='{}[]":,0123456789.eE+-\\/uabfnrtlsNIy \t\n\x00\x7fé\ud800'))
def test_any_fragment_decodes_or_fails_exactly_as_json_does(data: str) -> None:
    assert outcome(data) == json_outcome(data)


@pytest.mark.parametrize("data", [d for d in EDGE_CASES if d.startswith("{")])
def test_an_event_object_decodes_exactly_as_json_does(decoder: str, data: str) -> None:
    value = load_event_object(data)
    assert (type(value).__name__, json.dumps(value)) == json_outcome(data)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ("{not json", "event data is not JSON: Expecting property name enclosed in double"),
        (DEEP, "event data is JSON nested too deeply to decode"),
        ("[1, 2]", "event data is a JSON list, not an object"),
    ],
)
def test_malformed_events_read_the_same_with_either_decoder(
    decoder: str, data: str, message: str
) -> None:
    with pytest.raises(MalformedStream) as caught:
        load_event_object(data)
    assert str(caught.value).startswith(message)
