"""An event that carries no generated content is never an output event (issue 24).

Anthropic opens every tool_use block with an empty `input_json_delta` and sends an empty
`thinking_delta` before a signature; OpenRouter sends `reasoning_details` items with empty
text or only a signature or encrypted data; every protocol has its empty deltas. For every
parser: such an event, anywhere in a stream, is never TEXT or OUTPUT, so it adds no output
event, no inter-token gap, and never takes the TTFT stamp.
"""

from __future__ import annotations

import json
from functools import cache
from typing import Any

import pytest
import respx
from hypothesis import given, settings
from hypothesis import strategies as st

from labkit.providers import Provider
from labkit.providers.base import EventClass
from labkit.providers.openai_responses import CLIENT_TOOL_ITEMS
from labkit.wire.sse import SSEEvent
from tests.providers.streams import ScriptedClock, chat, make_provider, record_one, sse_response
from tests.support.fuzz_streams import PROVIDER_SETTINGS

pytestmark = pytest.mark.unit

OUTPUT_CLASSES = (EventClass.TEXT, EventClass.OUTPUT)
KINDS = ["openai", "openai_compatible", "llamacpp", "anthropic", "openai_responses", "ollama"]
#: A visible-but-empty text: what an empty delta may hold.
EMPTY = st.sampled_from(["", None])
IDS = st.text("abcdef0123456789", min_size=1, max_size=8)


@cache
def provider(kind: str) -> Provider:
    """One provider per kind: only its parser is used here."""
    return make_provider(kind, api_key="k", **PROVIDER_SETTINGS[kind])


def _drop_none(obj: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if v is not None}


# --- contentless events, per protocol ---------------------------------------------------------


def _reasoning_detail() -> st.SearchStrategy[dict[str, Any]]:
    """OpenRouter `reasoning_details` items that carry no streamed text."""
    return st.one_of(
        st.builds(
            lambda text, sig: _drop_none(
                {"type": "reasoning.text", "text": text, "signature": sig, "index": 0}
            ),
            EMPTY,
            st.one_of(st.none(), IDS),
        ),
        st.builds(
            lambda data: {"type": "reasoning.encrypted", "data": data, "index": 0},
            IDS,
        ),
        st.builds(lambda s: _drop_none({"type": "reasoning.summary", "summary": s}), EMPTY),
    )


@st.composite
def chat_delta(draw: st.DrawFn) -> dict[str, Any]:
    """A Chat Completions delta with no generated content (role-only, empty fields)."""
    delta: dict[str, Any] = {}
    if draw(st.booleans()):
        delta["role"] = "assistant"
    for key in ("content", "reasoning", "reasoning_content", "refusal"):
        if draw(st.booleans()):
            delta[key] = draw(EMPTY)
    if draw(st.booleans()):
        delta["reasoning_details"] = draw(st.lists(_reasoning_detail(), max_size=3))
    if draw(st.booleans()):
        call: dict[str, Any] = {"index": 0, "function": {"arguments": ""}}
        if draw(st.booleans()):
            call.update(id="call_" + draw(IDS), type="function")
        delta["tool_calls"] = [call]
    if draw(st.booleans()):  # Mistral's parts, empty
        delta["content"] = [
            {"type": "thinking", "thinking": [{"type": "text", "text": ""}]},
            {"type": "text", "text": ""},
        ]
    return delta


@st.composite
def chat_event(draw: st.DrawFn) -> SSEEvent:
    choices = [{"index": 0, "delta": draw(chat_delta()), "finish_reason": None}]
    chunk = {"id": "chatcmpl-x", "object": "chat.completion.chunk", "choices": choices}
    return SSEEvent(None, json.dumps(chunk), 0)


@st.composite
def anthropic_event(draw: st.DrawFn) -> SSEEvent:
    """Messages events with no streamed token."""
    delta = draw(
        st.one_of(
            st.builds(lambda t: _drop_none({"type": "thinking_delta", "thinking": t}), EMPTY),
            st.builds(lambda t: _drop_none({"type": "input_json_delta", "partial_json": t}), EMPTY),
            st.builds(lambda s: {"type": "signature_delta", "signature": s}, IDS),
            st.just({"type": "citations_delta", "citation": {"type": "char_location"}}),
            st.builds(lambda t: {"type": "text_delta", "text": t}, st.just("")),
        )
    )
    block = draw(
        st.one_of(
            st.just({"type": "text", "text": ""}),
            st.just({"type": "thinking", "thinking": "", "signature": ""}),
            st.builds(lambda d: {"type": "redacted_thinking", "data": d}, IDS),
            # A named tool_use block's start carries the generated name (output, issue 44):
            # only one without a name carries nothing.
            st.builds(lambda i: {"type": "tool_use", "id": i, "name": "", "input": {}}, IDS),
        )
    )
    name, obj = draw(
        st.sampled_from(
            [
                (
                    "content_block_delta",
                    {"type": "content_block_delta", "index": 0, "delta": delta},
                ),
                (
                    "content_block_start",
                    {"type": "content_block_start", "index": 0, "content_block": block},
                ),
                ("content_block_stop", {"type": "content_block_stop", "index": 0}),
                ("ping", {"type": "ping"}),
            ]
        )
    )
    return SSEEvent(name, json.dumps(obj), 0)


_RESPONSES_DELTAS = [
    "response.output_text.delta",
    "response.refusal.delta",
    "response.reasoning_text.delta",
    "response.reasoning_summary_text.delta",
    "response.function_call_arguments.delta",
    "response.custom_tool_call_input.delta",
    "response.shell_call_command.delta",
    "response.mcp_call_arguments.delta",
    "response.code_interpreter_call_code.delta",
    "response.audio.delta",
    "response.some_future_tool_call.delta",  # unknown: classified by its delta
]
_RESPONSES_PROGRESS = [
    "response.in_progress",
    "response.web_search_call.searching",
    "response.code_interpreter_call.interpreting",
    "response.image_generation_call.partial_image",
    "response.mcp_list_tools.completed",
    "response.reasoning_summary_part.added",
    "response.output_text.annotation.added",
    "response.shell_call_output_content.delta",
    "response.audio.transcript.delta",
    "response.some_future_progress",
]


@st.composite
def responses_event(draw: st.DrawFn) -> SSEEvent:
    """Responses events that carry no generated content: an empty delta of any known or
    unknown type, a progress event, a hosted item's start."""
    choice = draw(st.integers(0, 2))
    if choice == 0:
        name = draw(st.sampled_from(_RESPONSES_DELTAS))
        obj: dict[str, Any] = {"type": name, "item_id": "it", "output_index": 0, "delta": ""}
    elif choice == 1:
        name = draw(st.sampled_from(_RESPONSES_PROGRESS))
        obj = {"type": name, "item_id": "it", "output_index": 0}
        if name.endswith(".delta"):  # a hosted shell's output: an object, not generated text
            obj["delta"] = {"stdout": draw(st.text(max_size=5))}
    else:
        name = "response.output_item.added"
        kind = draw(st.sampled_from([*sorted(CLIENT_TOOL_ITEMS), "web_search_call", "reasoning"]))
        obj = {"type": name, "output_index": 0, "item": {"id": "it", "type": kind}}
    return SSEEvent(name, json.dumps(obj), 0)


@st.composite
def ollama_event(draw: st.DrawFn) -> SSEEvent:
    message: dict[str, Any] = {"role": "assistant", "content": ""}
    if draw(st.booleans()):
        message["thinking"] = ""
    if draw(st.booleans()):
        message["tool_calls"] = []
    return SSEEvent(None, json.dumps({"model": "m", "message": message, "done": False}), 0)


CONTENTLESS: dict[str, st.SearchStrategy[SSEEvent]] = {
    "openai": chat_event(),
    "openai_compatible": chat_event(),
    "llamacpp": chat_event(),
    "anthropic": anthropic_event(),
    "openai_responses": responses_event(),
    "ollama": ollama_event(),
}

# --- one output event and a complete stream around it, per protocol ---------------------------

_OA_TEXT = {"id": "c", "choices": [{"index": 0, "delta": {"content": "Hi"}}]}
_OA_END = [
    {"id": "c", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
    {"id": "c", "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 1}},
]
_ANT_START = {"type": "message_start", "message": {"id": "m", "usage": {"input_tokens": 3}}}
_ANT_TEXT = {
    "type": "content_block_delta",
    "index": 1,
    "delta": {"type": "text_delta", "text": "Hi"},
}
_ANT_END = [
    (
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn"},
            "usage": {"output_tokens": 1},
        },
    ),
    ("message_stop", {"type": "message_stop"}),
]
_R_DONE = {
    "type": "response.completed",
    "response": {
        "id": "r",
        "status": "completed",
        "usage": {"input_tokens": 3, "output_tokens": 1},
    },
}

STREAM_PARTS: dict[str, tuple[list[SSEEvent], SSEEvent, list[SSEEvent]]] = {}
for _kind in ("openai", "openai_compatible", "llamacpp"):
    STREAM_PARTS[_kind] = (
        [],
        SSEEvent(None, json.dumps(_OA_TEXT), 0),
        [*(SSEEvent(None, json.dumps(o), 0) for o in _OA_END), SSEEvent(None, "[DONE]", 0)],
    )
STREAM_PARTS["anthropic"] = (
    [SSEEvent("message_start", json.dumps(_ANT_START), 0)],
    SSEEvent("content_block_delta", json.dumps(_ANT_TEXT), 0),
    [SSEEvent(n, json.dumps(o), 0) for n, o in _ANT_END],
)
STREAM_PARTS["openai_responses"] = (
    [
        SSEEvent(
            "response.created", json.dumps({"type": "response.created", "response": {"id": "r"}}), 0
        )
    ],
    SSEEvent(
        "response.output_text.delta",
        json.dumps({"type": "response.output_text.delta", "delta": "Hi"}),
        0,
    ),
    [SSEEvent("response.completed", json.dumps(_R_DONE), 0)],
)
STREAM_PARTS["ollama"] = (
    [],
    SSEEvent(
        None, json.dumps({"message": {"role": "assistant", "content": "Hi"}, "done": False}), 0
    ),
    [
        SSEEvent(
            None,
            json.dumps(
                {"done": True, "done_reason": "stop", "prompt_eval_count": 3, "eval_count": 1}
            ),
            0,
        )
    ],
)


def _wire(kind: str, event: SSEEvent) -> bytes:
    """`event` as the server sends it: an SSE event, or one NDJSON line for Ollama."""
    if kind == "ollama":
        return event.data.encode() + b"\n"
    head = f"event: {event.event}\n" if event.event else ""
    return f"{head}data: {event.data}\n\n".encode()


# --- the properties ---------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_a_contentless_event_is_never_output(kind: str, data: st.DataObject) -> None:
    """Anywhere in a stream (before, between, after output), a contentless event is never
    TEXT or OUTPUT, and leaves the output text as it was."""
    before, output, _ = STREAM_PARTS[kind]
    empties = data.draw(st.lists(CONTENTLESS[kind], min_size=1, max_size=6), label="contentless")
    at = data.draw(st.integers(0, 2), label="where")
    parser = provider(kind).new_parser()
    for event in before:
        parser.on_event(event)
    if at == 1:
        assert parser.on_event(output) in OUTPUT_CLASSES
    for event in empties:
        assert parser.on_event(event) not in OUTPUT_CLASSES, event
    if at != 1:
        assert parser.on_event(output) in OUTPUT_CLASSES
    assert parser.output_text == "Hi"


@pytest.mark.parametrize("kind", KINDS)
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_a_contentless_event_never_sets_ttft(kind: str, data: st.DataObject) -> None:
    """Recorded through the recorder (scripted clock, event i at 10 * (i + 1) ms): the
    contentless events come first, yet the TTFT is the one output event's stamp, and the
    record holds exactly one output event (no inter-token gap taken on nothing)."""
    before, output, after = STREAM_PARTS[kind]
    empties = data.draw(st.lists(CONTENTLESS[kind], min_size=1, max_size=5), label="contentless")
    events = [*before, *empties, output, *after]
    chunks = [_wire(kind, e) for e in events]
    times = [10.0 * (i + 1) for i in range(len(chunks))]
    output_ms = times[len(before) + len(empties)]
    clock = ScriptedClock()
    target = make_provider(kind, api_key="k", **PROVIDER_SETTINGS[kind])
    with respx.mock() as router:
        router.route().mock(return_value=sse_response(chunks, clock=clock, times_ms=times))
        record = record_one(target, chat(), clock=clock)
    assert record.error is None, record.error
    assert record.client.ttft_ms == output_ms
    assert record.client.event_offsets_ms == [output_ms]
