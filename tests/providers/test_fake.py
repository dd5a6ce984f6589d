"""The fake provider through its own in-process transport: every scripted outcome."""

from __future__ import annotations

import pytest

from labkit.records import ErrorKind, StopReason
from tests.providers.streams import chat, make_provider, record_one

FAST = {"first_token_ms": 0, "token_interval_ms": 0}


def fake(**schedule):
    return make_provider("fake", schedule={**FAST, **schedule})


@pytest.mark.integration
def test_scripted_stream_is_recorded_like_a_real_one() -> None:
    rec = record_one(fake(tokens=12, first_token_ms=30, token_interval_ms=2))
    assert rec.error is None
    assert rec.provider_kind == "fake" and rec.model == "test-model"
    assert rec.usage.output_tokens == 12 and rec.usage.output_tokens_source == "provider"
    assert rec.usage.input_tokens == 2  # "Say hi." → two words
    assert rec.stop_reason == StopReason.END and rec.stop_reason_raw == "stop"
    assert len(rec.client.event_offsets_ms) == 12
    assert rec.request_id is not None and rec.response_id.startswith("chatcmpl-fake-")
    assert len(rec.output_text.split()) == 12
    c = rec.client
    # Lower bounds only: the fake provider really sleeps, and a sleep never returns early.
    assert c.ttft_ms >= 30.0
    # The schedule is absolute from the start of the response: token 12 at 30 + 11 × 2 ms.
    assert c.last_token_ms >= 30.0 + 11 * 2
    assert c.e2e_ms >= c.last_token_ms >= c.ttft_ms


@pytest.mark.unit
def test_max_tokens_caps_and_reports_length() -> None:
    rec = record_one(fake(tokens=50), chat(max_tokens=5))
    assert rec.usage.output_tokens == 5
    assert rec.stop_reason == StopReason.LENGTH and rec.stop_reason_raw == "length"
    assert rec.params == {"max_tokens": 5}


@pytest.mark.integration
def test_multi_token_events() -> None:
    rec = record_one(fake(tokens=9, tokens_per_event=4, token_interval_ms=5))
    assert len(rec.client.event_offsets_ms) == 3
    assert rec.usage.output_tokens == 9
    offs = rec.client.event_offsets_ms
    assert rec.client.decode_ms_per_token == (offs[-1] - offs[0]) / 8


@pytest.mark.unit
def test_no_usage_chunk_counts_locally() -> None:
    rec = record_one(fake(tokens=6, usage=False))
    assert rec.error is None
    assert rec.usage.output_tokens == 6 and rec.usage.output_tokens_source == "local"
    assert rec.usage.input_tokens is None


@pytest.mark.unit
def test_scripted_http_status_with_retry_after() -> None:
    rec = record_one(fake(fail="http_status", fail_status=429, retry_after_s=1.5))
    e = rec.error
    assert e is not None and e.kind == ErrorKind.HTTP_STATUS
    assert e.status == 429 and e.retry_after_s == 1.5
    assert "scripted HTTP 429" in e.message and "scripted_error" in (e.body_excerpt or "")
    assert rec.stop_reason == StopReason.ERROR


@pytest.mark.unit
def test_scripted_stream_error() -> None:
    rec = record_one(fake(tokens=10, fail="stream_error", fail_after_tokens=3))
    assert rec.error is not None and rec.error.kind == ErrorKind.STREAM_ERROR
    assert "scripted failure" in rec.error.message
    assert len(rec.client.event_offsets_ms) == 3


@pytest.mark.unit
def test_scripted_drop() -> None:
    rec = record_one(fake(tokens=10, fail="drop", fail_after_tokens=4))
    assert rec.error is not None and rec.error.kind == ErrorKind.CONNECTION
    assert "mid-stream" in rec.error.message
    assert len(rec.client.event_offsets_ms) == 4
    assert rec.client.e2e_ms is None


@pytest.mark.unit
def test_drop_before_any_token() -> None:
    rec = record_one(fake(tokens=10, fail="drop", fail_after_tokens=0))
    assert rec.error is not None and rec.error.kind == ErrorKind.CONNECTION
    assert "after the response headers" in rec.error.message
    assert rec.client.headers_ms is not None and rec.client.ttft_ms is None
