"""The stream recorder where real time is the thing under test: a total timeout that has to
fire on the event loop, and the loop-lag probe seeing a loop that was really blocked."""

from __future__ import annotations

import pytest
import respx

from labkit.records import ErrorKind, StopReason
from tests.providers.streams import make_provider, oa_usage, openai_events, record_one, sse_response

pytestmark = pytest.mark.integration

BASE = "http://vllm.test:8000/v1"


def test_total_timeout_keeps_timings_reached() -> None:
    events = list(openai_events(["a", "b"], usage=oa_usage(7, 2)))
    # Role and "a" at once, then a stall far longer than the 0.2 s total timeout.
    response = sse_response(events, sleep_s=[0, 0, 5, 0, 0, 0, 0])
    provider = make_provider(
        "openai_compatible", base_url=BASE, timeouts={"total": 0.2}, transport="httpx"
    )
    with respx.mock(assert_all_called=True) as router:
        router.post(f"{BASE}/chat/completions").mock(return_value=response)
        rec = record_one(provider)
    assert rec.error is not None and rec.error.kind == ErrorKind.TIMEOUT
    assert "total timeout of 0.2 s" in rec.error.message
    assert rec.client.ttft_ms is not None and rec.client.event_offsets_ms == [rec.client.ttft_ms]
    assert rec.output_text == "a"
    assert rec.stop_reason == StopReason.ERROR
