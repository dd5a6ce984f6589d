"""The stamp self-check fills every record exactly as its previous implementation did.

`_reference_self_check` is labkit's self-check as it was before issue 47 round four made it
cheaper (`labkit.measurement.lateness` at 5dce515): a set, a list walk over every event and
a dict of every read's predecessor, per record. Generated streams (events read one a read
and several a read, reads without a kernel stamp, events no read has, loop windows that woke
the loop or not, user stamps with a lateness estimate) give the same fields, to the bit.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from labkit.measurement.lateness import (
    WAKE_SLACK_NS,
    KernelReads,
    _rounded_ms,
    self_check_fields,
    stamp_self_check,
)
from labkit.records import ClientTimings
from labkit.timing import derive_client_timings, percentile

pytestmark = pytest.mark.unit


# --- the reference: the self-check as it was -----------------------------------------------


def _ms(values_ns: Sequence[int]) -> list[float]:
    return sorted([v / 1e6 for v in values_ns])


def _read_lags_ns(output_ns: Sequence[int], reads: KernelReads) -> list[int]:
    seen_of = dict(zip(reversed(reads.stamps), reversed(reads.seen), strict=True))
    seen = list(map(seen_of.get, output_ns))
    if None in seen:
        lags = [s - t for s, t in zip(seen, output_ns, strict=True) if s is not None]
    else:
        lags = list(map(operator.sub, seen, output_ns))
    lags.sort()
    return lags


def _kernel_lateness(
    output_ns: Sequence[int], reads: KernelReads, windows: Mapping[int, tuple[int, int, bool]]
) -> list[int] | None:
    if not all(reads.kernel):
        return None
    n = len(output_ns)
    out = [0] * n
    if len(set(output_ns)) == n:
        return out
    firsts = [
        i
        for i in range(n - 1)
        if output_ns[i] == output_ns[i + 1] and (i == 0 or output_ns[i - 1] != output_ns[i])
    ]
    previous_seen: dict[int, int] | None = None
    for i in firsts:
        t = output_ns[i]
        end = i + 2
        while end < n and output_ns[end] == t:
            end += 1
        k = end - i
        window = windows.get(t)
        if window is None:
            continue
        entered_or_floor, latest, woke = window
        if not woke:
            if previous_seen is None:
                previous_seen = dict(zip(reads.stamps[:0:-1], reads.seen[-2::-1], strict=True))
            lo = max(entered_or_floor, previous_seen.get(t, entered_or_floor))
        elif t < latest - WAKE_SLACK_NS:
            lo = entered_or_floor
        else:
            lo = min(latest, t)
            out[i:end] = [((t - lo) * (k - j)) // (k - 1) for j in range(1, k + 1)]
            continue
        lo = min(lo, t)
        out[i:end] = [(t - lo) - (j * (t - lo)) // k for j in range(1, k + 1)]
    return out


def _reference_self_check(
    timings: ClientTimings,
    source: str,
    output_ns: Sequence[int],
    lateness: Any,
    kernel_reads: KernelReads | None,
    read_windows: Mapping[int, tuple[int, int, bool]] | None = None,
) -> None:
    if source == "kernel":
        reads = kernel_reads or KernelReads((), (), ())
        lags = _read_lags_ns(output_ns, reads)
        if lags:
            timings.read_lag_ms_p50 = percentile(lags, 50, scale=1e6)
            timings.read_lag_ms_p99 = percentile(lags, 99, scale=1e6)
        in_order = _kernel_lateness(output_ns, reads, read_windows or {})
        if in_order is None:
            timings.stamp_source = "user"
            return
        timings.stamp_source = "kernel"
    else:
        timings.stamp_source = "user"
        if lateness is None or not lateness.stamps_ns:
            return
        in_order = lateness.lateness_ns(output_ns)
    if not in_order:
        return
    if not any(in_order):
        timings.stamp_lateness_ms_p50 = timings.stamp_lateness_ms_p99 = 0.0
        timings.stamp_lateness_ms_max = 0.0
        timings.stamp_lateness_ms = [0.0] * len(in_order)
    else:
        per_event = _ms(in_order)
        timings.stamp_lateness_ms_p50 = percentile(per_event, 50)
        timings.stamp_lateness_ms_p99 = percentile(per_event, 99)
        timings.stamp_lateness_ms_max = per_event[-1]
        timings.stamp_lateness_ms = [round(v / 1e6, 3) if v else 0.0 for v in in_order]
    if lateness is None or output_ns[0] in lateness.stamps_ns:
        timings.ttft_lateness_ms = in_order[0] / 1e6


# --- generated streams ----------------------------------------------------------------------


class _Lateness:
    """A user-stamp lateness estimate (`LatenessTracker`'s two members the check reads)."""

    def __init__(self, stamps_ns: set[int], late: list[int]) -> None:
        self.stamps_ns = stamps_ns
        self._late = late

    def lateness_ns(self, output_ns: Sequence[int]) -> list[int]:
        return [self._late[i % len(self._late)] for i in range(len(output_ns))]


@st.composite
def _streams(draw: st.DrawFn) -> tuple[list[int], KernelReads, dict[int, tuple[int, int, bool]]]:
    """Reads (stamp, seen, kernel) and the output events' stamps, each a read's stamp."""
    n_reads = draw(st.integers(1, 40))
    t = draw(st.integers(0, 10**9))
    stamps, seen = [], []
    for _ in range(n_reads):
        t += draw(st.sampled_from([0, 1, 1_000, 250_000, 2_000_000]))  # 0: a stamp again
        stamps.append(t)
        seen.append(t + draw(st.integers(-1_000, 3_000_000)))
    kernel = [draw(st.booleans()) if draw(st.integers(0, 9)) == 0 else True for _ in stamps]
    output: list[int] = []
    for stamp in stamps:
        output += [stamp] * draw(st.sampled_from([0, 1, 1, 1, 2, 3, 5]))
    if draw(st.booleans()):
        output.append(draw(st.integers(0, 2 * 10**9)))  # an event no read has
    if draw(st.integers(0, 4)) == 0:
        output = draw(st.permutations(output))
    windows = {}
    for stamp in set(stamps):
        if draw(st.booleans()):
            windows[stamp] = (
                stamp - draw(st.integers(-1_000, 5_000_000)),
                stamp + draw(st.integers(-2 * WAKE_SLACK_NS, 2 * WAKE_SLACK_NS)),
                draw(st.booleans()),
            )
    return output, KernelReads(stamps, seen, kernel), windows


@settings(max_examples=500)
@given(
    stream=_streams(),
    user=st.booleans(),
    late=st.lists(
        st.one_of(
            st.integers(0, 5_000_000),
            st.integers(-5, 10**6).map(lambda us: us * 1000 + 500),  # ties, at the µs
            st.integers(-(10**7), 10**17),
        ),
        min_size=1,
    ),
)
def test_the_self_check_fills_the_fields_as_before(
    stream: tuple[list[int], KernelReads, dict[int, tuple[int, int, bool]]],
    user: bool,
    late: list[int],
) -> None:
    output, reads, windows = stream
    if not output:
        return
    source = "user" if user else "kernel"
    lateness = _Lateness(set(reads.stamps), late) if user else None
    before, after = ClientTimings(), ClientTimings()
    _reference_self_check(before, source, output, lateness, reads, windows)
    stamp_self_check(after, source, output, lateness, reads, windows)  # type: ignore[arg-type]
    assert after.model_dump_json() == before.model_dump_json()
    assert after == before
    # Built in one go, as the recorder builds a record's timings: the same fields.
    built = ClientTimings(**self_check_fields(source, output, lateness, reads, windows))  # type: ignore[arg-type]
    assert built.model_dump_json() == before.model_dump_json()


@given(st.lists(st.integers(-(10**16), 10**16) | st.integers(0, 10**7), min_size=1))
def test_lateness_is_rounded_to_the_us_as_round_rounds_it(values: list[int]) -> None:
    got = _rounded_ms(values, max(values))
    want = [round(v / 1e6, 3) if v else 0.0 for v in values]
    assert [x.hex() for x in got] == [x.hex() for x in want]  # -0.0 and 0.0 told apart


def test_lateness_rounding_agrees_over_every_ns_of_the_first_two_seconds_sampled() -> None:
    values = list(range(0, 2_000_000_000, 997)) + [k * 1000 + 500 for k in range(10_000)]
    assert _rounded_ms(values, max(values)) == [round(v / 1e6, 3) if v else 0.0 for v in values]


def test_events_read_together_are_spread_as_before() -> None:
    # One read brought three events, its window known and not woken by them: the reference
    # and the check spread them the same, from the read before's seen time.
    stamps = [1_000_000, 3_000_000, 3_000_000, 6_000_000]
    reads = KernelReads(stamps, [1_100_000, 3_200_000, 3_300_000, 6_050_000], [True] * 4)
    output = [1_000_000, 3_000_000, 3_000_000, 3_000_000, 6_000_000]
    windows = {3_000_000: (900_000, 3_000_000, False)}
    before, after = ClientTimings(), ClientTimings()
    _reference_self_check(before, "kernel", output, None, reads, windows)
    stamp_self_check(after, "kernel", output, None, reads, windows)
    assert after == before
    assert after.stamp_lateness_ms is not None and after.stamp_lateness_ms[1] > 0


@settings(max_examples=200)
@given(stream=_streams(), tokens=st.one_of(st.none(), st.integers(0, 300)))
def test_timings_built_with_the_self_check_are_the_timings_with_it_set_after(
    stream: tuple[list[int], KernelReads, dict[int, tuple[int, int, bool]]],
    tokens: int | None,
) -> None:
    """The recorder's one construction (`derive_client_timings(self_check=...)`) gives the
    JSON of the timings built first and checked after, as it was."""
    output, reads, windows = stream
    if not output:
        return
    t0 = min(output) - 1_000
    kwargs: dict[str, Any] = {
        "t_start_ns": t0,
        "phases_ns": {"http11.send_request_body.complete": t0 + 20_000},
        "first_event_ns": output[0],
        "output_event_ns": output,
        "first_text_ns": output[0],
        "end_ns": max(output) + 5,
        "output_tokens": tokens,
        "queue_ms": 0.0,
    }
    before = derive_client_timings(**kwargs)
    stamp_self_check(before, "kernel", output, None, reads, windows)
    fields = self_check_fields("kernel", output, None, reads, windows)
    after = derive_client_timings(**kwargs, self_check=fields)
    assert after.model_dump_json() == before.model_dump_json()


@settings(max_examples=300)
@given(
    gaps=st.lists(st.sampled_from([0, 1, 1_000, 250_000, 2_000_000]), min_size=1, max_size=60),
    lags=st.lists(st.integers(-1_000, 3_000_000), min_size=60, max_size=60),
)
def test_one_event_a_read_fills_the_fields_as_before(gaps: list[int], lags: list[int]) -> None:
    """Every read brought one output event (the common stream): the events' stamps are the
    reads', taken pairwise where they only grow; a stamp seen twice (a gap of 0) goes the
    general way. Either way the fields are the reference's."""
    t = 10**12
    stamps = []
    for gap in gaps:
        t += gap
        stamps.append(t)
    seen = [s + lag for s, lag in zip(stamps, lags, strict=False)]
    reads = KernelReads(stamps, seen, [True] * len(stamps))
    output = list(stamps)
    before, after = ClientTimings(), ClientTimings()
    _reference_self_check(before, "kernel", output, None, reads, {})
    stamp_self_check(after, "kernel", output, None, reads, {})
    assert after.model_dump_json() == before.model_dump_json()
