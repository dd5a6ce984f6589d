"""One rule for tool calls on every API (issue 44, docs/measurement.md "Tool calls"): the
event that carries a call's generated name is an output event, and a call none of whose
arguments streamed has its closing event as one, so a reply that is only a call without
arguments has a TTFT and a decode wherever the API has a closing event.

Each shape is the documented one (source beside it); the whole-stream replays of the same
shapes over a socket, on the wire and the SDK path, are corpus fixtures
(`anthropic_tool_use_no_arguments`, `openai_responses_function_call_no_arguments`, ...).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from labkit.providers.base import EventClass, StreamParser
from labkit.wire.sse import SSEEvent
from tests.providers.streams import make_provider

pytestmark = pytest.mark.unit

OUTPUT = (EventClass.OUTPUT, EventClass.TEXT)


def _parser(kind: str) -> StreamParser:
    base = {"llamacpp": "http://127.0.0.1:8080", "ollama": "http://127.0.0.1:11434"}
    url = base.get(kind, "http://127.0.0.1:8000/v1")
    return make_provider(kind, api_key="sk-test", base_url=url).new_parser()


def _classes(parser: StreamParser, events: list[tuple[str | None, dict[str, Any]]]) -> list[int]:
    return [parser.on_event(SSEEvent(name, json.dumps(obj), 0)) for name, obj in events]


def _chat_name_chunk() -> dict[str, Any]:
    # Chat Completions chunk.choices[].delta.tool_calls[] (openai-python
    # types/chat/chat_completion_chunk.py ChoiceDeltaToolCall): the first piece of a call
    # carries its id and name, its arguments "".
    call = {"index": 0, "id": "call_1", "type": "function"}
    call["function"] = {"name": "get_time", "arguments": ""}
    return {"id": "c", "choices": [{"index": 0, "delta": {"tool_calls": [call]}}]}


@pytest.mark.parametrize("kind", ["openai", "openai_compatible", "llamacpp"])
def test_chat_chunk_carrying_the_name_is_output(kind: str) -> None:
    assert _classes(_parser(kind), [(None, _chat_name_chunk())]) == [EventClass.OUTPUT]


def test_anthropic_tool_use_block_start_is_output_and_its_stop_closes_a_call_without_input() -> (
    None
):
    # Messages streaming with tool use (docs.anthropic.com build-with-claude/streaming;
    # anthropic-sdk-python types/raw_content_block_start_event.py, input_json_delta.py).
    start = {
        "type": "content_block_start",
        "index": 0,
        "content_block": {"type": "tool_use", "id": "toolu_1", "name": "get_time", "input": {}},
    }
    empty = {
        "type": "content_block_delta",
        "index": 0,
        "delta": {"type": "input_json_delta", "partial_json": ""},
    }
    stop = {"type": "content_block_stop", "index": 0}
    got = _classes(
        _parser("anthropic"),
        [
            ("content_block_start", start),
            ("content_block_delta", empty),
            ("content_block_stop", stop),
        ],
    )
    assert got == [EventClass.OUTPUT, EventClass.META, EventClass.OUTPUT]


def test_anthropic_block_stop_after_streamed_input_is_not_output() -> None:
    start = {
        "type": "content_block_start",
        "index": 1,
        "content_block": {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}},
    }
    piece = {
        "type": "content_block_delta",
        "index": 1,
        "delta": {"type": "input_json_delta", "partial_json": '{"a": 1}'},
    }
    stop = {"type": "content_block_stop", "index": 1}
    got = _classes(
        _parser("anthropic"),
        [
            ("content_block_start", start),
            ("content_block_delta", piece),
            ("content_block_stop", stop),
        ],
    )
    assert got == [EventClass.OUTPUT, EventClass.OUTPUT, EventClass.META]


def test_anthropic_text_block_stop_is_not_output() -> None:
    start = {
        "type": "content_block_start",
        "index": 0,
        "content_block": {"type": "text", "text": ""},
    }
    stop = {"type": "content_block_stop", "index": 0}
    got = _classes(
        _parser("anthropic"), [("content_block_start", start), ("content_block_stop", stop)]
    )
    assert got == [EventClass.META, EventClass.META]


@pytest.mark.parametrize("item_type", ["function_call", "custom_tool_call"])
def test_responses_item_opening_a_named_call_is_output(item_type: str) -> None:
    # openai-python types/responses/response_output_item_added_event.py with a
    # response_function_tool_call.py / response_custom_tool_call.py item.
    added = {
        "type": "response.output_item.added",
        "output_index": 0,
        "item": {"id": "fc_1", "type": item_type, "call_id": "call_1", "name": "get_time"},
    }
    assert _classes(_parser("openai_responses"), [(added["type"], added)]) == [EventClass.OUTPUT]


def test_responses_message_item_opening_is_not_output() -> None:
    added = {
        "type": "response.output_item.added",
        "output_index": 0,
        "item": {"id": "msg_1", "type": "message", "role": "assistant", "content": []},
    }
    assert _classes(_parser("openai_responses"), [(added["type"], added)]) == [EventClass.META]


def test_ollama_line_with_whole_tool_calls_is_output() -> None:
    # Ollama /api/chat streaming (docs/api.md "Chat request (with tools)"): the calls arrive
    # whole, name and arguments object, in one message line.
    line = {
        "model": "m",
        "message": {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"function": {"name": "get_time", "arguments": {}}}],
        },
        "done": False,
    }
    assert _classes(_parser("ollama"), [(None, line)]) == [EventClass.OUTPUT]
