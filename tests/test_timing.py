"""Timing arithmetic, from known stamps and from a scripted clock driving the recorder."""

from __future__ import annotations

import httpx
import pytest
import respx
from hypothesis import given
from hypothesis import strategies as st

from labkit.records import DecodeNullReason
from labkit.timing import derive_client_timings, percentile
from tests.providers.streams import (
    ChunkStream,
    ScriptedClock,
    make_provider,
    oa_usage,
    openai_events,
    record_one,
)

pytestmark = pytest.mark.unit

MS = 1_000_000
T0 = 5_000 * MS


def derive(out_ms: list[float], *, tokens: int | None, first_ms: float = 1.0, end_ms=None):
    return derive_client_timings(
        t_start_ns=T0,
        phases_ns={
            "connection.connect_tcp.complete": T0 + 2 * MS,
            "connection.start_tls.complete": T0 + 5 * MS,
            "http11.send_request_body.complete": T0 + 6 * MS,
            "http11.receive_response_headers.complete": T0 + 40 * MS,
        },
        first_event_ns=T0 + round(first_ms * MS),
        output_event_ns=[T0 + round(x * MS) for x in out_ms],
        first_text_ns=T0 + round(out_ms[0] * MS) if out_ms else None,
        end_ns=T0 + round((end_ms if end_ms is not None else (out_ms or [0])[-1] + 3) * MS),
        output_tokens=tokens,
        queue_ms=1.5,
        loop_lag_ms=0.2,
    )


def test_phases_and_offsets_from_known_stamps() -> None:
    c = derive([50, 60, 65, 90], tokens=4, first_ms=45, end_ms=100)
    assert (c.connect_ms, c.tls_ms, c.request_sent_ms, c.headers_ms) == (2.0, 5.0, 6.0, 40.0)
    assert c.first_event_ms == 45.0
    assert c.ttft_ms == 50.0 and c.ttft_text_ms == 50.0
    assert c.last_token_ms == 90.0 and c.e2e_ms == 100.0
    assert c.event_offsets_ms == [50.0, 60.0, 65.0, 90.0]
    assert c.queue_ms == 1.5 and c.loop_lag_ms == 0.2
    # decode: (last - ttft) / (tokens - 1)
    assert c.decode_ms_per_token == (90.0 - 50.0) / 3
    assert c.output_tokens_per_s == pytest.approx(1000.0 / ((90.0 - 50.0) / 3), rel=1e-12)
    # gaps 10, 5, 25 → p50 10, max 25, p99 interpolated between 10 and 25.
    assert c.itl_ms_p50 == 10.0
    assert c.itl_ms_max == 25.0
    assert c.itl_ms_p99 == pytest.approx(10.0 + (25.0 - 10.0) * 0.98, abs=1e-9)
    assert c.e2e_ms >= c.last_token_ms >= c.ttft_ms
    gaps = [b - a for a, b in zip(c.event_offsets_ms, c.event_offsets_ms[1:], strict=False)]
    assert c.ttft_ms + sum(gaps) == pytest.approx(c.last_token_ms, abs=1e-9)


def test_decode_uses_provider_token_count_not_event_count() -> None:
    # 3 events carried 9 tokens: decode is per token, not per event.
    c = derive([20, 30, 40], tokens=9)
    assert c.decode_ms_per_token == (40.0 - 20.0) / 8


@pytest.mark.parametrize("tokens", [None, 0, 1])
def test_decode_is_none_under_two_tokens(tokens: int | None) -> None:
    c = derive([20, 30], tokens=tokens)
    assert c.decode_ms_per_token is None
    assert c.output_tokens_per_s is None


@pytest.mark.parametrize(
    ("out_ms", "tokens", "reason"),
    [
        ([20], 12, "one_output_event"),  # the whole answer in one event: no interval, not 0.0
        ([20], 1, "one_output_event"),
        ([20, 30], 1, "one_token"),
        ([20, 30], 0, "one_token"),
        ([20, 30], None, "hidden_output"),  # the parser could not tell the streamed count
        ([20], None, "hidden_output"),
        ([], 12, "no_output"),  # nothing streamed: null, and said (issue 44)
        ([], None, "no_output"),
        ([20, 30], 2, None),  # measured
    ],
)
def test_decode_is_null_where_not_measurable_and_says_why(
    out_ms: list[float], tokens: int | None, reason: str | None
) -> None:
    c = derive(out_ms, tokens=tokens)
    assert c.decode_null_reason == reason
    assert (c.decode_ms_per_token is None) == (reason is not None or not out_ms)
    if c.decode_ms_per_token is None:
        assert c.output_tokens_per_s is None


def test_recorder_one_event_answer_has_null_decode_with_its_reason() -> None:
    events = list(openai_events(["the whole answer at once"], usage=oa_usage(3, 5)))
    rec = scripted_record(events, [5.0, 10.0, 11.0, 12.0, 13.0], 1)
    assert rec.usage.streamed_output_tokens == 5
    assert rec.client.ttft_ms == rec.client.last_token_ms == 10.0
    assert rec.client.decode_ms_per_token is None
    assert rec.client.decode_null_reason == "one_output_event"


def test_single_event_has_no_itl_and_nothing_is_zero_filled() -> None:
    c = derive([20], tokens=1)
    assert c.ttft_ms == c.last_token_ms == 20.0
    assert (c.itl_ms_p50, c.itl_ms_p99, c.itl_ms_max) == (None, None, None)
    empty = derive_client_timings(
        t_start_ns=T0,
        phases_ns={},
        first_event_ns=None,
        output_event_ns=[],
        first_text_ns=None,
        end_ns=None,
        output_tokens=None,
    )
    dumped = empty.model_dump()
    assert dumped.pop("event_offsets_ms") == []
    assert dumped.pop("decode_null_reason") == "no_output"  # null decode always says why
    assert all(v is None for v in dumped.values()), dumped


def test_percentile_matches_numpy_linear() -> None:
    np = pytest.importorskip("numpy")
    values = sorted([3.0, 1.0, 7.5, 2.25, 9.0, 4.0, 4.0])
    for q in (0, 1, 25, 50, 90, 99, 100):
        assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)), abs=1e-12)
    with pytest.raises(ValueError):
        percentile([], 50)


# --- the recorder with a scripted clock ------------------------------------------------------
# The clock only moves when the stream hands over a read, so every stamp is exactly the
# scripted arrival time, however often the recorder reads the clock.


def scripted_record(chunks: list[bytes], times_ms: list[float], usage_tokens: int | None):
    clock = ScriptedClock()
    with respx.mock(assert_all_called=True) as router:
        router.post("http://srv.test/v1/chat/completions").mock(
            return_value=httpx.Response(
                200,
                headers={"content-type": "text/event-stream"},
                stream=ChunkStream(chunks, clock=clock, times_ms=times_ms),
            )
        )
        provider = make_provider(
            "openai_compatible", base_url="http://srv.test/v1", transport="httpx"
        )
        return record_one(provider, clock=clock)


def test_recorder_stamps_are_the_scripted_arrival_times() -> None:
    tokens = ["a", "b", "c", "d", "e"]
    events = list(openai_events(tokens, usage=oa_usage(3, 5)))
    # role, 5 tokens, finish, usage, [DONE]: 9 events, each its own read.
    times = [30.0, 50.0, 62.0, 71.0, 95.0, 101.0, 102.0, 103.0, 104.0]
    rec = scripted_record(events, times, 5)
    c = rec.client
    assert rec.error is None
    assert c.headers_ms == 0.0  # the mock returned headers before the clock moved
    assert c.first_event_ms == 50.0  # role-only chunk at 30 does not count
    assert c.ttft_ms == 50.0 and c.ttft_text_ms == 50.0
    assert c.event_offsets_ms == [50.0, 62.0, 71.0, 95.0, 101.0]
    assert c.last_token_ms == 101.0
    assert c.e2e_ms == 104.0
    assert c.decode_ms_per_token == (101.0 - 50.0) / (5 - 1)
    assert c.itl_ms_max == 24.0
    assert c.itl_ms_p50 == pytest.approx((9.0 + 12.0) / 2, abs=1e-9)  # gaps 12, 9, 24, 6
    gaps = [b - a for a, b in zip(c.event_offsets_ms, c.event_offsets_ms[1:], strict=False)]
    assert c.ttft_ms + sum(gaps) == c.last_token_ms
    assert c.e2e_ms >= c.last_token_ms >= c.ttft_ms
    assert rec.usage.output_tokens == 5 and rec.usage.output_tokens_source == "provider"
    assert rec.app.parse_cpu_ms == 0.0  # the scripted clock does not move while parsing


def test_recorder_several_events_in_one_read_share_its_stamp() -> None:
    events = list(openai_events(["x", "y", "z"], usage=oa_usage(3, 3)))
    # role+x+y in one read at 40 ms; z, finish, usage, DONE in one read at 75 ms.
    chunks = [b"".join(events[:3]), b"".join(events[3:])]
    rec = scripted_record(chunks, [40.0, 75.0], 3)
    assert rec.client.event_offsets_ms == [40.0, 40.0, 75.0]
    assert rec.client.itl_ms_p50 == pytest.approx(17.5)
    assert rec.client.decode_ms_per_token == 17.5
    assert rec.output_text == "xyz"


def test_recorder_event_split_across_reads_gets_first_part_stamp() -> None:
    events = list(openai_events(["hello", "world"], usage=oa_usage(3, 2)))
    tok = events[1]
    cut = len(tok) // 2
    chunks = [events[0], tok[:cut], tok[cut:] + events[2], b"".join(events[3:])]
    rec = scripted_record(chunks, [10.0, 20.0, 35.0, 50.0], 2)
    assert rec.client.ttft_ms == 20.0  # first part's read, not the one that completed it
    assert rec.client.event_offsets_ms == [20.0, 35.0]
    assert rec.client.e2e_ms == 50.0
    assert rec.client.decode_ms_per_token == 15.0


def test_recorder_single_token_has_no_decode() -> None:
    events = list(openai_events(["only"], usage=oa_usage(3, 1)))
    rec = scripted_record(events, [5.0, 10.0, 11.0, 12.0, 13.0], 1)
    assert rec.client.ttft_ms == rec.client.last_token_ms == 10.0
    assert rec.client.decode_ms_per_token is None
    assert rec.client.itl_ms_max is None


def _send_ms(phases_ms: dict[str, float], connect_ahead_ns: int | None = None) -> float | None:
    return derive_client_timings(
        t_start_ns=T0,
        phases_ns={name: T0 + round(ms * MS) for name, ms in phases_ms.items()},
        first_event_ns=None,
        output_event_ns=[],
        first_text_ns=None,
        end_ns=None,
        output_tokens=None,
        connect_ahead_ns=connect_ahead_ns,
    ).send_ms


def test_send_ms_is_the_request_path_less_the_connection_opened_inside_it() -> None:
    sent = "http11.send_request_body.complete"
    # A pooled or pre-opened connection: all of request_sent is the client's own.
    assert _send_ms({sent: 0.04}) == pytest.approx(0.04)
    assert _send_ms({sent: 0.04}, connect_ahead_ns=3 * MS) == pytest.approx(0.04)
    # A connection opened inside: its connect (from its start) and TLS are the network's.
    opened = {
        "connection.connect_tcp.started": 0.01,
        "connection.connect_tcp.complete": 2.0,
        "connection.start_tls.complete": 5.0,
        sent: 5.05,
    }
    assert _send_ms(opened) == pytest.approx(0.06)
    plain = {"connection.connect_tcp.complete": 2.0, sent: 2.03}
    assert _send_ms(plain) == pytest.approx(0.03)  # no start stamp: all before it counts
    assert _send_ms({"http11.receive_response_headers.complete": 1.0}) is None


@given(
    out_ms=st.lists(st.floats(0, 1e5, allow_nan=False), max_size=6).map(sorted),
    tokens=st.one_of(st.none(), st.integers(0, 10_000)),
    uncounted=st.sampled_from(["hidden_output", "not_read"]),
)
def test_a_null_decode_always_says_why(
    out_ms: list[float], tokens: int | None, uncounted: DecodeNullReason
) -> None:
    # Every path to a null decode carries its reason, nothing streamed included (issue 44).
    c = derive_client_timings(
        t_start_ns=T0,
        phases_ns={},
        first_event_ns=None,
        output_event_ns=[T0 + round(x * MS) for x in out_ms],
        first_text_ns=None,
        end_ns=None,
        output_tokens=tokens,
        uncounted=uncounted,
    )
    assert (c.decode_ms_per_token is None) == (c.decode_null_reason is not None)
    if not out_ms:
        assert c.decode_null_reason == "no_output"
    elif tokens is None:
        assert c.decode_null_reason == uncounted
