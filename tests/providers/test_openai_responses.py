"""OpenAI's Responses API on the wire, via respx: the request body (instructions, input,
max_output_tokens, parameters it has), headers, the terminal events' usage and stop reasons,
the streamed-token rules for hidden reasoning, and the checks on every wire value."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import httpx
import pytest
import respx

from labkit.errors import MalformedStream, ProviderUnavailable
from labkit.providers import sdk_available
from labkit.providers.base import EventClass
from labkit.providers.openai_responses import OpenAIResponsesParser, event_class
from labkit.records import ErrorKind, StopReason
from labkit.wire.sse import SSEEvent
from tests.providers.streams import chat, make_provider, record_one, sse, sse_response

pytestmark = pytest.mark.unit

URL = "https://api.openai.com/v1/responses"
KEY = "sk-responses-test"


def event(name: str, **fields: object) -> SSEEvent:
    return SSEEvent(name, json.dumps({"type": name, **fields}), 0)


def completed(status: str = "completed", **response: object) -> dict:
    usage = {
        "input_tokens": 10,
        "input_tokens_details": {"cached_tokens": 4},
        "output_tokens": 20,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 30,
    }
    return {"response": {"id": "resp_1", "status": status, "usage": usage, **response}}


def stream(*deltas: str) -> list[bytes]:
    out = [sse({"type": "response.created", "response": {"id": "resp_1"}}, "response.created")]
    for d in deltas:
        out.append(
            sse({"type": "response.output_text.delta", "delta": d}, "response.output_text.delta")
        )
    out.append(sse({"type": "response.completed", **completed()}, "response.completed"))
    return out


def responses(**kw):
    return make_provider("openai_responses", api_key=KEY, **{"model": "gpt-5-mini", **kw})


def test_key_required_and_sdk_available() -> None:
    settings = responses().settings
    assert settings.api_key_env == "OPENAI_API_KEY" and sdk_available("openai_responses")
    bare = settings.model_copy(update={"api_key_env": None})
    with pytest.raises(ProviderUnavailable, match="needs an API key"):
        bare.check_available()


def test_request_body_instructions_input_and_only_accepted_params() -> None:
    with respx.mock() as router:
        route = router.post(URL).mock(return_value=sse_response(stream("Hi")))
        req = chat("Hi", system="Be brief.", temperature=0.2, seed=7, stop="END", max_tokens=64)
        req.params["reasoning"] = {"effort": "low", "summary": "auto"}
        rec = record_one(responses(extra_body={"store": False}), req)
    request = route.calls.last.request
    assert request.headers["authorization"] == f"Bearer {KEY}"
    body = json.loads(request.content)
    assert body["instructions"] == "Be brief."
    assert body["input"] == [{"role": "user", "content": "Hi"}]
    assert body["stream"] is True and body["store"] is False
    assert body["max_output_tokens"] == 64 and body["temperature"] == 0.2
    assert body["reasoning"] == {"effort": "low", "summary": "auto"}
    for absent in ("seed", "stop", "max_tokens", "messages", "stream_options"):
        assert absent not in body, absent
    assert rec.params == {
        "temperature": 0.2,
        "max_output_tokens": 64,
        "reasoning": {"effort": "low", "summary": "auto"},
    }
    assert rec.error is None and rec.output_text == "Hi" and rec.response_id == "resp_1"


def test_headers_usage_and_end() -> None:
    headers = {
        "x-request-id": "req_9",
        "openai-processing-ms": "41",
        "x-ratelimit-limit-tokens": "9",
    }
    with respx.mock() as router:
        # Twenty tokens of text, as the usage counts (a count the text cannot hold is
        # unaccounted: account_for_stream).
        text = [f" w{i}" for i in range(20)]
        router.post(URL).mock(return_value=sse_response(stream(*text), headers=headers))
        rec = record_one(responses())
    assert rec.request_id == "req_9" and rec.provider_timings.processing_ms == 41.0
    assert rec.rate_limits == {"x-ratelimit-limit-tokens": "9"}
    u = rec.usage
    assert (u.input_tokens, u.output_tokens, u.cached_input_tokens) == (10, 20, 4)
    assert rec.provider_timings.cached_tokens == 4 and u.streamed_output_tokens == 20
    assert rec.stop_reason == StopReason.END and rec.stop_reason_raw == "completed"


def test_event_name_falls_back_to_the_type_field() -> None:
    parser = OpenAIResponsesParser()
    unnamed = SSEEvent(None, json.dumps({"type": "response.output_text.delta", "delta": "x"}), 0)
    assert parser.on_event(unnamed) == EventClass.TEXT and parser.output_text == "x"


def test_classes() -> None:
    parser = OpenAIResponsesParser()
    assert parser.on_event(event("response.created", response={"id": "r"})) == EventClass.META
    assert parser.on_event(event("response.output_text.delta", delta="")) == EventClass.META
    summary = event("response.reasoning_summary_text.delta", delta="**Plan**")
    assert parser.on_event(summary) == EventClass.OUTPUT
    args = event("response.function_call_arguments.delta", delta='{"a"')
    assert parser.on_event(args) == EventClass.OUTPUT
    done = event("response.output_text.done", text="whole")
    assert parser.on_event(done) == EventClass.META and parser.output_text == ""
    assert not parser.finished
    assert parser.on_event(event("response.completed", **completed())) == EventClass.DONE
    assert parser.finished and parser.stop_reason() == StopReason.TOOL_CALL


@pytest.mark.parametrize(
    ("terminal", "extra", "reason", "raw"),
    [
        ("response.completed", {}, StopReason.END, "completed"),
        (
            "response.incomplete",
            {"incomplete_details": {"reason": "max_output_tokens"}},
            StopReason.LENGTH,
            "max_output_tokens",
        ),
        (
            "response.incomplete",
            {"incomplete_details": {"reason": "content_filter"}},
            StopReason.CONTENT_FILTER,
            "content_filter",
        ),
        ("response.incomplete", {"incomplete_details": None}, StopReason.UNKNOWN, "incomplete"),
        (
            "response.failed",
            {"error": {"code": "server_error", "message": "x"}},
            StopReason.ERROR,
            "failed",
        ),
    ],
)
def test_terminal_events(terminal: str, extra: dict, reason: StopReason, raw: str) -> None:
    parser = OpenAIResponsesParser()
    status = terminal.removeprefix("response.")
    body = completed(status, **extra)
    assert parser.on_event(event(terminal, **body)) == EventClass.DONE
    assert parser.stop_reason() == reason and parser.stop_reason_raw == raw
    if terminal == "response.failed":
        assert parser.error is not None and parser.error.kind == ErrorKind.STREAM_ERROR
        assert parser.error.message == "error event in stream: server_error: x"


def test_refusal_is_text_and_a_refusal_stop() -> None:
    parser = OpenAIResponsesParser()
    assert parser.on_event(event("response.refusal.delta", delta="No.")) == EventClass.TEXT
    parser.on_event(event("response.completed", **completed()))
    assert parser.output_text == "No." and parser.stop_reason() == StopReason.REFUSAL


def test_error_event_flat_or_nested() -> None:
    flat = OpenAIResponsesParser()
    flat.on_event(event("error", code="rate_limit_exceeded", message="slow down", param=None))
    assert flat.error is not None
    assert flat.error.message == "error event in stream: rate_limit_exceeded: slow down"
    nested = OpenAIResponsesParser()
    nested.on_event(event("error", error={"type": "server_error", "message": "boom"}))
    assert nested.error is not None and "server_error: boom" in nested.error.message


@pytest.mark.parametrize(
    ("streamed_kind", "output", "reasoning", "expected"),
    [
        (None, 78, 64, 14),  # hidden reasoning: only the visible tokens were streamed
        ("response.reasoning_text.delta", 78, 64, 78),  # reasoning streamed itself
        ("response.reasoning_summary_text.delta", 78, 64, None),  # a summary of no count
        (None, 10, 0, 10),
        ("response.reasoning_summary_text.delta", 10, 0, 10),  # nothing hidden
    ],
)
def test_streamed_output_tokens_rules(
    streamed_kind: str | None, output: int, reasoning: int, expected: int | None
) -> None:
    parser = OpenAIResponsesParser()
    parser.on_event(event("response.output_text.delta", delta="answer " * 4))  # holds 14
    if streamed_kind:  # enough streamed text to hold the count (see account_for_stream)
        parser.on_event(event(streamed_kind, delta="thinking " * 40))
    body = completed()
    body["response"]["usage"].update(
        output_tokens=output, output_tokens_details={"reasoning_tokens": reasoning}
    )
    parser.on_event(event("response.completed", **body))
    assert parser.streamed_output_tokens(1) == expected


@pytest.mark.parametrize(
    ("ev", "message"),
    [
        (event("response.output_text.delta", delta=3), "response.output_text.delta.delta is int"),
        (event("response.refusal.delta"), "response.refusal.delta.delta is NoneType"),
        (event("response.created", response=[1]), "response.created.response is list"),
        (event("response.created", response={"id": 1.5}), "response.id is float"),
        (event("response.output_item.added", item="x"), "response.output_item.added.item is str"),
        (event("response.completed", response={"status": 1}), "response.status is int 1"),
        (
            event("response.completed", response={"usage": {"input_tokens": "9"}}),
            "usage.input_tokens is str",
        ),
        (
            event(
                "response.completed",
                response={"usage": {"output_tokens_details": {"reasoning_tokens": True}}},
            ),
            "usage.output_tokens_details.reasoning_tokens is bool",
        ),
        (
            event("response.incomplete", response={"incomplete_details": {"reason": 2}}),
            "incomplete_details.reason is int",
        ),
        (event("response.failed", response={"error": "boom"}), "response.error is str"),
    ],
)
def test_wire_values_are_checked(ev: SSEEvent, message: str) -> None:
    with pytest.raises(MalformedStream) as info:
        OpenAIResponsesParser().on_event(ev)
    assert message in str(info.value)


def test_count_tokens_uses_the_input_tokens_endpoint() -> None:
    provider = responses()
    with respx.mock() as router:
        route = router.post(URL + "/input_tokens").mock(
            return_value=httpx.Response(
                200, json={"object": "response.input_tokens", "input_tokens": 11}
            )
        )
        count = asyncio.run(provider.count_tokens("hello there"))
    asyncio.run(provider.aclose())
    assert count is not None and count.tokens == 11
    assert count.source == "openai:responses/input_tokens"
    assert json.loads(route.calls.last.request.content) == {
        "model": "gpt-5-mini",
        "input": "hello there",
    }


# --- the event catalogue and hosted versus client tools (issue 24) ---------------------------

DOCS = Path(__file__).resolve().parents[2] / "docs" / "providers.md"


def test_the_documented_event_table_is_the_parsers() -> None:
    rows = re.findall(r"^\| `((?:response\.[a-z_.]+)|error)` \| (\w+) \|", DOCS.read_text(), re.M)
    assert len(rows) >= 55
    assert {name: cls for name, cls in rows} == {name: event_class(name) for name, _ in rows}


def _item(name: str, index: int, **item: object) -> SSEEvent:
    return event(name, output_index=index, item=item)


@pytest.mark.parametrize(
    ("items", "reason"),
    [
        ([{"type": "web_search_call", "id": "ws"}, {"type": "message", "id": "m"}], "end"),
        ([{"type": "mcp_call", "id": "mc"}, {"type": "message", "id": "m"}], "end"),
        ([{"type": "mcp_approval_request", "id": "ma"}], "end"),
        ([{"type": "function_call", "id": "fc", "call_id": "c1"}], "tool_call"),
        ([{"type": "computer_call", "id": "cc", "call_id": "c2"}], "tool_call"),
        ([{"type": "local_shell_call", "id": "ls", "call_id": "c3"}], "tool_call"),
        (  # a shell the server ran: its output is in the response, then the answer
            [
                {"type": "shell_call", "id": "sh", "call_id": "c4"},
                {"type": "shell_call_output", "id": "so", "call_id": "c4"},
                {"type": "message", "id": "m"},
            ],
            "end",
        ),
    ],
)
def test_only_a_client_item_left_unanswered_is_a_tool_call(items: list, reason: str) -> None:
    for with_output in (False, True):  # items from the events alone, or the terminal's too
        parser = OpenAIResponsesParser()
        for i, item in enumerate(items):
            parser.on_event(_item("response.output_item.added", i, **item))
            parser.on_event(_item("response.output_item.done", i, **item))
        body = completed(output=items) if with_output else completed()
        parser.on_event(event("response.completed", **body))
        assert parser.stop_reason() == StopReason(reason)


def test_an_unknown_delta_is_classified_by_its_delta_and_kept() -> None:
    parser = OpenAIResponsesParser()
    new = event("response.new_tool_call_input.delta", output_index=0, delta='{"x"')
    assert parser.on_event(new) == EventClass.OUTPUT
    empty = event("response.new_tool_call_input.delta", output_index=0, delta="")
    assert parser.on_event(empty) == EventClass.META
    opaque = event("response.new_tool_output.delta", output_index=0, delta={"stdout": "x"})
    assert parser.on_event(opaque) == EventClass.META
    assert parser.on_event(event("response.new_tool.searching")) == EventClass.META
    assert parser.unknown_event_types == {
        "response.new_tool_call_input.delta",
        "response.new_tool_output.delta",
        "response.new_tool.searching",
    }


def test_a_client_call_arriving_whole_is_one_output_event() -> None:
    parser = OpenAIResponsesParser()
    call = {"type": "computer_call", "id": "cc", "call_id": "c", "action": {"type": "click"}}
    assert parser.on_event(_item("response.output_item.added", 0, **call)) == EventClass.META
    assert parser.on_event(_item("response.output_item.done", 0, **call)) == EventClass.OUTPUT
    streamed = OpenAIResponsesParser()
    fc = {"type": "function_call", "id": "fc", "call_id": "c"}
    streamed.on_event(_item("response.output_item.added", 0, **fc))
    args = event("response.function_call_arguments.delta", output_index=0, delta="{}")
    assert streamed.on_event(args) == EventClass.OUTPUT
    assert streamed.on_event(_item("response.output_item.done", 0, **fc)) == EventClass.META


def test_hidden_output_reported_as_zero_is_flagged_with_the_local_tokenizer() -> None:
    # gpt-5-mini has its tokenizer offline: 400 bytes of text is far more than 64 + 1.5 x its
    # tokens would allow a reported 300 (the bytes bound alone would not decide).
    provider = make_provider("openai_responses", api_key="k", model="gpt-5-mini")
    parser = provider.new_parser()
    parser.on_event(event("response.output_text.delta", output_index=0, delta="word " * 80))
    body = completed()
    body["response"]["usage"].update(
        output_tokens=300, output_tokens_details={"reasoning_tokens": 0}
    )
    parser.on_event(event("response.completed", **body))
    assert parser.streamed_output_tokens(80) is None
    assert parser.usage.output_count_unaccounted is True
    reason = parser.usage.streamed_output_null_reason
    assert reason is not None and "tiktoken" in reason and "300" in reason
    fits = provider.new_parser()
    fits.on_event(event("response.output_text.delta", output_index=0, delta="word " * 80))
    body["response"]["usage"].update(output_tokens=81)
    fits.on_event(event("response.completed", **body))
    assert fits.streamed_output_tokens(80) == 81
    assert fits.usage.output_count_unaccounted is False
    assert fits.usage.streamed_output_null_reason is None
