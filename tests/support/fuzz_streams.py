"""Mutated provider streams for the property tests.

Each strategy starts from a valid stream of one provider kind (a recorded one from
``tests/providers/streams/*.sse`` or one from the builders in ``tests.providers.streams``)
and breaks it the ways
a server, a proxy or a network can: a field changes type or disappears, a value becomes a
10,000-deep ``[[[...]]]``, garbage bytes or invalid UTF-8 land anywhere, the bytes stop at any
point, the connection drops, reads are cut at any boundary. Every stream also echoes the
provider's api key (`PLANTED_KEY`) somewhere: in text, ids, error messages, raw or escaped.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st

from tests.providers.streams import (
    anthropic_events,
    load_sse,
    oa_usage,
    openai_events,
    responses_events,
)

# A key with characters JSON may escape (`/` as `\/`), so an escaped echo differs from the raw.
PLANTED_KEY = "sk-fuzz/PLANTED+secret_0123456789"


def key_renderings(key: str = PLANTED_KEY) -> dict[str, str]:
    """The forms a key takes inside a JSON string on the wire; all decode to the key."""
    return {
        "raw": key,
        "slash-escaped": key.replace("/", "\\/"),
        "unicode-escaped": "".join(f"\\u{ord(c):04x}" for c in key),
    }


def leaked_key_forms(text: str, key: str = PLANTED_KEY) -> list[str]:
    """The renderings of `key` (or of its distinctive tail) found in `text`."""
    tail = key.split("/", 1)[1]
    forms = {**key_renderings(key), **{f"tail {k}": v for k, v in key_renderings(tail).items()}}
    by_form = {form: name for name, form in reversed(forms.items())}  # first name of a form
    return [name for form, name in by_form.items() if form in text]


# --- valid streams, per provider kind --------------------------------------------------------


def _ollama_built(tokens: list[str]) -> bytes:
    """A short `/api/chat` stream: one line per token, then the done object."""
    lines = [{"model": "m", "message": {"role": "assistant", "content": t}} for t in tokens]
    lines.append({"done": True, "done_reason": "stop", "eval_count": 2, "eval_duration": 9000})
    return "".join(json.dumps(o, ensure_ascii=False) + "\n" for o in lines).encode()


_OPENAI_BUILT = b"".join(openai_events(["Hi", " there", " é✓"], usage=oa_usage(5, 3)))
# Beside each kind's text streams, the shapes issue 44 reads by new rules (tool calls
# without arguments, several choices, a gateway's comments), so their fields are mutated too.
VALID_STREAMS: dict[str, list[bytes]] = {
    "openai": [
        load_sse("openai_chat.sse"),
        _OPENAI_BUILT,
        load_sse("corpus/openai_two_choices_interleaved.sse"),
    ],
    "openai_compatible": [
        load_sse("openai_chat.sse"),
        _OPENAI_BUILT,
        load_sse("corpus/gateway_short_answer_hidden_under_64.sse"),
    ],
    "llamacpp": [load_sse("llamacpp_chat.sse"), _OPENAI_BUILT],
    "anthropic": [
        load_sse("anthropic_messages.sse"),
        b"".join(anthropic_events(["Hi", " é✓"])),
        load_sse("corpus/anthropic_tool_use_no_arguments.sse"),
    ],
    "openai_responses": [
        load_sse("corpus/openai_responses_reasoning_summary.sse"),
        b"".join(responses_events(["Hi", " é✓"])),
        load_sse("corpus/openai_responses_function_call_no_arguments.sse"),
    ],
    "ollama": [load_sse("corpus/ollama_thinking.ndjson"), _ollama_built(["Hi", " é✓"])],
}
KINDS = list(VALID_STREAMS)
#: Kinds whose streams are newline-delimited JSON (one object a line), not SSE.
NDJSON_KINDS = frozenset({"ollama"})

# A provider of each kind, as a config would give it; the key is planted in every one.
PROVIDER_SETTINGS: dict[str, dict[str, Any]] = {
    "openai": {"model": "gpt-4.1-mini"},
    "openai_compatible": {"base_url": "http://compat.test:8000/v1", "transport": "httpx"},
    "llamacpp": {"base_url": "http://llama.test:8080", "transport": "httpx"},
    "anthropic": {"model": "claude-haiku-4-5"},
    "openai_responses": {"model": "gpt-5-mini"},
    "ollama": {"base_url": "http://ollama.test:11434", "transport": "httpx"},
}


# --- a stream as events, so that JSON values can be mutated ---------------------------------

_KEY_MARK = "\x00planted key\x00"
_DEEP_MARK = "\x00deep nesting\x00"
DEPTH = 10_000
_DEEP = {
    "list": "[" * DEPTH + "]" * DEPTH,
    "object": '{"a":' * DEPTH + "1" + "}" * DEPTH,
}


@dataclass
class Event:
    """One SSE event: its ``event:`` name and its data, parsed as JSON where it is JSON."""

    name: str | None
    data: Any
    is_json: bool = True


def parse_events(raw: bytes, ndjson: bool = False) -> list[Event]:
    """The events of a valid, LF-framed stream (one JSON object a line when `ndjson`)."""
    if ndjson:
        return [Event(None, json.loads(line)) for line in raw.decode().splitlines() if line]
    events = []
    for block in raw.decode().split("\n\n"):
        name, data = None, []
        for line in block.splitlines():
            if line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].lstrip())
        if data:
            text = "\n".join(data)
            try:
                events.append(Event(name, json.loads(text)))
            except ValueError:
                events.append(Event(name, text, is_json=False))  # [DONE]
    return events


@dataclass
class Rendering:
    """How the marks planted in the events are written out."""

    key_form: str = "raw"
    deep_form: str = "list"


def render(events: list[Event], newline: str, how: Rendering, ndjson: bool = False) -> bytes:
    """The stream's bytes, with the planted key and the deep nesting written in."""
    key_json = json.dumps(_KEY_MARK)[1:-1]
    deep_json = json.dumps(_DEEP_MARK)
    out = []
    for ev in events:
        data = json.dumps(ev.data, ensure_ascii=False) if ev.is_json else str(ev.data)
        data = data.replace(deep_json, _DEEP[how.deep_form])
        data = data.replace(key_json, key_renderings()[how.key_form])
        if ndjson:
            out.append(f"{data}{newline}")
            continue
        head = f"event: {ev.name}{newline}" if ev.name else ""
        out.append(f"{head}data: {data}{newline}{newline}")
    return "".join(out).encode("utf-8", "surrogatepass")


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in a JSON value, the value itself included."""
    found = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            found += _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            found += _paths(v, (*prefix, i))
    return found


def _replace(root: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    parent = root
    for step in path[:-1]:
        parent = parent[step]
    parent[path[-1]] = new
    return root


def _remove(root: Any, path: tuple[Any, ...]) -> Any:
    if not path:
        return {}
    parent = root
    for step in path[:-1]:
        parent = parent[step]
    del parent[path[-1]]
    return root


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=6,
)

# Bytes that are never valid UTF-8 where they land: a lone continuation byte, a truncated
# sequence, an overlong encoding, a UTF-16 surrogate, bytes UTF-8 never uses.
INVALID_UTF8 = [b"\x80", b"\xc3", b"\xe2\x82", b"\xc0\xaf", b"\xed\xa0\x80", b"\xff\xfe"]


def _error_event(kind: str) -> Event:
    message = f"Incorrect API key provided: {_KEY_MARK}."
    if kind == "anthropic":
        return Event("error", {"type": "error", "error": {"type": "auth", "message": message}})
    if kind == "openai_responses":
        return Event("error", {"type": "error", "code": "invalid_api_key", "message": message})
    if kind in NDJSON_KINDS:
        return Event(None, {"error": message})
    return Event(None, {"error": {"message": message, "type": "invalid_request_error"}})


@dataclass
class MutatedStream:
    """A stream to serve: its reads, and whether the connection drops after the last one."""

    kind: str
    chunks: list[bytes]
    drop: bool
    steps: list[str] = field(default_factory=list)

    @property
    def data(self) -> bytes:
        """All the bytes, as one."""
        return b"".join(self.chunks)


@st.composite
def mutated_streams(draw: st.DrawFn, kind: str) -> MutatedStream:
    """A valid stream of `kind`, broken by a few mutations, with the key echoed in it."""
    ndjson = kind in NDJSON_KINDS
    events = parse_events(draw(st.sampled_from(VALID_STREAMS[kind])), ndjson)
    steps: list[str] = []
    how = Rendering(
        key_form=draw(st.sampled_from(list(key_renderings()))),
        deep_form=draw(st.sampled_from(list(_DEEP))),
    )

    def pick_json_event() -> Event:
        candidates = [ev for ev in events if ev.is_json]
        return candidates[draw(st.integers(0, len(candidates) - 1))]

    # The key is echoed at least once: in any value of any event, or in an error event.
    if draw(st.booleans()):
        at = draw(st.integers(0, len(events)))
        events.insert(at, _error_event(kind))
        steps.append(f"error event with the key at {at}")
    else:
        ev = pick_json_event()
        path = draw(st.sampled_from(_paths(ev.data)))
        ev.data = _replace(ev.data, path, f"echo {_KEY_MARK} echo")
        steps.append(f"key at {path} of {ev.name or 'data'}")

    for _ in range(draw(st.integers(0, 3))):
        op = draw(st.sampled_from(["retype", "remove", "deep", "deep event"]))
        if op == "deep event":
            events.insert(draw(st.integers(0, len(events))), Event(None, _DEEP_MARK))
            steps.append("a deeply nested event")
            continue
        ev = pick_json_event()
        path = draw(st.sampled_from(_paths(ev.data)))
        if op == "retype":
            ev.data = _replace(ev.data, path, draw(json_values))
        elif op == "remove":
            ev.data = _remove(ev.data, path)
        else:
            ev.data = _replace(ev.data, path, _DEEP_MARK)
        steps.append(f"{op} {path} of {ev.name or 'data'}")

    newline = draw(st.sampled_from(["\n", "\r\n", "\r"]))
    data = render(events, newline, how, ndjson)

    for _ in range(draw(st.integers(0, 2))):
        op = draw(st.sampled_from(["garbage", "invalid utf-8"]))
        at = draw(st.integers(0, len(data)))
        junk = (
            draw(st.binary(min_size=1, max_size=16))
            if op == "garbage"
            else draw(st.sampled_from(INVALID_UTF8))
        )
        data = data[:at] + junk + data[at:]
        steps.append(f"{op} {junk!r} at byte {at}")
    if draw(st.booleans()):
        at = draw(st.integers(0, len(data)))
        data = data[:at]
        steps.append(f"truncated at byte {at}")

    cuts = sorted(draw(st.sets(st.integers(1, max(1, len(data) - 1)), max_size=16)))
    bounds = [0, *[c for c in cuts if c < len(data)], len(data)]
    chunks = [data[a:b] for a, b in itertools.pairwise(bounds) if b > a]
    drop = draw(st.booleans())
    return MutatedStream(kind, chunks, drop, steps)
