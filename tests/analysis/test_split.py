"""TTFT split into labkit's own time, provider queue, provider prefill and network + front
end — parts that add up to the mean TTFT — and the load answer's account of the server's
queue, from synthetic records with known values."""

from __future__ import annotations

from typing import Any

import pytest

from labkit.analysis.split import ttft_split
from labkit.experiments.attribution import AttributionExperiment, AttributionSettings
from labkit.figures import AttributionKey, LoadLevel, Mean, Quantile, TTFTSplit
from labkit.figures.requests import OLDER_SPLIT
from labkit.records import RequestRecord
from labkit.wording import server_queue_sentence
from tests.support.records import make_record

pytestmark = pytest.mark.unit


def v(q: Quantile | Mean | None) -> float | None:
    """A figure's value (None: not derived)."""
    return None if q is None else q.value


def rec(
    ttft: float,
    tags: dict[str, Any] | None = None,
    send_ms: float | None = 1.0,
    **timings: Any,
) -> RequestRecord:
    r = make_record(experiment="attribution", ttft_ms=ttft, tags=tags or {"connection": "fresh"})
    r.client.send_ms = send_ms
    for name, value in timings.items():
        setattr(r.provider_timings, name, value)
    return r


def test_a_reported_queue_is_taken_out_of_ttft_with_the_prefill_and_labkits_send() -> None:
    split = ttft_split([rec(40.0, queue_ms=5.0, prefill_ms=20.0)])
    assert (v(split.provider_queue_ms), split.queue_source) == (5.0, "reported")
    assert (v(split.provider_prefill_ms), v(split.labkit_ms)) == (20.0, 1.0)
    assert v(split.network_front_end_ms) == 14.0
    assert split.not_derived == []


def test_the_parts_add_up_to_the_mean_ttft_exactly() -> None:
    """Means add, medians do not: over requests whose parts differ, labkit's own + queue +
    prefill + network and front end is the mean TTFT, to the last bit of a float's error."""
    records = [
        rec(40.0, send_ms=1.0, queue_ms=5.0, prefill_ms=20.0),
        rec(90.0, send_ms=0.5, queue_ms=0.0, prefill_ms=80.0),
        rec(33.0, send_ms=3.0, queue_ms=1.0, prefill_ms=9.0),
        rec(61.0, send_ms=0.2, queue_ms=30.0, prefill_ms=10.0),
    ]
    s = ttft_split(records)
    parts = [s.labkit_ms, s.provider_queue_ms, s.provider_prefill_ms, s.network_front_end_ms]
    assert sum(v(p) or 0.0 for p in parts) == pytest.approx(v(s.ttft_ms), abs=1e-9)
    assert v(s.ttft_ms) == pytest.approx(56.0)
    assert all(p is not None and p.n == 4 and p.lo is not None for p in parts)
    # the medians of the parts would not: 0.75 + 3 + 15 + (median of the rests)
    assert s.ttft_ms is not None and s.ttft_ms.lo is not None and s.ttft_ms.lo < 56.0


def test_a_request_missing_a_part_is_left_out_of_every_part() -> None:
    s = ttft_split([rec(40.0, queue_ms=5.0, prefill_ms=20.0), rec(500.0, queue_ms=5.0)])
    assert s.n_requests == 2 and s.ttft_ms is not None and s.ttft_ms.n == 1
    assert v(s.ttft_ms) == 40.0


def test_labkits_send_not_observed_stays_inside_network_and_says_so() -> None:
    s = ttft_split([rec(40.0, send_ms=None, queue_ms=5.0, prefill_ms=20.0)])
    assert s.labkit_ms is None and v(s.network_front_end_ms) == 15.0
    assert "send was not observed" in s.not_derived[0]


def test_an_older_split_of_medians_reads_as_not_shown() -> None:
    median = {"q": 0.5, "value": 12.0, "lo": 10.0, "hi": 14.0, "n": 6, "min_n": 6}
    old = TTFTSplit.model_validate(
        {"ttft_ms": median, "provider_prefill_ms": median, "client_send_ms": median}
    )
    assert old.ttft_ms is None and old.not_derived == [OLDER_SPLIT]


def test_a_managed_server_within_its_slots_has_no_queue_by_construction() -> None:
    tags = {"connection": "fresh", "server_slots": 2, "in_flight_max": 2}
    answer = AttributionExperiment(AttributionSettings()).analyze(
        "local", "m", [rec(150.0, tags, prefill_ms=140.0)]
    )
    split = answer.figures.ttft_split
    assert (v(split.provider_queue_ms), split.queue_source) == (0.0, "idle")
    assert v(split.network_front_end_ms) == 9.0  # 150 − 1 sent − 0 queued − 140 prefill
    assert "by construction" in answer.answer, answer.answer
    rows = {r.key: r for r in answer.figures.rows}
    assert rows[AttributionKey.PROVIDER_QUEUE].value_ms == 0.0
    assert rows[AttributionKey.NETWORK_FRONT_END].value_ms == 9.0


def test_more_requests_in_flight_than_slots_leave_the_queue_underived() -> None:
    tags = {"connection": "fresh", "server_slots": 1, "in_flight_max": 4}
    answer = AttributionExperiment(AttributionSettings()).analyze(
        "local", "m", [rec(150.0, tags, prefill_ms=140.0)]
    )
    split = answer.figures.ttft_split
    assert split.provider_queue_ms is None and split.network_front_end_ms is None
    assert v(split.provider_prefill_ms) == 140.0
    assert v(split.unsplit_ms) == 9.0  # 150 − 1 sent − 140 prefill: queue and network
    assert "no queue time" in split.not_derived[0]
    assert "the queue, network and front end together" in answer.answer, answer.answer
    rows = {r.key: r for r in answer.figures.rows}
    assert rows[AttributionKey.NETWORK_FRONT_END].note.startswith("cannot be separated")


def test_the_servers_own_ttft_stands_in_for_prefill() -> None:
    split = ttft_split([rec(80.0, queue_ms=10.0, server_ttft_ms=50.0)])
    assert split.prefill_source == "provider_timings.server_ttft_ms"
    assert v(split.network_front_end_ms) == 19.0


def test_keepalive_comments_measure_the_wait_after_the_headers() -> None:
    r = rec(900.0, keepalive_comments=3, prefill_ms=None)
    r.client.headers_ms, r.client.first_event_ms = 5.0, 805.0
    split = ttft_split([r])
    assert (v(split.provider_queue_ms), split.queue_source) == (800.0, "keepalive")
    assert split.provider_prefill_ms is None
    assert v(split.unsplit_ms) == 99.0  # prefill and network together: 900 − 1 − 800
    assert "no prefill time" in split.not_derived[0]


def test_a_gateways_processing_comments_are_no_queue_and_the_answer_says_why() -> None:
    # OpenRouter's `: OPENROUTER PROCESSING` comments hold its own wait for the upstream:
    # that provider's queue and prefill together. Never labelled the provider's queue.
    r = rec(900.0, keepalive_comments=3, keepalive_gateway="openrouter")
    r.client.headers_ms, r.client.first_event_ms = 5.0, 805.0
    answer = AttributionExperiment(AttributionSettings()).analyze("gw", "m", [r])
    split = answer.figures.ttft_split
    assert split.provider_queue_ms is None and split.queue_source is None
    assert split.behind_gateway == "openrouter"
    assert any("behind the gateway (openrouter)" in why for why in split.not_derived)
    assert "cannot separate" in answer.answer and "queue and its prefill" in answer.answer
    rows = {r.key: r for r in answer.figures.rows}
    assert rows[AttributionKey.KEEPALIVE_WAIT].value_ms is None
    assert rows[AttributionKey.PROVIDER_QUEUE].value_ms is None
    gateway = rows[AttributionKey.GATEWAY_WAIT]
    assert gateway.value_ms == 800.0 and "not separable" in gateway.measurement


def test_a_servers_own_keepalives_still_measure_its_queue_beside_a_gateway() -> None:
    own = rec(900.0, keepalive_comments=3, prefill_ms=None)
    own.client.headers_ms, own.client.first_event_ms = 5.0, 805.0
    split = ttft_split([own])
    assert split.queue_source == "keepalive" and split.behind_gateway is None


def test_a_provider_reporting_nothing_gets_no_split_and_says_so() -> None:
    split = ttft_split([rec(300.0)])
    assert split.provider_queue_ms is None and split.provider_prefill_ms is None
    assert len(split.not_derived) == 2 and v(split.unsplit_ms) == 299.0


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
