"""`attribution`'s answer: whose time TTFT is, and what labkit itself adds."""

from __future__ import annotations

from labkit.analysis.stats import _number
from labkit.figures import Mean, Quantile, TTFTSplit
from labkit.figures.attribution import AttributionFigures
from labkit.wording.common import marked, say

__all__ = ["attribution_answer", "difference_words"]

_QUEUE_WORDS = {
    "reported": "as the provider reports it",
    "idle": "0 by construction: labkit alone used the server, within its slots",
    "keepalive": "the wait behind its keep-alive comments",
}


def _pct(part: Mean | None, whole: Mean | None) -> str:
    if part is None or part.value is None or whole is None or not whole.value:
        return ""
    return f"{100 * part.value / whole.value:.0f}%"


def _part(q: Mean | Quantile | None) -> str:
    """A secondary figure inside a sentence: `3.1 ms [2.9–3.3]` (its 95% interval)."""
    if q is None or q.value is None:
        return "n/a"
    if q.lo is None or q.hi is None:
        return f"{_number(q.value)} ms (n={q.n})"
    if q.lo == q.hi == q.value:  # every request the same (a queue 0 by construction)
        return f"{_number(q.value)} ms"
    dash = " to " if q.lo < 0 or q.hi < 0 else "–"
    return f"{_number(q.value)} ms [{_number(q.lo)}{dash}{_number(q.hi)}]"


def difference_words(q: Quantile | None, what: str, unit: str = "ms") -> str:
    """A paired difference said with its interval, and "no difference detectable" when the
    interval holds 0 (a claim on noise is never made)."""
    if q is None or q.value is None:
        return f"{what}: not measured"
    if q.lo is None or q.hi is None:
        return f"{what}: {q.value:+.2f} {unit} (n={q.n}; too few for an interval, no claim)"
    spread = f"95% CI {q.lo:+.2f} to {q.hi:+.2f}, n={q.n}"
    if q.lo <= 0 <= q.hi:
        return f"{what}: no difference detectable ({q.value:+.2f} {unit}, {spread})"
    return f"{what}: {q.value:+.2f} {unit} ({spread})"


def attribution_answer(f: AttributionFigures, sdk_why_not: str | None = None) -> str:
    """The mean TTFT split into parts that add up to it (each with its interval), then the
    client's decode against the server's, the SDK's difference and labkit's own work outside
    the clock (`sdk_why_not`: why the SDK path was not measured, where it was asked for)."""
    split = f.ttft_split or TTFTSplit()
    ttft, own = split.ttft_ms, split.labkit_ms
    if ttft is None or ttft.value is None:
        return "No request had a time to first token to split."
    labkit_part = f", labkit's own send {_part(own)} ({_pct(own, ttft)})" if own else ""
    if split.provider_prefill_ms is not None and split.network_front_end_ms is not None:
        queue, prefill = split.provider_queue_ms, split.provider_prefill_ms
        provider = (queue.value or 0.0) + (prefill.value or 0.0) if queue else prefill.value
        share = f"{100 * (provider or 0.0) / ttft.value:.0f}%"
        text = marked(
            f"{say(ttft)} mean wait for the first token: {share} the provider's own work "
            f"(prefill {_part(prefill)}, queue {_part(queue)}); network and front end "
            f"{_part(split.network_front_end_ms)} ({_pct(split.network_front_end_ms, ttft)})"
            f"{labkit_part}.",
            split.client_bound,
        )
        why = _QUEUE_WORDS.get(split.queue_source or "", "from mixed sources")
        text += f" The queue was {why}."
    else:
        known = [
            f"{name} {_part(q)}"
            for name, q in (
                ("queue", split.provider_queue_ms),
                ("prefill", split.provider_prefill_ms),
            )
            if q is not None
        ]
        together = {
            (True, False): "the prefill, network and front end",
            (False, True): "the queue, network and front end",
        }.get(
            (split.provider_queue_ms is not None, split.provider_prefill_ms is not None),
            "the provider and the network",
        )
        text = marked(
            f"{say(ttft)} mean wait for the first token: "
            + (f"the provider's {', '.join(known)}; " if known else "")
            + f"{together} together took {_part(split.unsplit_ms)}{labkit_part} ("
            + "; ".join(split.not_derived)
            + ").",
            split.client_bound,
        )
    if f.decode_gap is not None:
        text += " " + marked(
            difference_words(f.decode_gap, "Client minus server decode per token") + ".",
            f.decode_gap_client_bound,
        )
    outside = [
        f"{_part(q)} to {what}"
        for q, what in ((f.prepare_ms, "prepare a request"), (f.parse_ms, "parse its stream"))
        if q is not None and q.value is not None
    ]
    labkit_outside = f"outside the clock labkit took {' and '.join(outside)}" if outside else ""
    if f.sdk_measured and f.sdk_ttft is not None:
        text += f" {difference_words(f.sdk_ttft, 'The official SDK on TTFT')}"
        text += f"; {labkit_outside}." if labkit_outside else "."
    else:
        if labkit_outside:
            text += f" {labkit_outside[0].upper()}{labkit_outside[1:]}"
            text += f"; the SDK path was not measured: {sdk_why_not}." if sdk_why_not else "."
        elif sdk_why_not:
            text += f" The SDK path was not measured: {sdk_why_not}."
    return text
