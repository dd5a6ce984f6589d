"""TTFT split into provider queue, provider prefill and network + front end, and the load
answer's account of the server's queue, from synthetic records with known values."""

from __future__ import annotations

from typing import Any

import pytest

from labkit.analysis.split import ttft_split
from labkit.experiments.attribution import AttributionExperiment, AttributionSettings
from labkit.figures import AttributionKey, LoadLevel, Quantile
from labkit.records import RequestRecord
from labkit.wording import server_queue_sentence
from tests.support.records import make_record

pytestmark = pytest.mark.unit


def v(q: Quantile | None) -> float | None:
    """A median's value (None: not derived)."""
    return None if q is None else q.value


def rec(ttft: float, tags: dict[str, Any] | None = None, **timings: Any) -> RequestRecord:
    r = make_record(experiment="attribution", ttft_ms=ttft, tags=tags or {"connection": "fresh"})
    for name, value in timings.items():
        setattr(r.provider_timings, name, value)
    return r


def test_a_reported_queue_is_taken_out_of_ttft_with_the_prefill() -> None:
    split = ttft_split([rec(40.0, queue_ms=5.0, prefill_ms=20.0)])
    assert (v(split.provider_queue_ms), split.queue_source) == (5.0, "reported")
    assert (v(split.provider_prefill_ms), v(split.network_front_end_ms)) == (20.0, 15.0)
    assert split.not_derived == []


def test_a_managed_server_within_its_slots_has_no_queue_by_construction() -> None:
    tags = {"connection": "fresh", "server_slots": 2, "in_flight_max": 2}
    answer = AttributionExperiment(AttributionSettings()).analyze(
        "local", "m", [rec(150.0, tags, prefill_ms=140.0)]
    )
    split = answer.figures.ttft_split
    assert (v(split.provider_queue_ms), split.queue_source) == (0.0, "idle")
    assert v(split.network_front_end_ms) == 10.0
    assert "by construction" in answer.answer, answer.answer
    rows = {r.key: r for r in answer.figures.rows}
    assert rows[AttributionKey.PROVIDER_QUEUE].value_ms == 0.0
    assert rows[AttributionKey.NETWORK_FRONT_END].value_ms == 10.0


def test_more_requests_in_flight_than_slots_leave_the_queue_underived() -> None:
    tags = {"connection": "fresh", "server_slots": 1, "in_flight_max": 4}
    answer = AttributionExperiment(AttributionSettings()).analyze(
        "local", "m", [rec(150.0, tags, prefill_ms=140.0)]
    )
    split = answer.figures.ttft_split
    assert split.provider_queue_ms is None and split.network_front_end_ms is None
    assert v(split.provider_prefill_ms) == 140.0
    assert "no queue time" in split.not_derived[0]
    assert "Not derived" in answer.answer and "could not be split further" in answer.answer
    rows = {r.key: r for r in answer.figures.rows}
    assert rows[AttributionKey.NETWORK_FRONT_END].note.startswith("cannot be separated")


def test_the_servers_own_ttft_stands_in_for_prefill() -> None:
    split = ttft_split([rec(80.0, queue_ms=10.0, server_ttft_ms=50.0)])
    assert split.prefill_source == "provider_timings.server_ttft_ms"
    assert v(split.network_front_end_ms) == 20.0


def test_keepalive_comments_measure_the_wait_after_the_headers() -> None:
    r = rec(900.0, keepalive_comments=3, prefill_ms=None)
    r.client.headers_ms, r.client.first_event_ms = 5.0, 805.0
    split = ttft_split([r])
    assert (v(split.provider_queue_ms), split.queue_source) == (800.0, "keepalive")
    assert split.provider_prefill_ms is None
    assert "no prefill time" in split.not_derived[0]


def test_a_provider_reporting_nothing_gets_no_split_and_says_so() -> None:
    split = ttft_split([rec(300.0)])
    assert split.provider_queue_ms is None and split.provider_prefill_ms is None
    assert len(split.not_derived) == 2


def level(title: str, **figures: Any) -> LoadLevel:
    return LoadLevel(level=title, title=title, mode="concurrency", target=1, ok=4, **figures)


def test_a_reported_queue_that_rises_is_said_to() -> None:
    text = server_queue_sentence(
        [
            level("concurrency 1", provider_queue_ms_p50=0.5, provider_queue_ms_p99=1.0),
            level("concurrency 8", provider_queue_ms_p50=40.0, provider_queue_ms_p99=90.0),
        ]
    )
    assert "went from 0.50 ms at concurrency 1 to 40.00 ms at concurrency 8" in text
    assert "rose: requests waited in the server's queue" in text


def test_a_flat_reported_queue_is_said_not_to_rise() -> None:
    text = server_queue_sentence(
        [level("c1", provider_queue_ms_p50=0.5), level("c8", provider_queue_ms_p50=0.6)]
    )
    assert "did not rise" in text


def test_without_a_reported_queue_the_rise_beyond_prefill_is_derived() -> None:
    text = server_queue_sentence(
        [
            level("c1", ttft_beyond_prefill_ms_p50=3.0),
            level("c3", ttft_beyond_prefill_ms_p50=1026.0),
        ]
    )
    assert "reports no queue time" in text and "1023.0 ms more per request" in text
    assert "derived, not reported" in text


def test_nothing_to_say_without_server_timings() -> None:
    assert server_queue_sentence([level("c1"), level("c8")]) == ""
