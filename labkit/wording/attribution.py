"""`attribution`'s answer: whose time TTFT is, and what labkit itself adds."""

from __future__ import annotations

from labkit.figures import Quantile, TTFTSplit
from labkit.figures.attribution import AttributionFigures, AttributionKey, AttributionRow
from labkit.wording.common import marked, ms, say

__all__ = ["attribution_answer"]


def _pct(part: float | None, whole: float | None) -> str:
    return "" if part is None or not whole else f"{100 * part / whole:.0f}%"


def _provider_part(split: TTFTSplit) -> tuple[float | None, str]:
    """The provider's own part of the median TTFT (queue + prefill medians) and its name."""
    queue = split.provider_queue_ms.value if split.provider_queue_ms else None
    prefill = split.provider_prefill_ms.value if split.provider_prefill_ms else None
    own = [v for v in (queue, prefill) if v is not None]
    if not own:
        return None, ""
    what = "queue and prefill" if len(own) == 2 else ("prefill" if prefill is not None else "queue")
    return sum(own), what


_QUEUE_WORDS = {
    "reported": "as it reports it",
    "idle": "0 by construction: labkit alone used the server, within its slots",
    "keepalive": "the wait behind its keep-alive comments",
}


def attribution_answer(f: AttributionFigures, sdk_why_not: str | None = None) -> str:
    """The provider's share of TTFT with the median and its interval, then the network,
    labkit's own time and the SDK's (`sdk_why_not`: why the SDK path was not measured,
    where it was asked for)."""
    split = f.ttft_split or TTFTSplit()
    ttft = split.ttft_ms
    own, what = _provider_part(split)
    whole = ttft.value if ttft else None
    if own is not None and whole and split.network_front_end_ms is not None:
        text = marked(
            f"{_pct(own, whole)} of the median wait for the first token, {say(ttft)}, was "
            f"the provider's own work ({what}); network and front end took "
            f"{say(split.network_front_end_ms)}.",
            split.client_bound,
        )
        queue = _QUEUE_WORDS.get(split.queue_source or "", "from mixed sources")
        text += f" The provider's queue was {ms(_value(split.provider_queue_ms))} ({queue})."
    elif own is not None and whole:
        text = marked(
            f"{_pct(own, whole)} of the median wait for the first token, {say(ttft)}, was "
            f"the provider's {what}; the rest could not be split further.",
            split.client_bound,
        )
        text += " Not derived: " + "; ".join(split.not_derived) + "."
    else:
        text = marked(
            f"{say(ttft)} median wait for the first token; this provider reports no timings "
            "of its own, so its work, queueing and the network cannot be separated.",
            split.client_bound,
        )
    gap = _row(f, AttributionKey.DECODE_CLIENT_MINUS_PROVIDER)
    if gap is not None and gap.value_ms is not None:
        text += " " + marked(
            f"Client decode per token was {ms(abs(gap.value_ms), 2)} "
            f"{'above' if gap.value_ms >= 0 else 'below'} the server's own "
            f"{ms(f.value(AttributionKey.DECODE_PER_TOKEN), 2)}.",
            gap.client_bound,
        )
    prepare = f.value(AttributionKey.REQUEST_PREPARATION)
    parse = f.value(AttributionKey.STREAM_PARSING)
    if f.sdk_measured and f.sdk_ttft_ms is not None:
        later = "later" if f.sdk_ttft_ms >= 0 else "earlier"
        text += (
            f" The official SDK made the first token {ms(abs(f.sdk_ttft_ms), 2)} {later} "
            f"(median of {f.n_sdk_pairs} pairs); labkit itself took {ms(prepare, 2)} to "
            f"prepare a request and {ms(parse, 2)} to parse its stream."
        )
    else:
        text += (
            f" labkit itself took {ms(prepare, 2)} to prepare a request (before the clock "
            f"starts) and {ms(parse, 2)} to parse its stream"
        )
        text += f"; the SDK path was not measured: {sdk_why_not}." if sdk_why_not else "."
    return text


def _value(q: Quantile | None) -> float | None:
    return None if q is None else q.value


def _row(f: AttributionFigures, key: AttributionKey) -> AttributionRow | None:
    try:
        return f.row(key)
    except KeyError:
        return None
