"""Anthropic Messages on the wire, via respx: named events, cumulative usage, headers."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
import respx

from labkit.errors import ProviderUnavailable
from labkit.providers.anthropic import ANTHROPIC_VERSION, AnthropicSettings
from labkit.records import StopReason
from tests.providers.streams import (
    ScriptedClock,
    anthropic_events,
    chat,
    load_sse,
    make_provider,
    record_one,
    sse,
    sse_response,
)

pytestmark = pytest.mark.unit

URL = "https://api.anthropic.com/v1/messages"
KEY = "sk-ant-test-key"


def claude(**kw):
    return make_provider("anthropic", api_key=KEY, **{"model": "claude-haiku-4-5", **kw})


def test_version_matches_installed_sdk() -> None:
    from anthropic._constants import ANTHROPIC_API_VERSION

    assert ANTHROPIC_VERSION == ANTHROPIC_API_VERSION


def test_request_headers_body_system_and_params() -> None:
    with respx.mock() as router:
        route = router.post(URL).mock(return_value=sse_response(anthropic_events(["x"])))
        req = chat("Hi", system="Be brief.", temperature=0.5, seed=7, stop="END", top_k=5)
        rec = record_one(claude(), req)
    request = route.calls.last.request
    assert request.headers["x-api-key"] == KEY
    assert request.headers["anthropic-version"] == ANTHROPIC_VERSION
    assert "authorization" not in request.headers
    body = json.loads(request.content)
    assert body["system"] == "Be brief."
    assert body["messages"] == [{"role": "user", "content": "Hi"}]
    assert body["stream"] is True
    assert "seed" not in body and "stop" not in body
    assert body["stop_sequences"] == ["END"]
    assert body["max_tokens"] == 1024  # required by the API: defaulted
    assert body["temperature"] == 0.5 and body["top_k"] == 5
    assert "stream_options" not in body
    # The record stores what was sent, not what was asked.
    assert rec.params == {
        "temperature": 0.5,
        "top_k": 5,
        "stop_sequences": ["END"],
        "max_tokens": 1024,
    }


def test_no_system_field_without_system_message() -> None:
    with respx.mock() as router:
        route = router.post(URL).mock(return_value=sse_response(anthropic_events(["x"])))
        record_one(claude(), chat("Hi", max_tokens=16))
    body = json.loads(route.calls.last.request.content)
    assert "system" not in body and body["max_tokens"] == 16


def test_named_events_usage_identifiers_and_timings() -> None:
    clock = ScriptedClock()
    events = list(
        anthropic_events(
            ["Hel", "lo"], input_tokens=20, cache_read=100, cache_creation=5, output_tokens=2
        )
    )
    # start, block_start, ping, delta, delta, block_stop, message_delta, message_stop
    times = [40.0, 41.0, 42.0, 60.0, 75.0, 76.0, 77.0, 78.0]
    headers = {
        "request-id": "req_011CAbc",
        "anthropic-ratelimit-requests-remaining": "49",
        "anthropic-ratelimit-tokens-limit": "80000",
        "x-other": "no",
    }
    with respx.mock() as router:
        router.post(URL).mock(
            return_value=sse_response(events, headers=headers, clock=clock, times_ms=times)
        )
        rec = record_one(claude(), clock=clock)
    assert rec.error is None
    assert rec.request_id == "req_011CAbc"
    assert rec.response_id == "msg_test1"
    assert rec.rate_limits == {
        "anthropic-ratelimit-requests-remaining": "49",
        "anthropic-ratelimit-tokens-limit": "80000",
    }
    # The contract's input_tokens includes cache reads and writes.
    assert rec.usage.input_tokens == 20 + 100 + 5
    assert rec.usage.cached_input_tokens == 100
    assert rec.provider_timings.cached_tokens == 100
    assert rec.usage.output_tokens == 2 and rec.usage.output_tokens_source == "provider"
    assert rec.client.first_event_ms == 40.0  # message_start
    assert rec.client.ttft_ms == 60.0 and rec.client.last_token_ms == 75.0
    assert rec.client.e2e_ms == 78.0
    assert rec.client.decode_ms_per_token == 15.0
    assert rec.provider_timings.prefill_ms is None  # Anthropic reports no timings
    assert rec.output_text == "Hello"


def test_message_delta_usage_replaces_never_adds() -> None:
    # message_start says output 1 (placeholder) and cache_read 0; message_delta is
    # cumulative: output 9, and an updated cache read count that overrides the first.
    events = list(
        anthropic_events(
            ["a", "b"],
            input_tokens=10,
            cache_read=0,
            delta_usage={"output_tokens": 9, "cache_read_input_tokens": 50, "input_tokens": 10},
        )
    )
    with respx.mock() as router:
        router.post(URL).mock(return_value=sse_response(events))
        rec = record_one(claude())
    assert rec.usage.output_tokens == 9
    assert rec.usage.cached_input_tokens == 50
    assert rec.usage.input_tokens == 60


def test_output_only_message_delta_keeps_input_counts() -> None:
    events = list(
        anthropic_events(["a"], input_tokens=30, cache_read=7, delta_usage={"output_tokens": 4})
    )
    with respx.mock() as router:
        router.post(URL).mock(return_value=sse_response(events))
        rec = record_one(claude())
    assert rec.usage.input_tokens == 37 and rec.usage.cached_input_tokens == 7
    assert rec.usage.output_tokens == 4


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("end_turn", StopReason.END),
        ("max_tokens", StopReason.LENGTH),
        ("model_context_window_exceeded", StopReason.LENGTH),
        ("stop_sequence", StopReason.STOP_SEQUENCE),
        ("tool_use", StopReason.TOOL_CALL),
        ("refusal", StopReason.REFUSAL),
        ("pause_turn", StopReason.UNKNOWN),
        ("brand_new_reason", StopReason.UNKNOWN),
    ],
)
def test_stop_reason_normalised_raw_kept(raw: str, expected: StopReason) -> None:
    with respx.mock() as router:
        router.post(URL).mock(return_value=sse_response(anthropic_events(["a"], stop_reason=raw)))
        rec = record_one(claude())
    assert rec.stop_reason == expected and rec.stop_reason_raw == raw


def test_thinking_counts_for_ttft_not_ttft_text_and_signature_is_not_output() -> None:
    clock = ScriptedClock()

    def delta(d: dict) -> bytes:
        return sse({"type": "content_block_delta", "index": 0, "delta": d}, "content_block_delta")

    events = list(anthropic_events([]))
    start, block_start = events[0], events[1]
    tail = events[3:]  # block_stop, message_delta, message_stop
    chunks = [
        start,
        block_start,
        delta({"type": "thinking_delta", "thinking": "Hmm"}),
        delta({"type": "signature_delta", "signature": "EqQBCgIYAh"}),
        delta({"type": "text_delta", "text": "Yes"}),
        *tail,
    ]
    times = [10.0, 11.0, 50.0, 60.0, 300.0, 301.0, 302.0, 303.0]
    with respx.mock() as router:
        router.post(URL).mock(return_value=sse_response(chunks, clock=clock, times_ms=times))
        rec = record_one(claude(), clock=clock)
    assert rec.error is None
    assert rec.client.ttft_ms == 50.0 and rec.client.ttft_text_ms == 300.0
    assert rec.client.event_offsets_ms == [50.0, 300.0]
    assert rec.output_text == "Yes"


def test_tool_use_name_and_input_json_are_output() -> None:
    # The block start carries the generated name (an output event, as on every API), the
    # input_json_delta the generated input: two output events, no visible text.
    def ev(obj: dict, name: str) -> bytes:
        return sse(obj, name)

    events = list(anthropic_events([], stop_reason="tool_use"))
    chunks = [
        events[0],
        ev(
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}},
            },
            "content_block_start",
        ),
        ev(
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "input_json_delta", "partial_json": '{"a": 1}'},
            },
            "content_block_delta",
        ),
        *events[3:],
    ]
    with respx.mock() as router:
        router.post(URL).mock(return_value=sse_response(chunks))
        rec = record_one(claude())
    assert rec.stop_reason == StopReason.TOOL_CALL
    assert len(rec.client.event_offsets_ms) == 2 and rec.client.ttft_text_ms is None


def test_events_without_event_lines_fall_back_to_type() -> None:
    raw = b"".join(anthropic_events(["a", "b"]))
    stripped = b"\n".join(line for line in raw.split(b"\n") if not line.startswith(b"event:"))
    with respx.mock() as router:
        router.post(URL).mock(return_value=sse_response([stripped]))
        rec = record_one(claude())
    assert rec.error is None and rec.output_text == "ab" and rec.usage.output_tokens == 2


def test_recorded_anthropic_stream() -> None:
    raw = load_sse("anthropic_messages.sse")
    chunks = [raw[i : i + 33] for i in range(0, len(raw), 33)]
    with respx.mock() as router:
        router.post(URL).mock(return_value=sse_response(chunks, headers={"request-id": "req_9"}))
        rec = record_one(claude())
    assert rec.error is None
    assert rec.output_text == "A token is a small piece of text."
    assert rec.response_id == "msg_01XFDUDYJgAACzvnptvVoYEL"
    assert rec.request_id == "req_9"
    assert rec.usage.input_tokens == 18 + 2048
    assert rec.usage.cached_input_tokens == 2048
    assert rec.usage.output_tokens == 9
    assert rec.stop_reason == StopReason.END and rec.stop_reason_raw == "end_turn"
    assert len(rec.client.event_offsets_ms) == 3


def test_count_tokens_endpoint() -> None:
    async def go() -> object:
        provider = claude()
        try:
            return await provider.count_tokens("How many tokens is this?")
        finally:
            await provider.aclose()

    with respx.mock() as router:
        route = router.post(URL + "/count_tokens").mock(
            return_value=httpx.Response(200, json={"input_tokens": 14})
        )
        count = asyncio.run(go())
    assert count.tokens == 14 and count.source == "anthropic:count_tokens"
    request = route.calls.last.request
    assert json.loads(request.content) == {
        "model": "claude-haiku-4-5",
        "messages": [{"role": "user", "content": "How many tokens is this?"}],
    }
    assert request.headers["x-api-key"] == KEY
    assert request.headers["anthropic-version"] == ANTHROPIC_VERSION


def test_missing_key_names_the_variable() -> None:
    settings = AnthropicSettings(id="claude", kind="anthropic", model="m")
    with pytest.raises(ProviderUnavailable, match="ANTHROPIC_API_KEY"):
        settings.resolve_api_key()
    assert settings.resolved_base_url() == "https://api.anthropic.com"


def test_cache_writes_are_kept_apart_for_their_price() -> None:
    # input_tokens 50 uncached, 2,000 read from the cache, 1,000 written to it: the contract's
    # input_tokens holds all 3,050, and the writes stand apart (priced at cache_write).
    events = list(
        anthropic_events(
            ["a"],
            input_tokens=50,
            cache_read=2000,
            delta_usage={
                "output_tokens": 4,
                "input_tokens": 50,
                "cache_read_input_tokens": 2000,
                "cache_creation_input_tokens": 1000,
            },
        )
    )
    with respx.mock() as router:
        router.post(URL).mock(return_value=sse_response(events))
        rec = record_one(claude())
    assert rec.usage.input_tokens == 3050
    assert rec.usage.cached_input_tokens == 2000
    assert rec.usage.cache_write_input_tokens == 1000
