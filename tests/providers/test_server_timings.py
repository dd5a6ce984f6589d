"""The server-timing readers of the OpenAI-compatible parser, fed events directly."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from labkit.errors import MalformedStream
from labkit.providers.base import EventClass
from labkit.providers.llamacpp import LlamaCppParser
from labkit.providers.openai import OpenAIChatParser
from labkit.records import ErrorKind
from labkit.wire.sse import SSEEvent, SSEParser

pytestmark = pytest.mark.unit


def ev(obj: dict[str, Any]) -> SSEEvent:
    return SSEEvent(None, json.dumps(obj), 0)


def token(text: str, **extra: Any) -> dict[str, Any]:
    return {"id": "c", "choices": [{"index": 0, "delta": {"content": text}}], **extra}


def finish(**extra: Any) -> dict[str, Any]:
    return {"id": "c", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}], **extra}


TIMINGS = {"prompt_n": 5, "prompt_ms": 12.0, "predicted_n": 2, "predicted_ms": 8.0}


def test_sse_counts_comments_before_the_first_event_only() -> None:
    framer = SSEParser()
    framer.feed(b": keep-alive\n\n", 100)
    framer.feed(b": keep-alive\n\n", 250)
    events = framer.feed(b'data: {"a":1}\n\n: keep-alive\n\ndata: {"b":2}\n\n', 400)
    assert len(events) == 2
    assert framer.comments_before_first_event == 2
    assert framer.last_comment_t_ns == 250


def test_read_framing_turns_the_comments_into_milliseconds_from_t_start() -> None:
    framer = SSEParser()
    framer.feed(b": keep-alive\n\n", 3_000_000)
    parser = OpenAIChatParser()
    parser.read_framing(framer, t_start_ns=1_000_000)
    assert parser.provider_timings.keepalive_comments == 1
    assert parser.provider_timings.keepalive_last_ms == 2.0


def test_no_comments_leave_the_keepalive_fields_null() -> None:
    parser = OpenAIChatParser()
    parser.read_framing(SSEParser(), 0)
    assert parser.provider_timings.keepalive_comments is None


def test_per_token_timings_are_read_once_not_on_every_token_chunk() -> None:
    parser = LlamaCppParser()
    assert parser.on_event(ev(token("a", timings=TIMINGS))) == EventClass.TEXT
    assert parser.provider_timings.prefill_ms is None  # kept by reference, not read yet
    parser.settle()
    pt = parser.provider_timings
    assert (pt.prefill_ms, pt.decode_ms, pt.prefill_tokens) == (12.0, 8.0, 5)
    assert parser.usage.output_tokens == 2  # no usage object: counts from timings


def test_the_finish_chunk_reads_its_timings_at_once_and_drops_the_pending_ones() -> None:
    parser = LlamaCppParser()
    parser.on_event(ev(token("a", timings={**TIMINGS, "predicted_ms": 1.0})))
    parser.on_event(ev(finish(timings=TIMINGS)))
    assert parser.provider_timings.decode_ms == 8.0
    parser.settle()
    assert parser.provider_timings.decode_ms == 8.0


def test_a_malformed_deferred_timing_becomes_a_protocol_error_at_settle() -> None:
    parser = LlamaCppParser()
    parser.on_event(ev(token("a", timings={"prompt_ms": "slow"})))
    parser.settle()
    assert parser.error is not None and parser.error.kind == ErrorKind.PROTOCOL
    assert "timings.prompt_ms" in parser.error.message


def test_timings_that_are_not_an_object_are_malformed_at_once() -> None:
    with pytest.raises(MalformedStream, match="timings"):
        LlamaCppParser().on_event(ev(token("a", timings=[1, 2])))


def test_groq_timings_are_read_beside_a_top_level_usage() -> None:
    parser = OpenAIChatParser("auto")
    usage = {"prompt_tokens": 4, "completion_tokens": 1}
    groq = {"usage": {"queue_time": 0.5, "prompt_time": 0.25, "prompt_tokens": 99}}
    parser.on_event(ev(finish(usage=usage, x_groq=groq)))
    assert parser.usage.input_tokens == 4  # the top-level usage counts, not x_groq's
    assert parser.provider_timings.queue_ms == 500.0
    assert parser.provider_timings.prefill_ms == 250.0


def test_a_metrics_object_of_another_shape_is_not_taken_for_vllm() -> None:
    parser = OpenAIChatParser("auto")
    parser.on_event(ev(finish(metrics={"latency": 3})))
    assert parser.provider_timings.source is None and parser.provider_timings.raw is None


def test_a_wrong_type_in_a_documented_shape_is_malformed() -> None:
    with pytest.raises(MalformedStream, match=r"time_info\.queue_time"):
        OpenAIChatParser("auto").on_event(ev(finish(time_info={"queue_time": "0.1"})))


def test_the_openai_kind_reads_no_compatible_server_shapes() -> None:
    parser = OpenAIChatParser("openai")
    parser.on_event(ev(finish(time_info={"queue_time": 0.1}, timings=TIMINGS)))
    parser.on_headers(httpx.Headers({"x-queue-time": "5"}))
    parser.settle()
    assert parser.provider_timings.queue_ms is None and parser.provider_timings.prefill_ms is None


def test_a_garbled_timing_header_is_dropped_not_fatal() -> None:
    parser = OpenAIChatParser("tgi")
    parser.on_headers(httpx.Headers({"x-queue-time": "soon", "x-inference-time": "12"}))
    pt = parser.provider_timings
    assert (pt.queue_ms, pt.inference_ms, pt.source) == (None, 12.0, "tgi")
    assert pt.raw == {"headers": {"x-inference-time": "12"}}


def test_tgi_compute_time_stands_in_for_a_missing_total() -> None:
    parser = OpenAIChatParser("auto")
    parser.on_headers(httpx.Headers({"x-queue-time": "3", "x-compute-time": "40"}))
    assert parser.provider_timings.server_total_ms == 40.0


def test_fireworks_strings_in_perf_metrics_are_seconds_too() -> None:
    parser = OpenAIChatParser("fireworks")
    metrics = {"fireworks-server-time-to-first-token": "0.5"}
    parser.on_event(ev(finish(perf_metrics=metrics)))
    assert parser.provider_timings.server_ttft_ms == 500.0


def test_fake_server_command_refuses_an_unknown_timing_shape() -> None:
    from typer.testing import CliRunner

    from labkit.cli import app

    result = CliRunner().invoke(app, ["fake-server", "--server-timings", "sglang"])
    assert result.exit_code != 0
    assert "--server-timings must be one of" in result.output


def test_a_forced_hint_still_reads_groq_usage_counts_but_not_its_timings() -> None:
    parser = OpenAIChatParser("vllm")
    groq = {"usage": {"queue_time": 0.5, "prompt_tokens": 7, "completion_tokens": 1}}
    parser.on_event(ev(finish(x_groq=groq)))
    assert parser.usage.input_tokens == 7
    assert parser.provider_timings.queue_ms is None
