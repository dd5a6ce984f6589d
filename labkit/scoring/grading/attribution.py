"""Grading question 5 (`attribution`): whose time the first token's wait is."""

from __future__ import annotations

from labkit.figures.attribution import AttributionFigures
from labkit.figures.attribution import AttributionKey as K
from labkit.records import LabAnswer, RequestRecord
from labkit.scoring.grading.base import (
    Check,
    Truth,
    fact,
    figure,
    mean_of,
    median_of,
    register_grader,
    true_decode_ms_per_token,
    true_outside_ms,
    true_ttft_ms,
)

__all__ = ["grade_attribution"]


def _row(f: AttributionFigures, key: K) -> float | None:
    try:
        return f.value(key)
    except KeyError:
        return None


@register_grader("attribution")
def grade_attribution(answer: LabAnswer, records: list[RequestRecord], truth: Truth) -> list[Check]:
    """The split's parts against what the server did (queue, prefill) and the rest (the read
    delay and the unreported front end), the decode gap, the SDK's paired difference, and
    the queue's source."""
    f = answer.figures
    if not isinstance(f, AttributionFigures) or f.ttft_split is None:
        return []
    who = f"attribution · {answer.provider}"
    pairs = truth.pairs(records)
    wire = [(r, t) for r, t in pairs if r.app.client_path == "wire"] or pairs
    split = f.ttft_split
    ttft = mean_of([true_ttft_ms(r, t) for r, t in wire])
    queue = mean_of([t.queue_ms for _, t in wire])
    prefill = mean_of([t.prefill_ms for _, t in wire])
    outside = mean_of([true_outside_ms(r, t) for r, t in wire])
    checks = [
        figure(who, "TTFT (mean)", split.ttft_ms, ttft, "ms"),
        figure(who, "provider queue (mean)", split.provider_queue_ms, queue, "ms", 0.01),
        figure(who, "provider prefill (mean)", split.provider_prefill_ms, prefill, "ms", 0.01),
        figure(who, "network and front end (mean)", split.network_front_end_ms, outside, "ms"),
    ]
    if split.queue_source is not None:
        zero = all(t.queue_ms == 0 for _, t in wire)
        checks.append(
            fact(who, "queue 0 by construction", split.queue_source == "idle", zero)
            if split.queue_source == "idle"
            else fact(who, "queue as reported", True, True)
        )
    # lab.json written before the intervals held the gap and the SDK's difference as rows'
    # plain medians: graded as figures stated without an interval
    gap_stated = (
        f.decode_gap if f.decode_gap is not None else _row(f, K.DECODE_CLIENT_MINUS_PROVIDER)
    )
    if gap_stated is not None:
        gaps = [
            (d - r.provider_timings.decode_ms_per_token)
            if (d := true_decode_ms_per_token(t)) is not None
            and r.provider_timings.decode_ms_per_token is not None
            else None
            for r, t in wire
        ]
        name = "client − server decode per token (median)"
        checks.append(figure(who, name, gap_stated, median_of(gaps), "ms/token"))
    sdk_stated = f.sdk_ttft if f.sdk_ttft is not None else f.sdk_ttft_ms
    if sdk_stated is not None:
        sdk = {r.trial: (r, t) for r, t in pairs if r.app.client_path == "sdk"}
        diffs = [
            (a - b)
            if (a := true_ttft_ms(*sdk[r.trial])) is not None
            and (b := true_ttft_ms(r, t)) is not None
            else None
            for r, t in pairs
            if r.app.client_path == "wire" and r.trial in sdk
        ]
        true_diff = median_of(diffs)
        # The truth server sees when it sent the first event, not when the SDK handed it to
        # the caller: the SDK's read path (httpx, its parse) is in the real difference and
        # not in this one, which is so a lower bound of it.
        name = "SDK minus wire TTFT (paired median)"
        checks.append(figure(who, name, sdk_stated, true_diff, "ms", bound="lower"))
        q = f.sdk_ttft
        # a difference claimed (its interval excludes 0): its sign must be the true one,
        # which a lower bound above 0 settles (later) and one at or under it does not
        if q is not None and q.lo is not None and q.hi is not None and not q.lo <= 0 <= q.hi:
            name = "the SDK's TTFT is later"
            if true_diff is not None and true_diff > 0:
                checks.append(fact(who, name, q.lo > 0, True))
            else:
                checks.append(
                    Check(
                        answer=who,
                        kind="fact",
                        name=name,
                        stated=str(q.lo > 0),
                        true="unknown",
                        ok=None,
                        why="the truth bounds the difference from below only, at "
                        f"{'n/a' if true_diff is None else f'{true_diff:.3g} ms'}",
                    )
                )
    return checks
