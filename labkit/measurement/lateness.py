"""Each record's stamp self-check, filled by the recorder from what it saw per read.

How late each output event's stamp is by labkit's own doing: 0 under kernel receive stamps
except for events one read brought together (spread over the loop's window for the read),
and for stamps taken in user space the timed loop's estimate (`loopclock.LatenessTracker`).
The fields and how a level is judged from them: `labkit.analysis.selfcheck` and docs/measurement.md.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from itertools import compress, islice
from typing import Any, Literal, NamedTuple

from labkit.records import ClientTimings
from labkit.timing import STAMP_FIGURES, percentile
from labkit.wire.loopclock import LatenessTracker

__all__ = ["WAKE_SLACK_NS", "KernelReads", "self_check_fields", "stamp_self_check"]

#: A select() woken by bytes returns within this of their arrival unless labkit was late.
WAKE_SLACK_NS = 500_000


class KernelReads(NamedTuple):
    """Each read of a stream on the lean transport, as three columns (the recorder's own
    lists, not copied): its stamp, when labkit saw it, whether the kernel stamped it."""

    stamps: Sequence[int]
    seen: Sequence[int]
    kernel: Sequence[bool]

    @classmethod
    def of(cls, reads: Sequence[tuple[int, int, bool]]) -> KernelReads:
        """The columns of (stamp, seen, kernel-stamped) rows."""
        return cls([r[0] for r in reads], [r[1] for r in reads], [r[2] for r in reads])


def _read_lags_ns(output_ns: Sequence[int], reads: KernelReads) -> list[int]:
    """Sorted, each output event's read's lag (seen - stamp) of the first read with its
    stamp; events whose stamp no read has are left out.

    Most streams read one event a read (and their reads' other events are not output): the
    events' stamps are then the reads' own, in order, each read's first (stamps that only
    grow), and each event's lag is its read's, taken pairwise without a dict of the reads."""
    stamps = reads.stamps
    if output_ns == stamps and all(map(operator.lt, stamps, islice(stamps, 1, None))):
        if len(reads.seen) != len(stamps):  # as zip(strict=True) below would say
            raise ValueError("the reads' stamps and seen times differ in length")
        return sorted(map(operator.sub, reads.seen, stamps))
    seen_of = dict(zip(reversed(stamps), reversed(reads.seen), strict=True))
    try:
        return sorted(map(operator.sub, map(seen_of.__getitem__, output_ns), output_ns))
    except KeyError:  # an event whose stamp no read has (not on the lean transport's path)
        pass
    seen = map(seen_of.get, output_ns)
    return sorted([s - t for s, t in zip(seen, output_ns, strict=True) if s is not None])


def _seen_before(reads: KernelReads, t: int, default: int) -> int:
    """The seen time of the read before the first read whose stamp is `t` and that has a
    read before it; `default` where there is none (found by index: only a stream's few runs
    of events read together ask)."""
    stamps = reads.stamps
    if len(stamps) != len(reads.seen):  # the columns line up (as zip(strict=True) checked)
        raise ValueError("the reads' stamps and seen times differ in length")
    try:
        return reads.seen[stamps.index(t, 1) - 1]
    except ValueError:
        return default


def _kernel_lateness(
    output_ns: Sequence[int],
    reads: KernelReads,
    windows: Mapping[int, tuple[int, int, bool]],
) -> list[int] | None:
    """Each output event's lateness under kernel stamps; None if a read had none.

    A read's kernel stamp is the arrival of its last segment, so of the k events one read
    brought only the last is stamped on time. The others arrived after the previous read
    was seen and within the loop's window for the read (`windows`, from
    `TimedSelector.window_before`; none known: they came with the last): the j-th at
    ``lo + j (stamp - lo) / k``; where the first of them woke the loop (at ``lo``), the
    j-th at ``lo + (j - 1) (stamp - lo) / (k - 1)``.
    """
    if not all(reads.kernel):
        return None
    n = len(output_ns)
    out = [0] * n
    # The events that share their stamp with the next one, found in C (usually few; none:
    # each event came in a read of its own, all on time).
    shared = list(compress(range(n - 1), map(operator.eq, output_ns, islice(output_ns, 1, None))))
    if not shared:
        return out
    # Only the runs of events one read brought together are visited.
    firsts = [i for i in shared if i == 0 or output_ns[i - 1] != output_ns[i]]
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
            lo = max(entered_or_floor, _seen_before(reads, t, entered_or_floor))
        elif t < latest - WAKE_SLACK_NS:
            # The last segment came well before the select() it should have woken
            # returned: labkit woke late (no CPU), the bytes came since it was entered.
            lo = entered_or_floor
        else:
            # The first of them woke it, at `latest` (before its return by the wait for
            # a CPU the thread accrued, `TimedSelector`): from then to the last segment.
            lo = min(latest, t)
            out[i:end] = [((t - lo) * (k - j)) // (k - 1) for j in range(1, k + 1)]
            continue
        lo = min(lo, t)
        out[i:end] = [(t - lo) - (j * (t - lo)) // k for j in range(1, k + 1)]
    return out


#: Below this many ns (11 days) a lateness's ms, rounded to the µs, is the nearest µs of the
#: integer itself: the float ``v / 1e6`` is within 1e-7 ms of ``v``/10⁶, never across a
#: rounding boundary but at a tie (`_rounded_ms`).
_EXACT_ROUNDING_NS = 10**15


def _rounded_ms(values_ns: Sequence[int], largest: int) -> list[float]:
    """``round(v / 1e6, 3)`` of each value (0.0 for 0), to the bit: by integer arithmetic for
    a positive value off a tie (the nearest µs, divided as Python divides: correctly rounded,
    as `round` returns the float nearest its decimal), `round` itself for the rest. A third
    of `round`'s time, for the streams whose events were read together."""
    if largest >= _EXACT_ROUNDING_NS:
        return [round(v / 1e6, 3) if v else 0.0 for v in values_ns]
    return [
        (v + 500) // 1000 / 1000 if v > 0 and v % 1000 != 500 else (round(v / 1e6, 3) if v else 0.0)
        for v in values_ns
    ]


def self_check_fields(
    source: Literal["kernel", "user"],
    output_ns: Sequence[int],
    lateness: LatenessTracker | None,
    kernel_reads: KernelReads | None,
    read_windows: Mapping[int, tuple[int, int, bool]] | None = None,
) -> dict[str, Any]:
    """A record's stamp self-check fields (`ClientTimings` names and values), from what its
    recorder saw per read: given to `ClientTimings` when it is built, in one go (each field
    set on a built model instead costs pydantic's ``__setattr__``).

    `output_ns` are the output events' stamps, each the stamp of the read that brought the
    event's first byte; `lateness` (user stamps) knows which select() report each read came
    from; `kernel_reads` (lean transport) has each read's stamp, seen time and whether the
    kernel stamped it.
    """
    fields: dict[str, Any] = {}
    if source == "kernel":
        reads = kernel_reads or KernelReads((), (), ())
        # The common case in C (labkit/_stampfigures.c): stamps in order, every read
        # stamped by the kernel. None: not that case, the steps below.
        done = (
            STAMP_FIGURES.kernel_self_check(output_ns, *reads, read_windows or {})
            if STAMP_FIGURES is not None and output_ns
            else None
        )
        if done is not None:
            lags_ms, late = done
            return _kernel_fields(fields, lags_ms, late, len(output_ns), lateness, output_ns[0])
        lags = _read_lags_ns(output_ns, reads)
        if lags:
            fields["read_lag_ms_p50"] = percentile(lags, 50, scale=1e6)
            fields["read_lag_ms_p99"] = percentile(lags, 99, scale=1e6)
        in_order = _kernel_lateness(output_ns, reads, read_windows or {})
        if in_order is None:  # the kernel gave no stamp: stamped when read, no estimate
            fields["stamp_source"] = "user"
            return fields
        fields["stamp_source"] = "kernel"
    else:
        fields["stamp_source"] = "user"
        if lateness is None or not lateness.stamps_ns:
            return fields
        in_order = lateness.lateness_ns(output_ns)
    if not in_order:
        return fields
    if not any(in_order):  # the common case, without sorting and rounding n zeros
        fields["stamp_lateness_ms_p50"] = fields["stamp_lateness_ms_p99"] = 0.0
        fields["stamp_lateness_ms_max"] = 0.0
        fields["stamp_lateness_ms"] = [0.0] * len(in_order)
    else:
        per_event = sorted(in_order)  # in ns: each figure divided by 1e6 as it is taken
        fields["stamp_lateness_ms_p50"] = percentile(per_event, 50, scale=1e6)
        fields["stamp_lateness_ms_p99"] = percentile(per_event, 99, scale=1e6)
        fields["stamp_lateness_ms_max"] = per_event[-1] / 1e6
        # Stream order; most are 0 even here (only events read together are late).
        fields["stamp_lateness_ms"] = _rounded_ms(in_order, per_event[-1])
    if lateness is None or output_ns[0] in lateness.stamps_ns:  # the first token's is known
        fields["ttft_lateness_ms"] = in_order[0] / 1e6
    return fields


def _kernel_fields(
    fields: dict[str, Any],
    lags_ms: tuple[float, float] | tuple[()],
    late: tuple[float, float, float, list[float], float] | None,
    n: int,
    lateness: LatenessTracker | None,
    first_ns: int,
) -> dict[str, Any]:
    """`self_check_fields` of `n` kernel-stamped events from what the C figures found: the
    read lags' median and 99th percentile in ms (`lags_ms`; () where none is known) and the
    lateness's median, 99th percentile, largest, per-event list and first event's in ms
    (`late`; None: no event late). The fields in the order the steps in Python set them."""
    if lags_ms:
        fields["read_lag_ms_p50"], fields["read_lag_ms_p99"] = lags_ms
    fields["stamp_source"] = "kernel"
    first_ms = 0.0
    if late is None:
        fields["stamp_lateness_ms_p50"] = fields["stamp_lateness_ms_p99"] = 0.0
        fields["stamp_lateness_ms_max"] = 0.0
        fields["stamp_lateness_ms"] = [0.0] * n
    else:
        p50, p99, largest, per_event, first_ms = late
        fields["stamp_lateness_ms_p50"] = p50
        fields["stamp_lateness_ms_p99"] = p99
        fields["stamp_lateness_ms_max"] = largest
        fields["stamp_lateness_ms"] = per_event
    if lateness is None or first_ns in lateness.stamps_ns:
        fields["ttft_lateness_ms"] = first_ms
    return fields


def stamp_self_check(
    timings: ClientTimings,
    source: Literal["kernel", "user"],
    output_ns: Sequence[int],
    lateness: LatenessTracker | None,
    kernel_reads: KernelReads | None,
    read_windows: Mapping[int, tuple[int, int, bool]] | None = None,
) -> None:
    """Fill a built record's stamp self-check fields (`self_check_fields`, set on
    `timings`)."""
    for name, value in self_check_fields(
        source, output_ns, lateness, kernel_reads, read_windows
    ).items():
        setattr(timings, name, value)
