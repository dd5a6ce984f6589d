"""Ollama's native `/api/chat` on the wire, via respx: the request body (options, top-level
fields), NDJSON framing read at any boundary on a scripted clock, the done object's counts and
nanosecond durations, stop reasons, and the checks on every wire value."""

from __future__ import annotations

import json

import httpx
import pytest
import respx

from labkit.errors import MalformedStream
from labkit.providers import sdk_available
from labkit.providers.base import EventClass
from labkit.providers.ollama import OllamaParser
from labkit.records import ErrorKind, StopReason
from labkit.wire.sse import NDJSONParser, SSEEvent
from tests.providers.streams import (
    ScriptedClock,
    chat,
    make_provider,
    record_one,
    split_every,
    sse_response,
)

pytestmark = pytest.mark.unit

URL = "http://127.0.0.1:11434/api/chat"


def line(obj: dict) -> bytes:
    return (json.dumps(obj, ensure_ascii=False) + "\n").encode()


def token(text: str) -> bytes:
    return line({"model": "m", "message": {"role": "assistant", "content": text}, "done": False})


DONE = {
    "model": "m",
    "message": {"role": "assistant", "content": ""},
    "done": True,
    "done_reason": "stop",
    "total_duration": 500_000_000,
    "load_duration": 3_000_000,
    "prompt_eval_count": 12,
    "prompt_eval_cached_count": 8,
    "prompt_eval_duration": 6_000_000,
    "eval_count": 3,
    "eval_duration": 90_000_000,
}


def ollama(**kw):
    # respx mocks httpx's transport: on a loopback URL `auto` would read through lean.
    kw.setdefault("transport", "httpx")
    return make_provider("ollama", **kw)


def test_defaults_no_key_no_sdk_and_a_trailing_api_is_accepted() -> None:
    provider = ollama()
    assert provider.settings.resolved_base_url() == "http://127.0.0.1:11434"
    assert provider.settings.check_available() is None
    assert provider.reports_server_timings and not sdk_available("ollama")
    assert isinstance(provider.new_framer(), NDJSONParser)
    other = ollama(base_url="http://gpu-box:11434/api")
    assert other.settings.resolved_base_url() == "http://gpu-box:11434"


def test_request_puts_sampling_under_options_and_records_what_was_sent() -> None:
    body = [token("Hi"), line(DONE)]
    provider = ollama(extra_body={"options": {"num_ctx": 8192}, "keep_alive": "5m"})
    with respx.mock() as router:
        route = router.post(URL).mock(return_value=sse_response(body))
        req = chat("Hi", system="Be brief.", temperature=0, seed=7, max_tokens=32, stop="END")
        req.params["think"] = True
        rec = record_one(provider, req)
    sent = json.loads(route.calls.last.request.content)
    assert sent["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
    ]
    assert sent["stream"] is True and sent["think"] is True and sent["keep_alive"] == "5m"
    assert sent["options"] == {
        "num_ctx": 8192,
        "temperature": 0,
        "seed": 7,
        "num_predict": 32,
        "stop": ["END"],
    }
    assert "authorization" not in route.calls.last.request.headers
    assert rec.params == {
        "temperature": 0,
        "seed": 7,
        "num_predict": 32,
        "stop": ["END"],
        "think": True,
    }


def test_done_object_becomes_usage_and_provider_timings_on_a_scripted_clock() -> None:
    clock = ScriptedClock()
    data = b"".join([token("The"), token(" sky"), token(" is"), line(DONE)])
    chunks = split_every(data, 7)  # reads end inside lines and inside the JSON
    times = [float(i) for i in range(len(chunks))]
    with respx.mock() as router:
        router.post(URL).mock(return_value=sse_response(chunks, clock=clock, times_ms=times))
        rec = record_one(ollama(), chat(), clock=clock)
    assert rec.error is None and rec.output_text == "The sky is"
    assert rec.stop_reason == StopReason.END and rec.stop_reason_raw == "stop"
    assert len(rec.client.event_offsets_ms) == 3
    # Each line is stamped at the read that brought its first byte.
    starts = [0, len(token("The")), len(token("The")) + len(token(" sky"))]
    assert rec.client.event_offsets_ms == [float(at // 7) for at in starts]
    u, pt = rec.usage, rec.provider_timings
    assert (u.input_tokens, u.output_tokens, u.cached_input_tokens) == (12, 3, 8)
    assert u.streamed_output_tokens == 3 and u.output_tokens_source == "provider"
    assert pt.prefill_ms == 6.0 and pt.prefill_tokens == 4 and pt.cached_tokens == 8
    assert pt.decode_ms == 90.0 and pt.decode_ms_per_token == 30.0 and pt.load_ms == 3.0
    assert pt.raw is not None and pt.raw["total_duration"] == 500_000_000
    assert "model" not in pt.raw and "done" not in pt.raw


def test_http_error_body_is_recorded() -> None:
    with respx.mock() as router:
        router.post(URL).mock(
            return_value=httpx.Response(404, json={"error": "model 'nope' not found"})
        )
        rec = record_one(ollama(model="nope"))
    assert rec.error is not None and rec.error.kind == ErrorKind.HTTP_STATUS
    assert rec.error.status == 404 and "not found" in (rec.error.body_excerpt or "")


def test_describe_reads_the_version() -> None:
    import asyncio

    provider = ollama()
    with respx.mock() as router:
        router.get("http://127.0.0.1:11434/api/version").mock(
            return_value=httpx.Response(200, json={"version": "0.13.1"})
        )
        described = asyncio.run(provider.describe())
    asyncio.run(provider.aclose())
    assert described == {"version": "0.13.1"} and provider.server_build == "0.13.1"


def _ev(obj: object) -> SSEEvent:
    return SSEEvent(None, json.dumps(obj), 0)


def test_classes_of_each_line() -> None:
    parser = OllamaParser()
    role_only = {"message": {"role": "assistant", "content": ""}, "done": False}
    assert parser.on_event(_ev(role_only)) == EventClass.IGNORE
    thinking = {"message": {"role": "assistant", "content": "", "thinking": "Hm"}, "done": False}
    assert parser.on_event(_ev(thinking)) == EventClass.OUTPUT
    assert parser.output_text == "" and not parser.finished
    final_with_text = {**DONE, "message": {"role": "assistant", "content": "!"}}
    assert parser.on_event(_ev(final_with_text)) == EventClass.TEXT
    assert parser.finished and parser.output_text == "!"
    assert OllamaParser().on_event(_ev(DONE)) == EventClass.DONE


def test_stop_reasons() -> None:
    def ended(reason: str | None, tool: bool = False) -> StopReason | None:
        parser = OllamaParser()
        if tool:
            calls = [{"function": {"name": "f", "arguments": {}}}]
            parser.on_event(_ev({"message": {"role": "assistant", "tool_calls": calls}}))
        final = dict(DONE)
        if reason is None:
            del final["done_reason"]
        else:
            final["done_reason"] = reason
        parser.on_event(_ev(final))
        return parser.stop_reason()

    assert ended("stop") == StopReason.END
    assert ended("length") == StopReason.LENGTH
    assert ended("stop", tool=True) == StopReason.TOOL_CALL
    assert ended("unload") == StopReason.UNKNOWN
    assert ended(None) == StopReason.END  # servers before done_reason existed
    assert OllamaParser().stop_reason() is None
    without = OllamaParser()
    without.on_event(_ev({"done": True}))
    assert without.stop_reason_raw is None  # nothing invented where the server sent nothing


def test_zero_fields_left_out_stay_null() -> None:
    parser = OllamaParser()
    parser.on_event(_ev({"done": True, "done_reason": "stop", "eval_count": 0}))
    pt = parser.provider_timings
    assert pt.load_ms is None and pt.prefill_ms is None and pt.decode_ms_per_token is None
    assert parser.usage.input_tokens is None and parser.usage.output_tokens == 0


def test_error_line_is_a_stream_error() -> None:
    parser = OllamaParser()
    assert parser.on_event(_ev({"error": "model runner crashed"})) == EventClass.META
    assert parser.error is not None and parser.error.kind == ErrorKind.STREAM_ERROR
    assert parser.error.message == "error event in stream: model runner crashed"
    assert not parser.finished


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        ({"message": "hi"}, "message is str 'hi', not an object"),
        ({"message": {"content": 5}}, "message.content is int 5"),
        ({"message": {"thinking": ["a"]}}, "message.thinking is list"),
        ({"message": {"tool_calls": {"f": 1}}}, "message.tool_calls is dict"),
        ({"done": "yes"}, "done is str 'yes', not a boolean"),
        ({"done": True, "eval_count": -1}, "eval_count is int -1"),
        ({"done": True, "prompt_eval_cached_count": 1.5}, "prompt_eval_cached_count is float"),
        ({"done": True, "eval_duration": "9"}, "eval_duration is str '9', not a number"),
        ({"done": True, "total_duration": [1]}, "total_duration is list"),
        ({"done": True, "done_reason": 3}, "done_reason is int 3"),
    ],
)
def test_wire_values_are_checked(obj: dict, message: str) -> None:
    with pytest.raises(MalformedStream) as info:
        OllamaParser().on_event(_ev(obj))
    assert message in str(info.value)
