"""Sentences on load levels, shared by the kinds that run them (`load`, `sweep`,
`trace`): the server's queue, goodput and the prompt-cache hits across levels."""

from __future__ import annotations

from collections.abc import Sequence

from labkit.figures import LoadLevel, LoadLevelCache
from labkit.wording.common import ms, say

__all__ = ["cache_sentence", "goodput_sentence", "server_queue_sentence"]


def _median_ttft(level: LoadLevel) -> str:
    """A level's median TTFT with its interval and n."""
    return say(level.ttft.p50 if level.ttft else None)


def _rose(first: float, last: float) -> bool:
    """Whether a wait grew by more than noise: a fifth and a millisecond."""
    return last > first * 1.2 + 1.0


def server_queue_sentence(levels: Sequence[LoadLevel]) -> str:
    """What the server's own queue did across the levels: as the provider reports it, or,
    where it reports a prefill but no queue (llama.cpp), derived from TTFT beyond prefill."""
    reported = [r for r in levels if r.provider_queue_ms_p50 is not None]
    if reported:
        first, last = reported[0], reported[-1]
        a, b = first.provider_queue_ms_p50 or 0.0, last.provider_queue_ms_p50 or 0.0
        if len(reported) < 2:
            return f" The provider's own queue time was {ms(a, 2)} (p50) at {first.title}."
        trend = (
            "rose: requests waited in the server's queue"
            if _rose(a, b)
            else "did not rise: the server did not queue the extra requests"
        )
        return (
            f" The provider's own queue time (p50) went from {ms(a, 2)} at {first.title} "
            f"to {ms(b, 2)} at {last.title} (p99 {ms(last.provider_queue_ms_p99, 2)}): "
            f"it {trend}."
        )
    derived = [r for r in levels if r.ttft_beyond_prefill_ms_p50 is not None]
    if len(derived) < 2:
        return ""
    first, last = derived[0], derived[-1]
    a, b = first.ttft_beyond_prefill_ms_p50 or 0.0, last.ttft_beyond_prefill_ms_p50 or 0.0
    text = (
        f" The server reports no queue time; TTFT beyond its own prefill (queue, network and "
        f"front end together) went from {ms(a)} (p50) at {first.title} to {ms(b)} at "
        f"{last.title}"
    )
    if _rose(a, b):
        return text + (
            f": about {ms(b - a)} more per request, time spent waiting for the server "
            "(its queue, or a slot busy with other requests) — derived, not reported."
        )
    return text + ": the server did not queue the extra requests."


def goodput_sentence(rows: Sequence[LoadLevel]) -> str:
    """Where goodput peaked, for levels judged against SLOs (empty: no SLOs)."""
    judged = [(r, r.slo.goodput_rps) for r in rows if r.slo and r.slo.goodput_rps is not None]
    if len(judged) < 2:
        return ""
    best, goodput = max(judged, key=lambda pair: pair[1])
    passed = [r.title for r in rows if r.slo and r.slo.passed]
    held = f"the SLOs held at {', '.join(passed)}" if passed else "no level held every SLO"
    return f" Goodput peaked at {best.title}: {goodput:.2f} req/s; {held}."


def cache_sentence(cache: LoadLevelCache | None) -> str:
    """The provider's cache hits beside the TTFT they bought (empty: it counted none)."""
    if cache is None or cache.cached_share is None:
        return ""
    bought = (
        f": TTFT p50 {ms(cache.ttft_ms_p50_hit)} on a hit, {ms(cache.ttft_ms_p50_miss)} otherwise"
        if cache.ttft_ms_p50_hit is not None and cache.ttft_ms_p50_miss is not None
        else ""
    )
    return (
        f" The provider served {cache.cached_share:.0%} of the prompt tokens from its cache "
        f"({cache.hits} of {cache.counted} requests had at least half their prompt cached)"
        f"{bought}."
    )


def _tps(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0f}"
