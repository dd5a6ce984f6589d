"""Any JSON value in any field of any corpus event: a parser either reads it or raises
`MalformedStream`, never a TypeError, KeyError or AttributeError (which the recorder would
have to call labkit's own bug)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from labkit.errors import MalformedStream
from labkit.providers.base import Provider, StreamParser
from labkit.wire.sse import SSEEvent
from tests.providers.streams import make_provider
from tests.providers.streams.corpus import Fixture, load_corpus

pytestmark = pytest.mark.unit

READABLE = [f for f in load_corpus() if f.expect["error_kind"] != "protocol"]

JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-3, 10**12)
    | st.floats(allow_nan=False)
    | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=6,
)


def _paths(obj: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in `obj` a value sits (dict keys and list indexes)."""
    out = [prefix] if prefix else []
    if isinstance(obj, dict):
        for key, value in obj.items():
            out += _paths(value, (*prefix, key))
    elif isinstance(obj, list):
        for i, value in enumerate(obj):
            out += _paths(value, (*prefix, i))
    return out


def _replaced(obj: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    copy = dict(obj) if isinstance(obj, dict) else list(obj)
    copy[path[0]] = _replaced(obj[path[0]], path[1:], value)
    return copy


def _events(fixture: Fixture) -> list[SSEEvent]:
    _parser(fixture.kind)  # builds the kind's provider, whose framing reads the body
    framer = _PROVIDERS[fixture.kind].new_framer()
    return [*framer.feed(fixture.body, 0), *framer.close()]


_PROVIDERS: dict[str, Provider] = {}


def _parser(kind: str) -> StreamParser:
    """A fresh parser of `kind` (one provider per kind: building one is not free)."""
    if kind not in _PROVIDERS:
        root = kind in ("llamacpp", "ollama")
        base = "http://127.0.0.1:9" if root else "http://127.0.0.1:9/v1"
        _PROVIDERS[kind] = make_provider(kind, api_key="k", base_url=base)
    return _PROVIDERS[kind].new_parser()


@settings(
    max_examples=400,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(data=st.data(), value=JSON_VALUES)
def test_any_value_anywhere_is_read_or_malformed(data: st.DataObject, value: Any) -> None:
    fixture = data.draw(st.sampled_from(READABLE), label="fixture")
    events = _events(fixture)
    json_events = [i for i, e in enumerate(events) if e.data.startswith("{")]
    target = data.draw(st.sampled_from(json_events), label="event")
    obj = json.loads(events[target].data)
    path = data.draw(st.sampled_from(_paths(obj)), label="path")
    events[target] = SSEEvent(events[target].event, json.dumps(_replaced(obj, path, value)), 0)
    parser = _parser(fixture.kind)
    try:
        for event in events:
            parser.on_event(event)
    except MalformedStream as exc:
        assert str(exc)
        return
    # Whatever was read must still be what the record's fields hold.
    assert all(type(part) is str for part in parser.text_parts)
    assert parser.stop_reason_raw is None or type(parser.stop_reason_raw) is str
    assert parser.response_id is None or type(parser.response_id) is str
    for count in (parser.usage.input_tokens, parser.usage.output_tokens):
        assert count is None or (type(count) is int and count >= 0)
    parser.stop_reason()
    parser.streamed_output_tokens(1)
