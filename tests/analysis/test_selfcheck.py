"""The self-check's flag: late stamps flag a level; a busy loop under kernel stamps does not."""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import respx

from labkit.analysis.selfcheck import (
    CLIENT_BOUND,
    CLIENT_BOUND_FIX,
    LagSummary,
    RecordLateness,
    client_bound_advice,
    client_bound_note,
    client_bound_notes,
    late_stamp_limit_ms,
    level_lag,
    pooled_p99,
    summarize_lag,
)
from labkit.figures import RequestStats
from labkit.measurement.lateness import KernelReads, stamp_self_check
from labkit.records import ClientTimings
from labkit.wire.loopclock import LatenessTracker, TimedSelector
from tests.providers.streams import make_provider, oa_usage, openai_events, record_one
from tests.support.records import make_record

pytestmark = pytest.mark.unit


def _level(n: int, gap_ms: float = 2.0, events: int = 100, **client: Any) -> list[Any]:
    offsets = [50.0 + gap_ms * i for i in range(events)]
    return [
        make_record(
            experiment="load",
            tags={"level": "c32"},
            ttft_ms=50.0,
            event_offsets_ms=offsets,
            itl_ms_p50=gap_ms,
            **client,
        )
        for _ in range(n)
    ]


def test_late_user_stamps_flag_the_level() -> None:
    recs = _level(
        8,
        stamp_source="user",
        stamp_lateness_ms_p50=1.0,
        stamp_lateness_ms_p99=4.0,
        stamp_lateness_ms_max=5.0,
        ttft_lateness_ms=0.2,
        loop_lag_ms=0.5,
    )
    lag = level_lag(recs)
    assert lag.client_bound and lag.late_p50 == 1.0
    assert lag.late_p99 is not None and 3.5 < lag.late_p99 <= 5.0
    (note,) = client_bound_notes(recs)
    assert CLIENT_BOUND in note and "p99 4." in note and "c32" in note


def test_a_busy_loop_while_the_kernel_stamped_is_no_flag() -> None:
    recs = _level(
        8,
        stamp_source="kernel",
        stamp_lateness_ms_p50=0.0,
        stamp_lateness_ms_p99=0.0,
        stamp_lateness_ms_max=0.0,
        ttft_lateness_ms=0.0,
        read_lag_ms_p50=6.0,
        read_lag_ms_p99=12.0,
        loop_lag_ms=9.0,  # the old rule would have flagged this
    )
    lag = level_lag(recs)
    assert not lag.client_bound and lag.late_p99 == 0.0 and lag.p50 == 9.0
    assert client_bound_notes(recs) == []


def test_one_late_first_token_flags_a_single_stream_level() -> None:
    recs = _level(10, stamp_lateness_ms_p50=0.05, stamp_lateness_ms_p99=0.2, ttft_lateness_ms=0.1)
    assert not level_lag(recs).client_bound
    recs[3].client.ttft_lateness_ms = 1.7
    lag = level_lag(recs)
    assert lag.client_bound and lag.ttft_late_p99 is not None and lag.ttft_late_p99 > 1.0


def test_records_without_an_estimate_keep_the_loop_lag_rule() -> None:
    assert level_lag(_level(4, loop_lag_ms=5.0)).client_bound
    assert not level_lag(_level(4, loop_lag_ms=1.0)).client_bound


def test_the_limit_follows_the_inter_token_gap_on_slow_streams() -> None:
    assert late_stamp_limit_ms(2.0) == 2.0
    assert late_stamp_limit_ms(50.0) == 5.0
    slow = [RecordLateness(100, 1.0, 3.0, None, 3.5)] * 4
    assert summarize_lag([], [], slow, itl_ms_p50=2.0).client_bound
    assert not summarize_lag([], [], slow, itl_ms_p50=50.0).client_bound


def test_the_pooled_p99_is_driven_by_the_worst_records() -> None:
    calm = [RecordLateness(100, 0.1, 0.3, None, 0.4)] * 9
    bad = [RecordLateness(100, 5.0, 20.0, None, 30.0)]
    assert 0.3 <= pooled_p99(calm) <= 0.4
    # A tenth of the events sit around 5-30 ms: more than 1% of all events is above 5 ms.
    assert pooled_p99(calm + bad) > 5.0


def test_a_level_pools_every_events_estimate_where_records_keep_them() -> None:
    # What kernel stamps give at 32 streams: in each 100-event record two events came in a
    # gathered read and are estimated 1.2 ms late, the rest 0. Pooled from p50/p99/max alone
    # (linear between them), a quarter of the events would look later than 0.6 ms.
    values = tuple(sorted([0.0] * 98 + [1.2, 1.2]))
    summary_only = [RecordLateness(100, 0.0, 1.2, None, 1.2)] * 32
    kept = [RecordLateness(100, 0.0, 1.2, None, 1.2, values)] * 32
    assert pooled_p99(summary_only) > 1.0
    # 2% of all events are 1.2 ms late: exactly, the 99th percentile is theirs.
    assert pooled_p99(kept) == pytest.approx(1.2)
    one_late = tuple(sorted([0.0] * 99 + [1.2]))
    # Half of the records with a single late event: 0.5% above 0, the p99 is on time.
    mixed = [RecordLateness(100, 0.0, 1.2, None, 1.2, one_late)] * 16 + [
        RecordLateness(100, 0.0, 0.0, None, 0.0, (0.0,) * 100)
    ] * 16
    assert pooled_p99(mixed) == 0.0


def test_records_keep_each_events_estimate_in_stream_order() -> None:
    timings = ClientTimings()
    reads = [(10, 10, True), (5_000_000, 5_000_000, True)]
    stamp_self_check(timings, "kernel", [10, 5_000_000], None, KernelReads.of(reads))
    assert timings.stamp_lateness_ms == [0.0, 0.0]
    assert len(timings.stamp_lateness_ms) == 2


def test_kernel_stamps_report_the_read_lag_and_no_lateness() -> None:
    timings = ClientTimings()
    reads = [(10, 2_000_010, True), (3_000_000, 7_000_000, True), (8_000_000, 8_000_000, True)]
    stamp_self_check(timings, "kernel", [10, 3_000_000, 8_000_000], None, KernelReads.of(reads))
    assert timings.stamp_source == "kernel"
    assert timings.stamp_lateness_ms_p99 == 0.0 and timings.ttft_lateness_ms == 0.0
    assert timings.read_lag_ms_p50 == 2.0 and timings.read_lag_ms_p99 == pytest.approx(3.96)


def test_events_gathered_in_one_kernel_stamped_read_are_late_but_its_last() -> None:
    timings = ClientTimings()
    # The second read brought four events, stamped at its last segment; the loop was busy
    # from 1 ms (its previous select returned) to 10 ms, and the first read was seen at 1 ms:
    # the first three arrived earlier than the stamp.
    reads = [(0, 1_000_000, True), (9_000_000, 12_000_000, True)]
    busy = {9_000_000: (1_000_000, 10_000_000, False)}
    output = [0] + [9_000_000] * 4
    stamp_self_check(timings, "kernel", output, None, KernelReads.of(reads), busy)
    assert timings.stamp_lateness_ms_max == 6.0 and timings.stamp_lateness_ms_p50 == 2.0
    # Woken by them (a select blocked from 2 ms, back at 9.1 ms): they came together.
    woken = ClientTimings()
    woke = {9_000_000: (2_000_000, 9_100_000, True)}
    stamp_self_check(woken, "kernel", output, None, KernelReads.of(reads), woke)
    assert woken.stamp_lateness_ms_max == 0.0
    # Back only at 11 ms, long after the last segment: labkit woke late, they came since 2 ms.
    late = ClientTimings()
    stamp_self_check(
        late,
        "kernel",
        output,
        None,
        KernelReads.of(reads),
        {9_000_000: (2_000_000, 11_000_000, True)},
    )
    assert late.stamp_lateness_ms_max == 5.25
    # Nothing known of the loop: they count as on time.
    bare = ClientTimings()
    stamp_self_check(bare, "kernel", output, None, KernelReads.of(reads))
    assert bare.stamp_lateness_ms_max == 0.0


def test_reads_without_a_kernel_stamp_are_user_stamps() -> None:
    timings = ClientTimings()
    stamp_self_check(timings, "kernel", [5], None, KernelReads.of([(5, 5, False)]))
    assert timings.stamp_source == "user" and timings.stamp_lateness_ms_p99 is None


def test_user_stamps_report_the_estimate_per_event() -> None:
    sel = TimedSelector(clock=lambda: 0)
    sel.reports[3] = deque([(0, 0, True)])
    tracker = LatenessTracker(sel, 3)
    tracker.note(1_000_000)
    timings = ClientTimings()
    stamp_self_check(timings, "user", [1_000_000, 1_000_000], tracker, None)
    assert timings.stamp_source == "user"
    assert timings.stamp_lateness_ms_p50 == 1.0 == timings.ttft_lateness_ms
    assert timings.read_lag_ms_p50 is None


class _KernelStamped(httpx.AsyncByteStream):
    """A body whose every read carries a kernel stamp and, 5 ms later, labkit's seeing it
    (the `labkit.arrival` contract of the lean transport)."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks
        self.t_ns = 0
        self.seen_ns = 0
        self.kernel_stamped = True

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for i, chunk in enumerate(self.chunks):
            self.t_ns = 1_000_000_000 + i * 2_000_000
            self.seen_ns = self.t_ns + 5_000_000
            yield chunk


@respx.mock
def test_kernel_stamps_are_not_late_however_late_labkit_read_them() -> None:
    provider = make_provider("openai", api_key="sk-test")
    body = _KernelStamped(list(openai_events(["a", "b", "c"], usage=oa_usage(3, 3))))
    respx.post("https://api.openai.com/v1/chat/completions").mock(
        return_value=httpx.Response(
            200,
            headers={"content-type": "text/event-stream"},
            stream=body,
            extensions={"labkit.arrival": body},
        )
    )
    c = record_one(provider).client
    assert c.stamp_source == "kernel" and c.stamp_lateness_ms_p99 == 0.0
    assert c.read_lag_ms_p50 == pytest.approx(5.0) and c.read_lag_ms_p99 == pytest.approx(5.0)
    # However busy the loop was meanwhile (the old rule flagged 8 ms of loop lag).
    busy = c.model_copy(update={"loop_lag_ms": 8.0})
    rec = make_record(experiment="load")
    assert not level_lag([rec.model_copy(update={"client": busy})]).client_bound


def _stalled_level(woken_ns: int) -> list[Any]:
    """32 kernel-stamped streams of 50 events 30 ms apart; in each, one stall gathered the
    10th and 11th into one read stamped at the 11th's arrival (at 330 ms), back from a
    select() entered at 299 ms and returned at 330.1 ms, whose wake the thread's counters
    put at `woken_ns`."""
    gap = 30_000_000
    output = [gap * i for i in range(1, 10)] + [gap * 11] * 2 + [gap * i for i in range(12, 51)]
    reads = [(t, t + 100_000, True) for t in sorted(set(output))]
    window = {gap * 11: (gap * 10 - 1_000_000, woken_ns, True)}
    records = []
    for _ in range(32):
        timings = ClientTimings()
        stamp_self_check(timings, "kernel", output, None, KernelReads.of(reads), window)
        client = {
            name: getattr(timings, name)
            for name in (
                "stamp_source",
                "stamp_lateness_ms_p50",
                "stamp_lateness_ms_p99",
                "stamp_lateness_ms_max",
                "stamp_lateness_ms",
                "ttft_lateness_ms",
            )
        }
        records += _level(1, gap_ms=30.0, events=50, **client)
    return records


def test_a_stall_that_the_wake_counters_saw_flags_the_level() -> None:
    # The thread was woken by the 10th event (at 300 ms) and waited 30 ms for a CPU: that
    # event is 30 ms late, 2% of the level's events, above its 3 ms limit.
    stalled = _stalled_level(woken_ns=300_000_000)
    assert stalled[0].client.stamp_lateness_ms_max == 30.0
    assert stalled[0].client.ttft_lateness_ms == 0.0
    assert level_lag(stalled).client_bound
    # Woken when it returned (no wait for a CPU): the two came together, nothing is late.
    quiet = _stalled_level(woken_ns=330_100_000)
    assert quiet[0].client.stamp_lateness_ms_max == 0.0
    assert not level_lag(quiet).client_bound and client_bound_notes(quiet) == []


# --- the reason in one short line, and one line of advice for the run ------------------------


def test_a_flagged_groups_reason_is_one_short_line_with_its_cause() -> None:
    waited = LagSummary(8, 0.2, 1.0, True, 0.05, 0.3, 3.3, 0.2, 2.0, 1.0)
    assert client_bound_note("local · determinism", waited) == (
        "local · determinism: client-bound: stamps late p99 3.3 ms (limit 2.0), "
        "labkit waited for a CPU"
    )
    busy = LagSummary(8, 0.2, 1.0, True, 0.9, 0.3, 1.0, 3.8, 2.0, 1.0)
    assert client_bound_note("c8", busy) == (
        "c8: client-bound: first tokens late p99 3.8 ms (limit 1.0), labkit busy 90% of one CPU"
    )
    both = LagSummary(8, 0.2, 1.0, True, 0.05, 0.3, 6.9, 5.1, 2.0, 1.0)
    assert client_bound_note("x", both) == (
        "x: client-bound: stamps late p99 6.9 ms (limit 2.0), first tokens 5.1 ms (limit 1.0), "
        "labkit waited for a CPU"
    )
    assert waited.cause == "waited" and busy.cause == "busy"
    # The level's own fix never guesses what held the CPUs: the run's advice says it.
    assert busy.fix == CLIENT_BOUND_FIX and "threads" not in waited.fix


def _flagged(*causes: str) -> list[RequestStats]:
    return [
        RequestStats.model_construct(client_bound="client-bound: ...", client_bound_causes=[c])
        for c in causes
    ]


def _manifest(threads: int | None, cpus: int, host_cpu: dict[str, Any] | None = None) -> Any:
    server = {"backend": "cpu", "threads": threads}
    manifest: dict[str, Any] = {
        "host": {"cpu_count": cpus},
        "providers": {"local": {"kind": "k", "model": "m", "status": "ok", "server": server}},
    }
    if host_cpu is not None:
        manifest["host_cpu"] = host_cpu
    return manifest


def _measured(others: float, labkit: float, wall: float = 10.0) -> dict[str, Any]:
    return {
        "wall_s": wall,
        "cpus": 2,
        "busy_cpu_s": (others + labkit) * wall,
        "labkit_cpu_s": labkit * wall,
        "others_cpu_s": others * wall,
    }


def test_a_busy_labkit_is_told_to_read_fewer_streams_per_process() -> None:
    advice = client_bound_advice(_flagged("busy"), _manifest(1, 2))
    assert advice is not None and CLIENT_BOUND_FIX in advice and "CPU" not in advice


def test_a_server_whose_threads_take_every_core_is_told_its_threads() -> None:
    advice = client_bound_advice(_flagged("waited", "waited"), _manifest(4, 4))
    assert advice is not None
    assert "the managed server of 'local' ran 4 threads on this host's 4 CPUs" in advice
    assert "set its `threads:` to 3" in advice


def test_other_processes_that_held_the_cpus_are_named_never_threads_already_1() -> None:
    advice = client_bound_advice(_flagged("waited"), _manifest(1, 2, _measured(1.4, 0.6)))
    assert advice is not None and "threads" not in advice
    assert "other processes on this host used 1.4 of its 2 CPUs on average" in advice
    assert "(labkit and the servers it started 0.6)" in advice
    # Without the measurement (an older manifest), still no threads advice for 1 of 2.
    unmeasured = client_bound_advice(_flagged("waited"), _manifest(1, 2))
    assert unmeasured is not None and "`threads:`" not in unmeasured
    assert "left 1 of its 2 CPUs free: other processes on this host held them" in unmeasured
    # One CPU for both: no thread to take off, the server goes elsewhere.
    alone = client_bound_advice(_flagged("waited"), _manifest(1, 1))
    assert alone is not None and "`threads:`" not in alone and "another machine" in alone


def test_a_quiet_host_gets_the_numbers_and_a_fix_that_is_possible() -> None:
    advice = client_bound_advice(_flagged("waited"), _manifest(1, 2, _measured(0.1, 1.8)))
    assert advice is not None and "`threads:`" not in advice
    assert "other processes used 0.1 of its 2 CPUs" in advice
    assert "run the server on another machine" in advice


def test_both_causes_are_advised_in_one_line_and_none_without_causes() -> None:
    advice = client_bound_advice(_flagged("busy", "waited"), _manifest(1, 2, _measured(1, 1)))
    assert advice is not None and "\n" not in advice
    assert CLIENT_BOUND_FIX in advice and "other processes on this host used" in advice
    assert client_bound_advice([], _manifest(1, 2)) is None
    # A lab.json from before the causes were kept: its reasons carried their own fix.
    old = RequestStats.model_construct(client_bound="client-bound: ...", client_bound_causes=[])
    assert client_bound_advice([old], _manifest(1, 2)) is None
