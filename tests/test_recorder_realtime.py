"""The stream recorder where real time is the thing under test: a total timeout that has to
fire on the event loop, and the loop-lag probe seeing a loop that was really blocked."""

from __future__ import annotations

import asyncio
import time

import pytest
import respx

from labkit.measurement.recorder import LoopLagMonitor
from labkit.records import ErrorKind, StopReason
from tests.streams import make_provider, oa_usage, openai_events, record_one, sse_response

pytestmark = pytest.mark.integration

BASE = "http://vllm.test:8000/v1"


def test_total_timeout_keeps_timings_reached() -> None:
    events = list(openai_events(["a", "b"], usage=oa_usage(7, 2)))
    # Role and "a" at once, then a stall far longer than the 0.2 s total timeout.
    response = sse_response(events, sleep_s=[0, 0, 5, 0, 0, 0, 0])
    provider = make_provider("openai_compatible", base_url=BASE, timeouts={"total": 0.2})
    with respx.mock(assert_all_called=True) as router:
        router.post(f"{BASE}/chat/completions").mock(return_value=response)
        rec = record_one(provider)
    assert rec.error is not None and rec.error.kind == ErrorKind.TIMEOUT
    assert "total timeout of 0.2 s" in rec.error.message
    assert rec.client.ttft_ms is not None and rec.client.event_offsets_ms == [rec.client.ttft_ms]
    assert rec.output_text == "a"
    assert rec.stop_reason == StopReason.ERROR


def test_loop_lag_monitor_reports_a_blocked_loop() -> None:
    async def go() -> tuple[float | None, float | None, float | None]:
        mon = LoopLagMonitor(interval_s=0.002)
        mon.start()
        await asyncio.sleep(0.02)
        t0 = time.perf_counter_ns()
        time.sleep(0.05)  # block the loop
        await asyncio.sleep(0.01)
        t1 = time.perf_counter_ns()
        await mon.stop()
        return (
            mon.lag_ms(t0, t1),
            mon.lag_ms(t0, t1, on_arrival=True),
            mon.lag_ms(t1 + 10**12, t1 + 2 * 10**12),
        )

    lag, callback_lag, none = asyncio.run(go())
    # Both probes see the 50 ms block (fewer than 100 samples: the largest one). Lower bounds
    # only, 10 ms under the block: a probe that was already due when the block began reports
    # up to one 2 ms interval less, and a busy machine can only make the lag larger.
    assert lag is not None and lag >= 40.0
    assert callback_lag is not None and callback_lag >= 40.0
    assert none is None
