"""The kernel-stamp self-check visits only the runs of events one read brought together:
it gives what the per-event walk it replaced gave, on streams with and without such runs."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence

import pytest

from labkit.measurement.lateness import (
    WAKE_SLACK_NS,
    KernelReads,
    _kernel_lateness,
    stamp_self_check,
)
from labkit.records import ClientTimings
from labkit.timing import percentile

pytestmark = pytest.mark.unit


def _per_event_walk(
    output_ns: Sequence[int],
    reads: Sequence[tuple[int, int, bool]],
    windows: Mapping[int, tuple[int, int, bool]],
) -> list[int]:
    """The walk over every event, one event at a time (the reference)."""
    n = len(output_ns)
    previous_seen = {
        t: seen for (t, _, _), (_, seen, _) in zip(reads[:0:-1], reads[-2::-1], strict=True)
    }
    out: list[int] = []
    i = 0
    while i < n:
        t = output_ns[i]
        end = i + 1
        while end < n and output_ns[end] == t:
            end += 1
        k = end - i
        window = windows.get(t) if k > 1 else None
        if window is None:
            out.extend([0] * k)
        else:
            entered_or_floor, latest, woke = window
            if not woke:
                lo = max(entered_or_floor, previous_seen.get(t, entered_or_floor))
            elif t < latest - WAKE_SLACK_NS:
                lo = entered_or_floor
            else:  # the first of them woke the loop: from then to the last segment
                lo = min(latest, t)
                out.extend(((t - lo) * (k - j)) // (k - 1) for j in range(1, k + 1))
                i = end
                continue
            lo = min(lo, t)
            out.extend((t - lo) - (j * (t - lo)) // k for j in range(1, k + 1))
        i = end
    return out


def _stream(
    rng: random.Random, events: int, gathered: float
) -> tuple[list[int], list[tuple[int, int, bool]], dict[int, tuple[int, int, bool]]]:
    """A recorded stream's stamps: events 30 ms apart, some gathered into one read, each
    read's (stamp, seen, kernel), and a loop window for some reads."""
    t = 10**12
    output: list[int] = []
    reads: list[tuple[int, int, bool]] = []
    windows: dict[int, tuple[int, int, bool]] = {}
    while len(output) < events:
        t += 30_000_000 + rng.randrange(200_000)
        k = rng.randint(2, 5) if rng.random() < gathered else 1
        output.extend([t] * min(k, events - len(output)))
        reads.append((t, t + rng.randrange(5_000, 80_000), True))
        if rng.random() < 0.7:
            case = rng.randrange(3)
            entered = t - rng.randrange(1_000, 40_000_000)
            latest = t + rng.randrange(-20_000_000, 200_000)
            windows[t] = (entered, latest, case != 0)
    return output, reads, windows


@pytest.mark.parametrize("gathered", [0.0, 0.05, 0.5, 1.0])
def test_the_runs_alone_give_what_the_walk_over_every_event_gave(gathered: float) -> None:
    rng = random.Random(int(gathered * 100))
    for events in (1, 2, 3, 17, 100, 400):
        output, reads, windows = _stream(rng, events, gathered)
        assert _kernel_lateness(output, KernelReads.of(reads), windows) == _per_event_walk(
            output, reads, windows
        )


def test_the_record_fields_match_the_walk_over_every_event() -> None:
    rng = random.Random(7)
    output, reads, windows = _stream(rng, 300, 0.3)
    timings = ClientTimings()
    stamp_self_check(timings, "kernel", output, None, KernelReads.of(reads), windows)
    expected = _per_event_walk(output, reads, windows)
    assert any(expected)
    per_event = sorted(v / 1e6 for v in expected)
    assert timings.stamp_lateness_ms == [round(v / 1e6, 3) for v in expected]
    assert timings.stamp_lateness_ms_p50 == percentile(per_event, 50)
    assert timings.stamp_lateness_ms_p99 == percentile(per_event, 99)
    assert timings.stamp_lateness_ms_max == per_event[-1]
    assert timings.ttft_lateness_ms == expected[0] / 1e6
