"""Tool calls in each provider's own format (`Provider.tool_format`): the definitions, the
assistant's call and the tool's result as each API takes them, and the calls each stream
parser collects from its provider's tool-call events; and the grammar-forced call of a model
without native tools, read back from the reply's text into the record's `tool_calls`."""

from __future__ import annotations

import json
from typing import Any

import pytest
import respx

from labkit.providers import Provider, provider_class
from labkit.providers.anthropic import AnthropicParser
from labkit.providers.ollama import OllamaParser
from labkit.providers.openai import OpenAIChatParser
from labkit.providers.openai_responses import OpenAIResponsesParser
from labkit.providers.tools import (
    FORCED_CALL_MARK,
    AnthropicTools,
    GrammarTools,
    OllamaTools,
    OpenAIChatTools,
    ResponsesTools,
    ToolResult,
    ToolSpec,
)
from labkit.records import RecordToolCall, StopReason
from labkit.wire.sse import SSEEvent
from tests.providers.streams import load_sse, openai_events, split_every

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


def test_grammar_forces_a_compact_call_and_reads_it_from_the_text() -> None:
    fmt = GrammarTools()
    params = fmt.params([*TOOLS, ToolSpec(name="other")], "required")
    grammar = params["grammar"]
    assert grammar.startswith(FORCED_CALL_MARK)
    assert '"\\"lookup\\"" | "\\"other\\""' in grammar  # only the offered names
    assert fmt.params(TOOLS, "none") == {} and fmt.params(TOOLS, "auto") == {}
    text = '{"name": "lookup", "arguments": {"query": "rivers"}}'
    (found,) = fmt.calls_in_text(params, text) or []
    assert (found.id, found.name, found.source) == ("text_0", "lookup", "text")
    assert json.loads(found.arguments) == {"query": "rivers"}
    assert fmt.calls_in_text({}, text) is None  # not forced: a free answer imitating a call
    assert fmt.calls_in_text({"grammar": "root ::= [a-z]+"}, text) is None  # not labkit's
    assert fmt.calls_in_text(params, '{"name": "lookup", "argu') == []  # cut by max_tokens


@pytest.mark.parametrize(
    "fmt", [OpenAIChatTools(), ResponsesTools(), AnthropicTools(), OllamaTools()]
)
def test_native_formats_read_no_call_from_text(fmt: Any) -> None:
    text = '{"name": "lookup", "arguments": {"query": "x"}}'
    assert fmt.calls_in_text({"grammar": FORCED_CALL_MARK}, text) is None
    assert fmt.closing("none") == [] and fmt.closing("required") == []


def test_grammar_history_tells_the_call_and_result_in_words() -> None:
    fmt = GrammarTools()
    (assistant,) = fmt.assistant('{"name": "lookup", "arguments": {"query": "x"}}', [CALL])
    assert assistant["role"] == "assistant" and "{" not in assistant["content"]
    assert "lookup" in assistant["content"] and '"x"' in assistant["content"]
    (result,) = fmt.results([ToolResult(call=CALL, content="found it")])
    assert result["role"] == "user" and "found it" in result["content"]
    assert "{" not in result["content"]
    assert fmt.closing("required") == []  # a forced turn needs no words
    for choice in ("none", "auto"):
        (closing,) = fmt.closing(choice)  # type: ignore[arg-type]
        assert closing["role"] == "user" and closing["content"]


LLAMA = "http://127.0.0.1:8080"


def _forced(params: dict[str, Any], chunks: list[bytes]) -> Any:
    from labkit.providers.base import ChatRequest
    from tests.providers.streams import make_provider, record_one, sse_response

    request = ChatRequest([{"role": "user", "content": "Task 1"}], {"max_tokens": 64, **params})
    with respx.mock() as router:
        router.post(LLAMA + "/v1/chat/completions").mock(return_value=sse_response(chunks))
        return record_one(make_provider("llamacpp", base_url=LLAMA, transport="httpx"), request)


def test_a_recorded_forced_call_is_a_tool_call_in_the_record() -> None:
    # The bundled llama-server's reply to a forced turn: the call's JSON as text, "stop".
    raw = load_sse("llamacpp_forced_call.sse")
    params = GrammarTools().params(TOOLS, "required")
    record = _forced(params, split_every(raw, 97))
    assert record.error is None
    assert record.output_text == '{"name": "lookup", "arguments": {"query": "lookup"}}'
    assert record.tool_calls == [
        RecordToolCall(id="text_0", name="lookup", arguments='{"query": "lookup"}', source="text")
    ]
    assert record.stop_reason == StopReason.TOOL_CALL and record.stop_reason_raw == "stop"
    # The same text on a turn nobody forced is an answer.
    free = _forced({}, split_every(raw, 97))
    assert free.tool_calls is None and free.stop_reason == StopReason.END


def test_a_forced_call_cut_by_max_tokens_is_no_call() -> None:
    pieces = ['{"name": "lookup", ', '"arguments": {"query": "riv']
    events = list(openai_events(pieces, finish="length"))
    record = _forced(GrammarTools().params(TOOLS, "required"), events)
    assert record.tool_calls is None and record.stop_reason == StopReason.LENGTH


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


def test_the_truth_server_knows_the_forced_call_grammar() -> None:
    """The fake server answers the grammar `GrammarTools` forces a call with as llama.cpp
    would: it finds it by the same first line, and the tool by its `name` rule."""
    from labkit.providers.tools import FORCED_CALL_MARK, GrammarTools, ToolSpec
    from labkit.truth.reply import FORCED_CALL_MARK as SERVED_MARK
    from labkit.truth.reply import _grammar_call

    assert FORCED_CALL_MARK == SERVED_MARK
    spec = ToolSpec(name="lookup", description="d", parameters={})
    params = GrammarTools().params([spec], "required")
    assert _grammar_call(params["grammar"]) == "lookup"
