"""The corpus read by the parsers alone (no sockets): the class of every event, the first
output event's class, and `MalformedStream` with a precise message for bad wire values;
plus the parser rules the corpus does not pin down on its own."""

from __future__ import annotations

import json

import pytest
import respx

from labkit.errors import MalformedStream
from labkit.measurement.recorder import RecordContext
from labkit.providers.base import EventClass, Provider, StreamParser
from labkit.records import RequestRecord, StopReason
from labkit.wire.sse import SSEEvent
from tests.providers.streams import (
    ScriptedClock,
    chat,
    make_provider,
    oa_chunk,
    record_one,
    sse_response,
)
from tests.providers.streams.corpus import Fixture, load_corpus

pytestmark = pytest.mark.unit

CORPUS = load_corpus()
OUTPUT_CLASSES = (EventClass.OUTPUT, EventClass.TEXT)


def provider_of(kind: str) -> Provider:
    base = "http://127.0.0.1:9" if kind in ("llamacpp", "ollama") else "http://127.0.0.1:9/v1"
    return make_provider(kind, api_key="k", base_url=base)


def parser_for(kind: str) -> StreamParser:
    return provider_of(kind).new_parser()


def classes(fixture: Fixture) -> tuple[list[int], StreamParser, MalformedStream | None]:
    """Every event's class, the parser, and the MalformedStream that stopped it (if any)."""
    provider = provider_of(fixture.kind)
    sse_parser, parser, seen = provider.new_framer(), provider.new_parser(), []
    try:
        for event in [*sse_parser.feed(fixture.body, 0), *sse_parser.close()]:
            seen.append(parser.on_event(event))
    except MalformedStream as exc:
        return seen, parser, exc
    return seen, parser, None


@pytest.mark.parametrize("fixture", CORPUS, ids=[f.name for f in CORPUS])
def test_parser_classifies_the_shape(fixture: Fixture) -> None:
    seen, parser, malformed = classes(fixture)
    expect = fixture.expect
    outputs = [c for c in seen if c in OUTPUT_CLASSES]
    assert len(outputs) == expect["output_events"]
    first = (
        {EventClass.TEXT: "text", EventClass.OUTPUT: "output"}.get(outputs[0]) if outputs else None
    )
    assert first == expect["ttft"]
    assert parser.output_text == expect["output_text"]
    parser.settle()  # what the parser decides once the stream is over (several choices)
    if parser.error is not None and parser.error.kind.value == "protocol":
        assert malformed is None and expect["error_contains"] in parser.error.message
    elif expect["error_kind"] == "protocol" and not any(
        decided_by_the_recorder in expect["error_contains"]
        for decided_by_the_recorder in ("truncated", "an empty stream")
    ):
        assert malformed is not None and expect["error_contains"] in str(malformed)
    else:
        assert malformed is None
    if expect["error_kind"] is None:
        assert seen[-1] == EventClass.DONE or parser.finished


def _oa(obj: object) -> SSEEvent:
    return SSEEvent(None, json.dumps(obj), 0)


@pytest.mark.parametrize(
    ("chunk", "message"),
    [
        ({"id": 1.5, "choices": []}, "chunk id is float 1.5, not a string"),
        ({"id": "c", "system_fingerprint": 3}, "system_fingerprint is int 3"),
        ({"id": "c", "usage": [1]}, "usage is list [1], not an object"),
        ({"id": "c", "x_groq": {"usage": {"prompt_tokens": "9"}}}, "x_groq.usage.prompt_tokens"),
        ({"id": "c", "choices": [3]}, "a choice is int 3"),
        ({"id": "c", "choices": [{"delta": {"content": 5}}]}, "delta.content is int 5"),
        (
            {"id": "c", "choices": [{"delta": {"content": [{"type": "text", "text": 1}]}}]},
            "text part",
        ),
        ({"id": "c", "choices": [{"delta": {"content": ["x"]}}]}, "a delta.content part is str"),
        ({"id": "c", "choices": [{"delta": {"refusal": ["no"]}}]}, "delta.refusal is list"),
        ({"id": "c", "choices": [{"delta": {"reasoning_content": 7}}]}, "delta reasoning is int"),
        ({"id": "c", "choices": [{"delta": {"tool_calls": {"index": 0}}}]}, "tool_calls is dict"),
        (
            {"id": "c", "choices": [{"delta": {"reasoning_details": "r"}}]},
            "reasoning_details is str",
        ),
        (
            {"id": "c", "usage": {"completion_tokens_details": {"reasoning_tokens": -1}}},
            "usage.completion_tokens_details.reasoning_tokens is int -1",
        ),
    ],
)
def test_openai_wire_values_are_checked(chunk: dict, message: str) -> None:
    with pytest.raises(MalformedStream) as info:
        parser_for("openai").on_event(_oa(chunk))
    assert message in str(info.value)


def test_json_that_is_not_an_object_or_too_deep_is_malformed() -> None:
    parser = parser_for("openai")
    with pytest.raises(MalformedStream, match="JSON list, not an object"):
        parser.on_event(SSEEvent(None, "[1]", 0))
    with pytest.raises(MalformedStream, match="nested too deeply"):
        parser.on_event(SSEEvent(None, "[" * 5000 + "]" * 5000, 0))
    with pytest.raises(MalformedStream, match="not JSON"):
        parser_for("anthropic").on_event(SSEEvent("message_start", "{", 0))


def test_llamacpp_timings_values_are_checked() -> None:
    parser = parser_for("llamacpp")
    with pytest.raises(MalformedStream, match=r"timings\.prompt_ms is str"):
        parser.on_event(_oa({"id": "c", "choices": [], "timings": {"prompt_ms": "4"}}))
    with pytest.raises(MalformedStream, match="timings is list"):
        parser.on_event(_oa({"id": "c", "choices": [], "timings": [1]}))


def test_anthropic_wire_values_are_checked() -> None:
    parser = parser_for("anthropic")
    with pytest.raises(MalformedStream, match=r"message\.id is list"):
        parser.on_event(SSEEvent("message_start", '{"message": {"id": ["m"]}}', 0))
    with pytest.raises(MalformedStream, match="stop_reason is int 1"):
        parser.on_event(SSEEvent("message_delta", '{"delta": {"stop_reason": 1}}', 0))
    with pytest.raises(MalformedStream, match=r"text_delta\.text is NoneType"):
        parser.on_event(SSEEvent("content_block_delta", '{"delta": {"type": "text_delta"}}', 0))
    with pytest.raises(MalformedStream, match="cache_read_input_tokens is bool"):
        parser.on_event(
            SSEEvent(
                "message_start", '{"message": {"usage": {"cache_read_input_tokens": true}}}', 0
            )
        )


def test_usage_on_every_chunk_is_replaced_never_added() -> None:
    parser = parser_for("openai_compatible")
    for n in (1, 2, 3):
        usage = {"prompt_tokens": 4, "completion_tokens": n, "total_tokens": 4 + n}
        parser.on_event(_oa(oa_chunk("x", usage=usage)))
    assert parser.usage.output_tokens == 3 and parser.usage.input_tokens == 4


@pytest.mark.parametrize(
    ("output", "reasoning", "total_extra", "streamed", "expected"),
    [
        (78, 64, 0, False, 14),  # OpenAI: hidden reasoning inside completion_tokens
        (78, 64, 0, True, 78),  # DeepSeek/OpenRouter: streamed reasoning inside completion
        (2, 40, 40, True, 42),  # xAI grok-3-mini: streamed reasoning outside completion
        (4, 200, 200, False, 4),  # xAI grok-4: hidden reasoning outside completion
        (10, 0, 0, False, 10),
        (10, None, 0, False, 10),
    ],
)
def test_streamed_output_tokens_rules(
    output: int, reasoning: int | None, total_extra: int, streamed: bool, expected: int
) -> None:
    parser = parser_for("openai")
    parser.on_event(_oa(oa_chunk("answer " * 4)))  # the answer: enough to hold its count
    if streamed:  # enough streamed reasoning to hold the count (see account_for_stream)
        parser.on_event(_oa(oa_chunk(reasoning="thinking " * 40)))
    usage: dict = {"prompt_tokens": 5, "completion_tokens": output}
    usage["total_tokens"] = 5 + output + total_extra
    if reasoning is not None:
        usage["completion_tokens_details"] = {"reasoning_tokens": reasoning}
    parser.on_event(_oa(oa_chunk(choices=False, usage=usage)))
    assert parser.streamed_output_tokens(1) == expected


def test_mistral_thinking_is_not_text_with_store_text_off() -> None:
    fixture = next(f for f in CORPUS if f.name == "mistral_thinking_parts")
    clock = ScriptedClock()
    provider = make_provider(
        "openai_compatible", base_url="http://mistral.test/v1", transport="httpx"
    )
    times = [10.0 * (i + 1) for i in range(len(fixture.events()))]
    with respx.mock() as router:
        router.post("http://mistral.test/v1/chat/completions").mock(
            return_value=sse_response(fixture.events(), clock=clock, times_ms=times)
        )
        ctx = RecordContext(run_id="r", experiment="t", store_text=False)
        rec = record_one(provider, chat(), clock=clock, ctx=ctx)
    assert rec.error is None and rec.output_text is None
    # three thinking events (from 20 ms), then text from 50 ms: TTFT is the thinking
    assert rec.client.ttft_ms == 20.0 and rec.client.ttft_text_ms == 50.0
    assert rec.usage.streamed_output_tokens == 20


def test_refusal_without_finish_reason_has_no_stop_reason_and_text_is_kept() -> None:
    parser = parser_for("openai")
    refusal = {"id": "c", "choices": [{"index": 0, "delta": {"refusal": "No."}}]}
    assert parser.on_event(_oa(refusal)) == EventClass.TEXT
    assert parser.output_text == "No." and parser.stop_reason() is None
    parser.on_event(_oa(oa_chunk(finish="stop")))
    assert parser.stop_reason() == StopReason.REFUSAL and parser.finished


def test_anthropic_is_finished_at_its_stop_reason() -> None:
    parser = parser_for("anthropic")
    assert not parser.finished
    parser.on_event(SSEEvent("message_delta", '{"delta": {"stop_reason": "end_turn"}}', 0))
    assert parser.stop_reason_raw == "end_turn" and parser.finished
    assert parser.on_event(SSEEvent("message_stop", "{}", 0)) == EventClass.DONE


def _scripted(
    fixture_name: str, kind: str, url: str, base_url: str
) -> tuple[RequestRecord, list[float]]:
    """Record a corpus fixture through the recorder, event i arriving at 10 * (i + 1) ms."""
    fixture = next(f for f in CORPUS if f.name == fixture_name)
    clock = ScriptedClock()
    events = fixture.events()
    times = [10.0 * (i + 1) for i in range(len(events))]
    key = "sk-test" if kind in ("openai", "anthropic") else None
    provider = make_provider(kind, api_key=key, base_url=base_url, transport="httpx")
    with respx.mock() as router:
        router.post(url).mock(return_value=sse_response(events, clock=clock, times_ms=times))
        return record_one(provider, chat(), clock=clock), times


def test_hidden_reasoning_decode_is_taken_over_the_streamed_tokens() -> None:
    rec, _ = _scripted(
        "openai_gpt5_hidden_reasoning",
        "openai",
        "http://gpt.test/v1/chat/completions",
        "http://gpt.test/v1",
    )
    assert rec.error is None
    client, usage = rec.client, rec.usage
    # event 0 is role-only; the 14 text events arrive at 20 .. 150 ms
    assert client.ttft_ms == 20.0 and client.last_token_ms == 150.0
    assert usage.output_tokens == 78 and usage.streamed_output_tokens == 14
    assert client.decode_ms_per_token == pytest.approx((150.0 - 20.0) / 13)


def test_redacted_thinking_block_is_not_an_output_event() -> None:
    rec, _ = _scripted(
        "anthropic_redacted_thinking",
        "anthropic",
        "http://claude.test/v1/messages",
        "http://claude.test/v1",
    )
    client = rec.client
    assert rec.error is None
    # message_start at 10 ms, the redacted_thinking block (encrypted, arriving whole: no
    # streamed token) at 20, text from 50: the text is the first output
    assert client.ttft_ms == 50.0 and client.ttft_text_ms == 50.0
    assert rec.usage.streamed_output_tokens is None
    assert rec.usage.streamed_output_null_reason is not None
    assert client.decode_ms_per_token is None
