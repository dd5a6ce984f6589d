"""OpenAI Chat Completions (kinds `openai` and `openai_compatible`) on the wire, via respx."""

from __future__ import annotations

import json

import pytest
import respx

from labkit.errors import ProviderUnavailable
from labkit.providers.openai import OpenAISettings
from labkit.records import StopReason
from tests.providers.streams import (
    ScriptedClock,
    chat,
    load_sse,
    make_provider,
    oa_chunk,
    oa_usage,
    openai_events,
    record_one,
    sse,
    sse_response,
)

pytestmark = pytest.mark.unit

OPENAI_URL = "https://api.openai.com/v1/chat/completions"
COMPAT_URL = "http://vllm.test:8000/v1/chat/completions"


def openai(**kw):
    return make_provider("openai", api_key="sk-test-key", **{"model": "gpt-4.1-mini", **kw})


def compat(**kw):
    return make_provider(
        "openai_compatible", base_url="http://vllm.test:8000/v1", **{"transport": "httpx", **kw}
    )


def sent_body(route: respx.Route) -> dict:
    return json.loads(route.calls.last.request.content)


def test_openai_request_body_headers_and_param_rename() -> None:
    with respx.mock() as router:
        route = router.post(OPENAI_URL).mock(return_value=sse_response(openai_events(["x"])))
        req = chat("Hi", system="Be brief.", max_tokens=32, temperature=0, seed=7)
        rec = record_one(openai(extra_body={"service_tier": "flex"}), req)
    body = sent_body(route)
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["max_completion_tokens"] == 32 and "max_tokens" not in body
    assert body["temperature"] == 0 and body["seed"] == 7
    assert body["service_tier"] == "flex"
    assert body["model"] == "gpt-4.1-mini"
    assert body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
    ]
    headers = route.calls.last.request.headers
    assert headers["authorization"] == "Bearer sk-test-key"
    assert headers["accept-encoding"] == "identity"
    # The record stores the parameters actually sent.
    assert rec.params == {"max_completion_tokens": 32, "temperature": 0, "seed": 7}


def test_compatible_keeps_max_tokens_and_always_asks_usage() -> None:
    with respx.mock() as router:
        route = router.post(COMPAT_URL).mock(return_value=sse_response(openai_events(["x"])))
        rec = record_one(compat(params={"max_tokens": 99, "temperature": 1}), chat(temperature=0))
    body = sent_body(route)
    assert body["max_tokens"] == 99 and "max_completion_tokens" not in body
    assert body["temperature"] == 0  # the request's params override the provider's defaults
    assert body["stream_options"] == {"include_usage": True}
    assert "authorization" not in route.calls.last.request.headers
    assert rec.params == {"max_tokens": 99, "temperature": 0}


def test_compatible_sends_a_key_when_given() -> None:
    with respx.mock() as router:
        route = router.post(COMPAT_URL).mock(return_value=sse_response(openai_events(["x"])))
        provider = make_provider(
            "openai_compatible",
            api_key="vllm-key",
            base_url="http://vllm.test:8000/v1/",
            transport="httpx",
        )
        record_one(provider)
    assert route.calls.last.request.headers["authorization"] == "Bearer vllm-key"


def test_headers_identifiers_and_usage_details() -> None:
    headers = {
        "x-request-id": "req_abc123",
        "openai-processing-ms": "187",
        "x-ratelimit-limit-requests": "5000",
        "x-ratelimit-remaining-requests": "4999",
        "x-ratelimit-reset-tokens": "6ms",
        "openai-organization": "org-x",
    }
    usage = oa_usage(2100, 3, cached_tokens=2048, reasoning_tokens=0)
    events = openai_events(["a", "b", "c"], usage=usage, fingerprint="fp_44709d6fcb")
    with respx.mock() as router:
        router.post(OPENAI_URL).mock(return_value=sse_response(events, headers=headers))
        rec = record_one(openai(organization="org-x"))
    assert rec.error is None
    assert rec.request_id == "req_abc123"
    assert rec.provider_timings.processing_ms == 187.0
    assert rec.system_fingerprint == "fp_44709d6fcb"
    assert rec.response_id == "chatcmpl-test1"
    assert rec.rate_limits == {
        "x-ratelimit-limit-requests": "5000",
        "x-ratelimit-remaining-requests": "4999",
        "x-ratelimit-reset-tokens": "6ms",
    }
    assert rec.usage.input_tokens == 2100 and rec.usage.output_tokens == 3
    assert rec.usage.cached_input_tokens == 2048
    assert rec.provider_timings.cached_tokens == 2048
    assert rec.usage.reasoning_tokens == 0
    assert rec.provider_timings.prefill_ms is None  # OpenAI reports no prefill time


def test_bad_processing_ms_header_is_ignored() -> None:
    with respx.mock() as router:
        router.post(COMPAT_URL).mock(
            return_value=sse_response(openai_events(["a"]), headers={"openai-processing-ms": "n/a"})
        )
        rec = record_one(compat())
    assert rec.error is None and rec.provider_timings.processing_ms is None
    assert rec.request_id is None and rec.rate_limits is None


def test_usage_chunk_with_empty_choices_is_meta_not_output() -> None:
    clock = ScriptedClock()
    events = list(openai_events(["a", "b"], usage=oa_usage(5, 2)))
    with respx.mock() as router:
        router.post(COMPAT_URL).mock(
            return_value=sse_response(events, clock=clock, times_ms=[1, 10, 20, 30, 40, 50])
        )
        rec = record_one(compat(), clock=clock)
    assert rec.client.event_offsets_ms == [10.0, 20.0]
    assert rec.client.last_token_ms == 20.0 and rec.client.e2e_ms == 50.0
    assert rec.usage.input_tokens == 5 and rec.usage.output_tokens == 2


def test_reasoning_counts_for_ttft_not_ttft_text() -> None:
    clock = ScriptedClock()
    events = [
        sse(oa_chunk(role="assistant")),
        sse(oa_chunk(reasoning="Let me think")),
        # Reasoning that holds its 38 counted tokens (a count the stream cannot hold is
        # unaccounted: account_for_stream).
        sse(
            oa_chunk(
                reasoning=" more about which of the two numbers is the larger one, and"
                " then about how to say it in one word without any other words around it"
                " at all, since the question asks for exactly one word."
            )
        ),
        sse(oa_chunk("Answer")),
        sse(oa_chunk(finish="stop")),
        sse(oa_chunk(choices=False, usage=oa_usage(10, 40, reasoning_tokens=38))),
        b"data: [DONE]\n\n",
    ]
    with respx.mock() as router:
        router.post(OPENAI_URL).mock(
            return_value=sse_response(
                events, clock=clock, times_ms=[5, 100, 150, 900, 901, 902, 903]
            )
        )
        rec = record_one(openai(model="o4-mini"), clock=clock)
    c = rec.client
    assert c.first_event_ms == 100.0
    assert c.ttft_ms == 100.0
    assert c.ttft_text_ms == 900.0
    assert c.event_offsets_ms == [100.0, 150.0, 900.0]
    assert rec.output_text == "Answer"  # reasoning is not visible text
    assert rec.usage.reasoning_tokens == 38 and rec.usage.output_tokens == 40
    assert c.decode_ms_per_token == (900.0 - 100.0) / 39


def test_tool_call_deltas_are_output() -> None:
    tool = {
        "index": 0,
        "id": "call_1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": ""},
    }
    args = {"index": 0, "function": {"arguments": '{"city":"Oslo"}'}}
    events = [
        sse(oa_chunk(role="assistant")),
        sse({"id": "c", "choices": [{"index": 0, "delta": {"tool_calls": [tool]}}]}),
        sse({"id": "c", "choices": [{"index": 0, "delta": {"tool_calls": [args]}}]}),
        sse(oa_chunk(finish="tool_calls")),
        b"data: [DONE]\n\n",
    ]
    with respx.mock() as router:
        router.post(COMPAT_URL).mock(return_value=sse_response(events))
        rec = record_one(compat())
    assert rec.error is None
    assert rec.stop_reason == StopReason.TOOL_CALL and rec.stop_reason_raw == "tool_calls"
    assert len(rec.client.event_offsets_ms) == 2
    assert rec.client.ttft_text_ms is None  # no visible text at all
    assert rec.usage.output_tokens == 2 and rec.usage.output_tokens_source == "local"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("stop", StopReason.END),
        ("length", StopReason.LENGTH),
        ("tool_calls", StopReason.TOOL_CALL),
        ("function_call", StopReason.TOOL_CALL),
        ("content_filter", StopReason.CONTENT_FILTER),
        ("something_new", StopReason.UNKNOWN),
    ],
)
def test_stop_reason_normalised_raw_kept(raw: str, expected: StopReason) -> None:
    with respx.mock() as router:
        router.post(OPENAI_URL).mock(
            return_value=sse_response(openai_events(["a"], finish=raw, usage=oa_usage(1, 1)))
        )
        rec = record_one(openai())
    assert rec.stop_reason == expected
    assert rec.stop_reason_raw == raw


def test_no_finish_reason_gives_no_stop_reason() -> None:
    events = [sse(oa_chunk("a")), b"data: [DONE]\n\n"]
    with respx.mock() as router:
        router.post(COMPAT_URL).mock(return_value=sse_response(events))
        rec = record_one(compat())
    assert rec.error is None and rec.stop_reason is None and rec.stop_reason_raw is None


def test_recorded_openai_stream() -> None:
    raw = load_sse("openai_chat.sse")
    chunks = [raw[i : i + 50] for i in range(0, len(raw), 50)]
    with respx.mock() as router:
        router.post(OPENAI_URL).mock(
            return_value=sse_response(chunks, headers={"x-request-id": "req_1"})
        )
        rec = record_one(openai(model="gpt-4.1-mini"))
    assert rec.error is None
    assert rec.output_text == "A token is a piece of text."
    assert rec.response_id == "chatcmpl-Bx7q2"
    assert rec.system_fingerprint == "fp_6f2eabb9a5"
    assert rec.usage.input_tokens == 14 and rec.usage.output_tokens == 7
    assert rec.usage.cached_input_tokens == 0 and rec.usage.reasoning_tokens == 0
    assert rec.stop_reason == StopReason.END
    assert len(rec.client.event_offsets_ms) == 6


def test_a_json_value_that_is_not_an_object_is_protocol() -> None:
    with respx.mock() as router:
        router.post(COMPAT_URL).mock(
            return_value=sse_response([b"data: [1, 2]\n\n", b"data: [DONE]\n\n"])
        )
        rec = record_one(compat())
    assert rec.error is not None and rec.error.kind == "protocol"


def test_missing_openai_key_names_the_variable() -> None:
    settings = OpenAISettings(id="gpt", kind="openai", model="gpt-4.1-mini")
    with pytest.raises(ProviderUnavailable, match="OPENAI_API_KEY"):
        settings.resolve_api_key()


def test_key_read_from_named_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_OPENAI_KEY", "sk-from-env")
    settings = OpenAISettings(id="gpt", kind="openai", model="m", api_key_env="MY_OPENAI_KEY")
    assert settings.resolve_api_key() == "sk-from-env"


def test_local_input_count_with_offline_tiktoken() -> None:
    with respx.mock() as router:
        router.post(OPENAI_URL).mock(return_value=sse_response(openai_events(["a"])))
        rec = record_one(openai(model="gpt-4-turbo"), chat("hello world"))
    assert rec.usage.input_tokens_local == 2
    assert rec.usage.tokenizer == "tiktoken:cl100k_base"
