"""Tool calls in each provider's own format (`Provider.tool_format`): the definitions, the
assistant's call and the tool's result as each API takes them, and the calls each stream
parser collects from its provider's tool-call events."""

from __future__ import annotations

import json
from typing import Any

import pytest

from labkit.providers import Provider, provider_class
from labkit.providers.anthropic import AnthropicParser
from labkit.providers.ollama import OllamaParser
from labkit.providers.openai import OpenAIChatParser
from labkit.providers.openai_responses import OpenAIResponsesParser
from labkit.providers.tools import (
    AnthropicTools,
    GrammarTools,
    OllamaTools,
    OpenAIChatTools,
    ResponsesTools,
    ToolResult,
    ToolSpec,
)
from labkit.records import RecordToolCall
from labkit.wire.sse import SSEEvent
from tests.support.records import make_record

pytestmark = pytest.mark.unit

TOOLS = [ToolSpec(name="lookup")]
CALL = RecordToolCall(id="call_1", name="lookup", arguments='{"query": "x"}')


def build(entry: dict[str, Any]) -> Provider:
    cls = provider_class(entry["kind"])
    return cls(cls.settings_model.model_validate(entry), api_key="k")


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ({"id": "o", "kind": "openai", "model": "m"}, OpenAIChatTools),
        ({"id": "r", "kind": "openai_responses", "model": "m"}, ResponsesTools),
        ({"id": "a", "kind": "anthropic", "model": "m"}, AnthropicTools),
        ({"id": "l", "kind": "ollama", "model": "m"}, OllamaTools),
        ({"id": "c", "kind": "llamacpp", "base_url": "http://127.0.0.1:9"}, GrammarTools),
        ({"id": "f", "kind": "fake"}, OpenAIChatTools),
    ],
)
def test_each_provider_answers_with_its_own_tool_format(
    entry: dict[str, Any], expected: type
) -> None:
    assert type(build(entry).tool_format()) is expected


def test_openai_chat_shapes() -> None:
    fmt = OpenAIChatTools()
    params = fmt.params(TOOLS, "required")
    assert params["tool_choice"] == "required"
    assert params["tools"][0]["function"]["name"] == "lookup"
    (assistant,) = fmt.assistant("", [CALL])
    assert assistant["tool_calls"][0]["function"]["arguments"] == '{"query": "x"}'
    assert fmt.results([ToolResult(call=CALL, content="r")]) == [
        {"role": "tool", "tool_call_id": "call_1", "content": "r"}
    ]


def test_responses_items() -> None:
    fmt = ResponsesTools()
    assert fmt.params(TOOLS, "auto")["tools"][0]["name"] == "lookup"
    assert fmt.assistant("", [CALL])[0]["type"] == "function_call"
    assert fmt.results([ToolResult(call=CALL, content="r")])[0] == {
        "type": "function_call_output",
        "call_id": "call_1",
        "output": "r",
    }


def test_anthropic_blocks() -> None:
    fmt = AnthropicTools()
    assert fmt.params(TOOLS, "required")["tool_choice"] == {"type": "any"}
    (assistant,) = fmt.assistant("thinking aloud", [CALL])
    assert assistant["content"][1] == {
        "type": "tool_use",
        "id": "call_1",
        "name": "lookup",
        "input": {"query": "x"},
    }
    (result,) = fmt.results([ToolResult(call=CALL, content="r")])
    assert result["role"] == "user" and result["content"][0]["tool_use_id"] == "call_1"


def test_ollama_objects_and_no_tools_under_none() -> None:
    fmt = OllamaTools()
    assert fmt.params(TOOLS, "none") == {}
    (assistant,) = fmt.assistant("", [CALL])
    assert assistant["tool_calls"][0]["function"]["arguments"] == {"query": "x"}


def test_grammar_forces_a_call_and_reads_it_from_the_text() -> None:
    fmt = GrammarTools()
    schema = fmt.params(TOOLS, "required")["json_schema"]
    assert schema["properties"]["name"]["enum"] == ["lookup"]
    assert fmt.params(TOOLS, "none") == {}
    text = '{"name": "lookup", "arguments": {"query": "rivers"}}'
    call = make_record(output_text=text)
    call.params = {"json_schema": schema}
    (found,) = fmt.calls_in(call)
    assert fmt.calls_in(make_record(output_text=text)) == []  # a free answer imitating one
    assert found.name == "lookup" and json.loads(found.arguments) == {"query": "rivers"}
    cut = make_record(output_text='{"name": "lookup", "argu')
    cut.params = {"json_schema": schema}
    assert fmt.calls_in(cut) == []


def ev(data: Any, name: str | None = None) -> SSEEvent:
    return SSEEvent(name, data if isinstance(data, str) else json.dumps(data), 0)


def test_openai_parser_joins_streamed_call_pieces() -> None:
    p = OpenAIChatParser()
    for delta in (
        {"tool_calls": [{"index": 0, "id": "c0", "function": {"name": "lookup", "arguments": ""}}]},
        {"tool_calls": [{"index": 0, "function": {"arguments": '{"query": '}}]},
        {"tool_calls": [{"index": 1, "id": "c1", "function": {"name": "lookup"}}]},
        {"tool_calls": [{"index": 0, "function": {"arguments": '"x"}'}}]},
    ):
        p.on_event(ev({"choices": [{"index": 0, "delta": delta}]}))
    calls = p.finished_tool_calls()
    assert calls is not None and [(c.id, c.arguments) for c in calls] == [
        ("c0", '{"query": "x"}'),
        ("c1", ""),
    ]
    assert OpenAIChatParser().finished_tool_calls() is None


def test_anthropic_parser_collects_tool_use_blocks() -> None:
    p = AnthropicParser()
    block = {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {}}
    p.on_event(
        ev(
            {"type": "content_block_start", "index": 1, "content_block": block},
            "content_block_start",
        )
    )
    for piece in ('{"query"', ': "x"}'):
        delta = {"type": "input_json_delta", "partial_json": piece}
        p.on_event(
            ev({"type": "content_block_delta", "index": 1, "delta": delta}, "content_block_delta")
        )
    (call,) = p.finished_tool_calls() or []
    assert (call.id, call.name, call.arguments) == ("toolu_1", "lookup", '{"query": "x"}')


def test_responses_parser_collects_function_calls() -> None:
    p = OpenAIResponsesParser()
    item = {"type": "function_call", "call_id": "fc_1", "name": "lookup", "arguments": ""}
    p.on_event(
        ev(
            {"type": "response.output_item.added", "output_index": 0, "item": item},
            "response.output_item.added",
        )
    )
    name = "response.function_call_arguments.delta"
    p.on_event(ev({"type": name, "output_index": 0, "delta": '{"query": "x"}'}, name))
    (call,) = p.finished_tool_calls() or []
    assert (call.id, call.arguments) == ("fc_1", '{"query": "x"}')


def test_ollama_parser_collects_whole_calls() -> None:
    p = OllamaParser()
    message = {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"function": {"name": "lookup", "arguments": {"query": "x"}}}],
    }
    p.on_event(ev({"message": message, "done": False}))
    (call,) = p.finished_tool_calls() or []
    assert call.name == "lookup" and json.loads(call.arguments) == {"query": "x"}


def _turn(fmt: Any) -> list[dict[str, Any]]:
    """A tool turn's history in `fmt`: system, task, the call, its result."""
    return [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": "Find it."},
        *fmt.assistant("", [CALL]),
        *fmt.results([ToolResult(call=CALL, content="found")]),
    ]


@pytest.mark.parametrize(
    ("entry", "items_key"),
    [
        ({"id": "o", "kind": "openai", "model": "m"}, "messages"),
        ({"id": "r", "kind": "openai_responses", "model": "m"}, "input"),
        ({"id": "a", "kind": "anthropic", "model": "m"}, "messages"),
        ({"id": "l", "kind": "ollama", "model": "m"}, "messages"),
    ],
)
def test_each_provider_sends_a_tool_turn_in_its_own_body(
    entry: dict[str, Any], items_key: str
) -> None:
    from labkit.providers.base import ChatRequest

    provider = build(entry)
    fmt = provider.tool_format()
    assert fmt is not None
    request = ChatRequest(_turn(fmt), {"max_tokens": 8, **fmt.params(TOOLS, "required")})  # type: ignore[arg-type]
    params = provider.wire_params(provider.effective_params(request))
    body = json.loads(provider.build_request(request, params).content)
    assert body["tools"], body  # the definitions reach the wire
    sent = body[items_key]
    assert sent[-2:] == _turn(fmt)[-2:]  # the call and its result, as the format built them
    assert "You are an agent." in json.dumps(body)  # the system prompt where the API takes it
    assert len(request.prompt_text) > 0  # structured content is sized, never a crash
