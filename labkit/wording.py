"""The answers' words: the one place where sentences are composed from figures.

Each answer leads with ONE sentence — the number, its interval, what it means (about 35
words at most) — then at most three short sentences; every other number lives in the
report's tables. Experiments' `analyze` compute figures and call the function of their
kind here; nothing else composes an answer. A median or percentile is always said through
`labkit.analysis.stats.describe` (its interval and n, or why there is none), and a figure
the self-check marked client-bound is said to be.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from labkit.analysis.stats import _number, describe
from labkit.figures import (
    Estimate,
    LoadLevel,
    LoadLevelCache,
    PromptCost,
    Quantile,
    RequestStats,
    SLOCheck,
    SLOReport,
    TTFTSplit,
)
from labkit.figures.attribution import AttributionFigures, AttributionKey, AttributionRow
from labkit.figures.conversation import ConversationFigures, ConversationVariant
from labkit.figures.determinism import DeterminismFigures, VariantRow
from labkit.figures.next_token import NextTokenFigures, TokenChoice
from labkit.figures.prefill_decode import PrefillDecodeFigures
from labkit.figures.session import SessionFigures
from labkit.figures.single import SingleFigures
from labkit.figures.sweep import SweepFigures
from labkit.figures.token_ratio import TokenizerSpread, TokenRatioFigures

__all__ = [
    "CLIENT_BOUND_MARK",
    "attribution_answer",
    "cache_sentence",
    "cell",
    "client_bound_line",
    "conversation_answer",
    "determinism_answer",
    "divergence_sentence",
    "goodput_sentence",
    "goodput_words",
    "group_label",
    "load_answer",
    "marked",
    "ms",
    "next_token_answer",
    "prefill_decode_answer",
    "prompt_cost_lead",
    "prompt_cost_model_sentence",
    "say",
    "server_queue_sentence",
    "session_answer",
    "single_answer",
    "slo_sentence",
    "sweep_answer",
    "token_ratio_answer",
    "trace_answer",
]

#: How a value the self-check flagged is marked wherever it is shown.
CLIENT_BOUND_MARK = "⚠ client-bound"


def ms(value: float | None, digits: int = 1, signed: bool = False) -> str:
    """`12.3 ms` (`+12.3 ms` when `signed`), or `n/a` for a missing value."""
    if value is None:
        return "n/a"
    return f"{value:{'+' if signed else ''}.{digits}f} ms"


def say(q: Quantile | None, unit: str = "ms") -> str:
    """A median or percentile with its interval and n (`describe`), or `n/a`."""
    return "n/a" if q is None else describe(q, unit)


def cell(q: Quantile | None) -> str:
    """A median or percentile in a table cell, where n has its own column: `describe`'s
    rule, short — `412 [398–430]` (the 95% interval in brackets), `412 (no CI: n<6)` for a
    median of too few requests, `needs ≥ 299` for a tail percentile of too few (never the
    largest value in its place), `—` for none."""
    if q is None or q.value is None:
        return "—"
    if q.lo is not None and q.hi is not None:
        dash = " to " if q.lo < 0 or q.hi < 0 else "–"  # `-0.70 to -0.48`, not `-0.70–-0.48`
        return f"{_number(q.value)} [{_number(q.lo)}{dash}{_number(q.hi)}]"
    if q.q == 0.5:
        return f"{_number(q.value)} (no CI: n<{q.min_n})"
    return f"needs ≥ {q.min_n}"


def marked(text: str, reason: str | None) -> str:
    """`text` with the client-bound mark where `reason` is set (the reason is in the
    report's notes; the mark says where it applies)."""
    return f"{text} [{CLIENT_BOUND_MARK}]" if reason else text


def group_label(s: RequestStats) -> str:
    """`experiment`, `experiment (sdk)` for the SDK path, `(all levels)` where the group
    pools load levels: how every table names a group of the request statistics."""
    name = s.experiment + (f" ({s.client_path})" if s.client_path != "wire" else "")
    return name + (" (all levels)" if s.levels else "")


def client_bound_line(s: RequestStats) -> str:
    """`provider · experiment · <the self-check's reason>` for a flagged group (the run's
    warning and the report's note say the same)."""
    path = f" ({s.client_path})" if s.client_path != "wire" else ""
    return f"{s.provider} · {s.experiment}{path} · {s.client_bound}"  # the reason names levels


def _pct(part: float | None, whole: float | None) -> str:
    return "" if part is None or not whole else f"{100 * part / whole:.0f}%"


# --- single ----------------------------------------------------------------------------------

_STOP_WORDS = {"length": "max_tokens reached", "end": "the model's own end"}


def single_answer(f: SingleFigures) -> str:
    """Median TTFT with its interval, then the token rate, the reply and the server's clock."""
    text = marked(
        f"{say(f.ttft)} to the first token: the median wait from sending a request until its "
        "reply starts (time to first token, TTFT).",
        f.client_bound,
    )
    stops = ", ".join(_STOP_WORDS.get(k, k) for k in sorted(f.stop_reasons))
    tokens = f"{f.output_tokens_p50:g}-token " if f.output_tokens_p50 is not None else ""
    reply = f"the {tokens}reply" + (f" ({stops})" if stops else "")
    if f.decode_per_token is not None and f.decode_per_token.n:
        text += f" Then a token came every {say(f.decode_per_token)}"
        text += (
            f", so {reply} was complete after {ms(f.last_token_ms_p50)}."
            if f.last_token_ms_p50 is not None
            else "."
        )
    elif f.last_token_ms_p50 is not None:
        text += f" {reply[0].upper()}{reply[1:]} was complete after {ms(f.last_token_ms_p50)}."
    if f.provider_prefill_ms_p50 is not None:
        per_token = f.provider_decode_ms_per_token_p50
        text += f" The server's own clock: {ms(f.provider_prefill_ms_p50)} reading the prompt" + (
            f", {ms(per_token, 2)} per token." if per_token is not None else "."
        )
    if f.failed:
        text += f" {f.failed} of {f.n + f.failed} requests failed."
    return text


# --- token_ratio -----------------------------------------------------------------------------


def token_ratio_answer(f: TokenRatioFigures, framing_tokens: float | None) -> str:
    """Characters per token across the texts, how far the 4-characters rule is off, and
    what the chat framing and the other tokenizers add (`framing_tokens`: usage of the
    empty prompt minus its own tokens; None: unknown)."""
    rows = [
        r
        for r in f.rows
        if r.tokens and r.chars_per_token is not None and r.rule_of_4_error_pct is not None
    ]
    most = max(rows, key=lambda r: r.chars_per_token or 0.0)
    least = min(rows, key=lambda r: r.chars_per_token or 0.0)
    worst = max(rows, key=lambda r: abs(r.rule_of_4_error_pct or 0.0))
    best = min(rows, key=lambda r: abs(r.rule_of_4_error_pct or 0.0))
    text = (
        f"{most.chars_per_token:.2f} characters per token for {most.text_id} but only "
        f"{least.chars_per_token:.2f} for {least.text_id}: a token's size depends on the kind "
        "of text, so '1 token ≈ 4 characters' is a rough rule."
    )
    text += (
        f" The rule was closest for {best.text_id} ({best.rule_of_4_error_pct:+.0f}%) and "
        f"worst for {worst.text_id} ({worst.rule_of_4_error_pct:+.0f}%)."
    )
    off = [d for d in f.input_tokens_local_diffs if d != 0]
    if off:
        text += (
            f" labkit's own count and the provider's usage disagree on {len(off)} of "
            f"{len(f.input_tokens_local_diffs)} requests (by {min(off):+d} to {max(off):+d} "
            "tokens beyond the chat framing)."
        )
    elif framing_tokens is not None:
        text += f" The chat framing adds about {framing_tokens:.0f} tokens to every prompt."
    widest = _widest(f.spread)
    if widest is not None:
        text += (
            f" Across {len({c.tokenizer for c in f.side_by_side})} tokenizers, {widest.text_id} "
            f"took {widest.most_efficient_tokens} to {widest.least_efficient_tokens} tokens "
            f"({widest.ratio:.2f}×)."
        )
    return text


def _widest(spread: Sequence[TokenizerSpread]) -> TokenizerSpread | None:
    differing = [s for s in spread if s.least_efficient_tokens != s.most_efficient_tokens]
    return max(differing, key=lambda s: s.ratio) if differing else None


# --- determinism -----------------------------------------------------------------------------


def _variant_words(row: VariantRow) -> str:
    """`temperature 1, seed 1234` for a variant's parameters."""
    words = [f"temperature {row.params['temperature']}"] if "temperature" in row.params else []
    if row.params.get("seed") is not None:
        words.append(f"seed {row.params['seed']}")
    return ", ".join(words) or row.variant


def _temperature(r: VariantRow) -> float:
    return float(r.params.get("temperature", 1.0))


def determinism_answer(f: DeterminismFigures) -> str:
    """Which settings repeated their reply exactly, and which parameter decided it."""
    judged = [r for r in f.variants if r.identical is not None]
    same = sum(1 for r in judged if r.identical)
    greedy = [r for r in judged if _temperature(r) == 0]
    hot = [r for r in judged if _temperature(r) > 0]
    hot_seed = [r for r in hot if r.params.get("seed") is not None]
    hot_free = [r for r in hot if r.params.get("seed") is None]
    if greedy and all(r.identical for r in greedy):
        why = "at temperature 0 the reply never changed, seed or not"
    elif greedy:
        why = "even at temperature 0 replies differed (batching or hardware nondeterminism)"
    else:
        why = "no variant decoded greedily"
    text = f"{same} of {len(judged)} settings gave the same reply on every repeat: {why}."
    if hot_free:
        varied = not all(r.identical for r in hot_free)
        text += (
            " Above temperature 0 without a seed, replies varied."
            if varied
            else " Above temperature 0 without a seed, replies still matched (a fixed "
            "default seed, or too few repeats)."
        )
    if hot_seed:
        text += (
            " A seed made sampled replies repeat."
            if all(r.identical for r in hot_seed)
            else " A seed did not make sampled replies repeat here."
        )
    diverged = [r for r in judged if not r.identical and r.first_divergent_token is not None]
    if diverged:
        first = min(diverged, key=lambda r: r.first_divergent_token or 0)
        where = (
            "at the first token"
            if not first.first_divergent_token
            else f"after {first.first_divergent_token} identical tokens"
        )
        text += (
            f" The earliest split came {where} ({_variant_words(first)}: "
            f"{first.distinct_outputs} different replies of {first.n})."
        )
    seen = f.next_token
    if seen is not None:
        text += (
            " " + divergence_sentence(seen)
            if seen.inspected
            else f" Its candidates were not inspected: {seen.not_inspected_because}."
        )
    return text


# --- attribution -----------------------------------------------------------------------------


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


# --- load ------------------------------------------------------------------------------------


def _median_ttft(level: LoadLevel) -> str:
    """A level's median TTFT with its interval and n."""
    return say(level.ttft.p50 if level.ttft else None)


def load_answer(levels: Sequence[LoadLevel], extras: Sequence[str] = ()) -> str:
    """How TTFT and throughput moved from the first level to the last, then at most three
    short sentences: `extras` (the server's queue, goodput, ... in order of importance) and
    the levels the self-check flagged."""
    done = [r for r in levels if r.ok]
    first, last = done[0], done[-1]
    if len(done) == 1:
        text = (
            f"{_median_ttft(first)} median TTFT at {first.title}, with "
            f"{_tps(first.output_tokens_per_s)} output tokens/s from all streams together."
        )
    else:
        text = (
            f"{_median_ttft(last)} median TTFT at {last.title}, against "
            f"{_median_ttft(first)} at {first.title}; output throughput went from "
            f"{_tps(first.output_tokens_per_s)} to {_tps(last.output_tokens_per_s)} tokens/s."
        )
    more = [e.strip() for e in extras if e.strip()]
    bound = [r for r in levels if r.client_bound]
    if bound:
        more.insert(
            0,
            f"{CLIENT_BOUND_MARK} at {', '.join(r.title for r in bound)}: labkit read the "
            f"streams late, so those timings include its own delay; {bound[-1].client_bound_fix}.",
        )
    return " ".join([text, *more[:3]])


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


def trace_answer(trace: str, speedup: float, row: LoadLevel) -> str:
    """The replay's median TTFT with its interval, then its rate and the cache hits."""
    text = marked(
        f"{_median_ttft(row)} median TTFT replaying {trace} at ×{speedup:g}: the wait for "
        f"the first token under the trace's own arrivals ({row.ok} ok, {row.failed} failed).",
        row.client_bound_fix if row.client_bound else None,
    )
    rate = row.achieved_rate_rps
    achieved = f"{rate:.2f}" if rate is not None else "n/a"
    text += f" Requests started at {achieved} req/s against the trace's {row.target:g}."
    return text + cache_sentence(row.cache)


# --- conversation ----------------------------------------------------------------------------


def _variant_growth(v: ConversationVariant) -> str:
    return (
        f"{ms(v.first_ttft_ms)} at turn 1 to {ms(v.last_ttft_ms)} at the last turn "
        f"(medians of {v.sessions} sessions) while the prompt grew from "
        f"{v.first_input_tokens or 0:.0f} to {v.last_input_tokens or 0:.0f} tokens"
    )


def conversation_answer(f: ConversationFigures, asked_off: bool) -> str:
    """How TTFT grew with the history, with and without the provider's prompt cache
    (`asked_off`: a cache-off variant was configured)."""
    done = [v for v in f.variants if v.sessions]
    on = next((v for v in done if v.cache == "on"), None)
    off = next((v for v in done if v.cache == "off"), None)
    lead = on or done[0]
    text = f"TTFT went from {_variant_growth(lead)}, with the prompt cache {lead.cache}."
    if lead.last_reuse is not None:
        text += f" The provider served {lead.last_reuse:.0%} of the last prompt from its cache."
    if off is not None and off is not lead:
        text += f" With it off, TTFT went from {_variant_growth(off)}."
        if on and on.last_ttft_ms and off.last_ttft_ms:
            text += (
                f" At the last turn the cache cut TTFT ×{off.last_ttft_ms / on.last_ttft_ms:.2f}."
            )
    elif asked_off and off is None:
        text += " The provider has no prompt-cache switch, so no cache-off variant ran."
    return text


# --- prefill_decode --------------------------------------------------------------------------
# (the prefill sweep's sentences)


def _g(value: float | None) -> str:
    """A fitted value to three significant figures (`0.512`, `12.3`, `-135`)."""
    return "n/a" if value is None else f"{value:.3g}"


def _ci(e: Estimate, unit: str = "") -> str:
    """`95% CI 0.49 to 0.53 ms` (`to`, not a dash: bounds may be negative)."""
    return f"95% CI {_g(e.lo)} to {_g(e.hi)}{unit}"


def _intercept_words(m: PromptCost) -> str:
    e = m.intercept_ms
    if m.intercept_reading == "positive":
        return f"fixed part {_g(e.value)} ms ({_ci(e, ' ms')})"
    if m.intercept_reading == "zero":
        return f"no fixed part distinguishable from 0 ({_ci(e, ' ms')})"
    if m.model == "linear":
        return (
            f"its fixed part, {_g(e.value)} ms ({_ci(e, ' ms')}), is not physical: a "
            "straight line is the wrong model over this range"
        )
    return f"even the curve's fixed part, {_g(e.value)} ms, is not physical: read the slopes"


def prompt_cost_lead(m: PromptCost) -> str:
    """The lead sentence: what one more prompt token costs in TTFT, with its interval."""
    lo, hi = m.marginal_at_min, m.marginal_at_max
    if m.model == "linear":
        return (
            f"{_g(lo.value)} ms ({_ci(lo)}) more to the first token per extra prompt token, "
            f"over {m.min_tokens:,.0f}–{m.max_tokens:,.0f} tokens: the model reads (prefills) "
            "the whole prompt before it writes."
        )
    return (
        f"{_g(lo.value)} ms ({_ci(lo)}) more to the first token per extra prompt token at "
        f"{m.min_tokens:,.0f} tokens, {_g(hi.value)} ms ({_g(hi.lo)} to {_g(hi.hi)}) at "
        f"{m.max_tokens:,.0f}: prefill per token grows with the prompt."
    )


def prompt_cost_model_sentence(m: PromptCost) -> str:
    """Which model the data chose, and what its fixed part may be said to be."""
    if m.curvature_p is None:
        chose = f"Too few prompt lengths to test for a curve (n = {m.n})"
    elif m.model == "quadratic":
        chose = (
            f"A straight line fits worse than a curve (F-test p = {m.curvature_p:.2g}, n = {m.n})"
        )
    else:
        chose = f"A curve fits no better than the line (F-test p = {m.curvature_p:.2f}, n = {m.n})"
    return f"{chose}; {_intercept_words(m)}."


def prefill_decode_answer(f: PrefillDecodeFigures) -> str:
    """The marginal cost of a prompt token (the lead), the model behind it, decode across
    the sweep, and a cold cache hit (a warning) or what a cached prefix did to TTFT."""
    m = f.ttft_model
    if m is None:
        return "Not enough successful requests at two or more prompt lengths to fit."
    parts = [marked(prompt_cost_lead(m), f.client_bound), prompt_cost_model_sentence(m)]
    decodes = [p.decode_ms_per_token for p in f.points if p.decode_ms_per_token is not None]
    if decodes:
        trend = ""
        d = f.decode_fit
        if d is not None:
            trend = f" ({d.ms_per_token * 1000:+.2f} ms per 1,000 prompt tokens"
            if d.ms_per_token_lo is not None and d.ms_per_token_hi is not None:
                trend += (
                    f", 95% CI {d.ms_per_token_lo * 1000:+.2f} to {d.ms_per_token_hi * 1000:+.2f}"
                )
            trend += ")"
        parts.append(
            f"Decode took {min(decodes):.2f}–{max(decodes):.2f} ms per output token across "
            f"the sweep{trend}."
        )
    cache = f.cache
    if f.cold_cache_hits:
        parts.append(f"Warning: {f.cold_cache_hits} cold requests still hit a prompt cache.")
    elif cache and cache.hit_ttft_ms is not None and cache.prime_ttft_ms is not None:
        cached = (
            f" ({cache.hit_cached_tokens:.0f} tokens cached)"
            if cache.hit_cached_tokens is not None
            else " (no cached-token count reported)"
        )
        parts.append(
            f"Sending the same {cache.prefix_tokens}-token prefix again, TTFT went from "
            f"{cache.prime_ttft_ms:.1f} ms to {cache.hit_ttft_ms:.1f} ms{cached}."
        )
    return " ".join(parts)


# --- slo -------------------------------------------------------------------------------------

_VERDICT_WORDS = {"pass": "held", "fail": "missed", "undecided": "undecided"}


def _check_words(c: SLOCheck) -> str:
    """`ttft_ms_p90 ≤ 500 ms held: 180 of 192 within it (94%, 95% CI 89–97%)`."""
    verdict = f"{c.name} ≤ {c.bound_ms:g} ms {_VERDICT_WORDS[c.verdict]}"
    s = c.share
    if s is None or s.value is None or s.lo is None or s.hi is None:
        return f"{verdict}: {c.met} of {c.requests} within it"
    return (
        f"{verdict}: {s.k} of {s.n} within it ({s.value:.0%}, 95% CI "
        f"{s.lo * 100:.0f}–{s.hi * 100:.0f}%)"
    )


def goodput_words(report: SLOReport) -> str:
    """`12.30 req/s, 95% CI 11.80–12.60`, or `n/a`."""
    if report.goodput_rps is None:
        return "n/a"
    if report.goodput_low_rps is None or report.goodput_high_rps is None:
        return f"{report.goodput_rps:.2f} req/s"
    return (
        f"{report.goodput_rps:.2f} req/s, 95% CI {report.goodput_low_rps:.2f}–"
        f"{report.goodput_high_rps:.2f}"
    )


def slo_sentence(report: SLOReport) -> str:
    """The report in one sentence: each SLO's verdict at 95% with the share meeting it, and
    the goodput with its interval."""
    checks = "; ".join(_check_words(c) for c in report.checks)
    return (
        f"SLOs: {checks}; {report.good} of {report.requests} requests met every SLO "
        f"(goodput {goodput_words(report)})."
    )


# --- sweep -----------------------------------------------------------------------------------


def _load(mode: str, value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"{value:.0f} streams" if mode == "concurrency" else f"{value:.2f} req/s"


def sweep_answer(f: SweepFigures) -> str:
    """The knee with its interval and the goodput there; then the baseline and throughput,
    the first level above the knee to fail (and any left undecided), and what it cost."""
    base = f.probes[0]
    if not base.met:
        return (
            f"Even one request at a time does not pass the SLOs ({base.why}): no load is "
            f"shown to meet them. Stopped: {f.stopped}."
        )
    if f.knee is None:
        lead = "No level above the baseline was shown to meet the SLOs."
    else:
        unit = "streams" if f.mode == "concurrency" else "req/s"
        low = f"{f.knee_low:.0f}" if f.mode == "concurrency" else f"{f.knee_low or 0:.2f}"
        if f.knee_high is None:
            interval = f"at or above {low} {unit}: no level failed"
        else:
            high = f"{f.knee_high:.0f}" if f.mode == "concurrency" else f"{f.knee_high:.2f}"
            interval = f"[{low}, {high}) {unit}"
        goodput = ""
        if f.knee_goodput_rps is not None:
            goodput_ci = (
                f" (95% CI {f.knee_goodput_low_rps:.2f}–{f.knee_goodput_high_rps:.2f})"
                if f.knee_goodput_low_rps is not None and f.knee_goodput_high_rps is not None
                else ""
            )
            goodput = f", goodput {f.knee_goodput_rps:.2f} req/s{goodput_ci} there"
        lead = (
            f"The knee: {_load(f.mode, f.knee)} meets every SLO at 95% (the true knee lies "
            f"{'' if f.knee_high is None else 'in '}{interval}){goodput}."
        )
    parts = [lead]
    rates = f"The synchronous baseline completed {_load('rate', base.level.completed_rps)}"
    if f.throughput_rps is not None:
        rates += f", the throughput probe ({f.probes[1].level.title}) {f.throughput_rps:.2f}"
    parts.append(rates + ".")
    failed = [p for p in f.probes if p.role == "bisect" and p.verdict == "fail"]
    undecided = [p.level.title for p in f.probes if p.role == "bisect" and p.verdict == "undecided"]
    above = ""
    if failed:
        lowest = min(failed, key=lambda p: p.level.target)
        above = f"The first level above it to fail, {lowest.level.title}: {lowest.why}. "
    if undecided:
        above += f"Undecided at the request bound: {', '.join(undecided)}. "
    sent = sum(p.requests_sent for p in f.probes)
    parts.append(f"{above}{len(f.probes)} levels, {sent} requests; stopped: {f.stopped}.")
    return " ".join(parts)


# --- session (agent jobs) -------------------------------------------------------------------


def session_answer(provider: str, figures: SessionFigures) -> str:
    """`session`: "X finished the job in N s; M% of it was waiting on the provider's prefill,
    ..." from the sessions' summed critical path."""
    path = figures.critical
    total = path.total_ms
    done = sum(r.complete for r in figures.sessions)
    head = f"{provider} finished {done} of {len(figures.sessions)} sessions"
    if figures.completion_ms_p50 is not None:
        head += f" in {figures.completion_ms_p50 / 1000:.2f} s (median)"
    if total <= 0:
        return head + "."
    prefill = "the provider's prefill" + ("" if figures.queue_reported else " (queue included)")
    terms = [
        ("the provider's queue", path.provider_queue_ms),
        (prefill, path.prefill_ms),
        ("decode", path.decode_ms),
        ("tools", path.tool_ms),
        ("labkit itself", path.labkit_ms),
    ]
    terms.sort(key=lambda t: -t[1])
    parts = [f"{100 * v / total:.0f}% {name}" for name, v in terms if v > 0]
    text = f"{head}; along the critical path {parts[0]}"
    if len(parts) > 1:
        text += ", " + ", ".join(parts[1:])
    text += "."
    if figures.goodput_sessions_per_s is not None and figures.slo_ms is not None:
        text += (
            f" Goodput {figures.goodput_sessions_per_s:.2f} sessions/s within "
            f"{figures.slo_ms / 1000:.1f} s."
        )
    return text


# --- next token (also quoted by determinism with `top_logprobs`) ----------------------------

#: Two branches are said to be nearly tied when the less likely has at least this share of
#: the likelier one's probability.
NEARLY_TIED = 0.75


def _p(p: float) -> str:
    """A probability as said: two decimals, or `<0.01`."""
    return f"{p:.2f}" if p >= 0.005 else "<0.01"


def _quoted(token: str) -> str:
    """A token as text in a sentence, its spaces visible: `' the'`."""
    return "'" + token.replace("\n", "\\n") + "'"


def _choice(c: TokenChoice) -> str:
    return f"{_quoted(c.token)} (p {_p(c.p)})"


def _params_words(params: dict[str, Any]) -> str:
    words = [f"temperature {params['temperature']}"] if "temperature" in params else []
    if params.get("seed") is not None:
        words.append(f"seed {params['seed']}")
    return ", ".join(words)


def divergence_sentence(f: NextTokenFigures) -> str:
    """Where repeats diverged (the earliest split) and between which candidates, then what
    temperature 0 did: the sentence lab question 3 quotes from the candidates."""
    split = [v for v in f.variants if v.divergence is not None]
    if split:
        v = min(split, key=lambda v: v.divergence.step if v.divergence else 0)
        d = v.divergence
        assert d is not None
        branches = d.taken[:2]
        if len(branches) == 2:
            a, b = branches
            tied = min(a.p, b.p) >= NEARLY_TIED * max(a.p, b.p)
            how = (
                f"{_choice(a)} and {_choice(b)} were nearly tied"
                if tied
                else f"one took {_choice(a)} and another {_choice(b)}"
            )
            top = d.candidates[0] if d.candidates else None
            if top is not None and top.token not in (a.token, b.token):
                how += f", both below the top candidate {_choice(top)}"
        else:
            how = f"one took {_choice(branches[0])}"
        text = (
            f"the replies diverged at token {d.step + 1} ({_params_words(v.params) or v.variant}), "
            f"where {how}"
        )
    else:
        text = "no repeats diverged: each variant's replies took the same token at every step"
    greedy = [v for v in f.variants if v.greedy is not None]
    if greedy and all(v.greedy for v in greedy):
        text += "; at temperature 0 the top candidate is always taken"
    elif greedy:
        miss = next(m for v in greedy for m in v.greedy_misses)
        text += (
            f"; at temperature 0 token {miss.step + 1} was {_choice(miss.taken)}, not the top "
            f"candidate {_choice(miss.top)} (top-two margin {_p(miss.margin)})"
        )
    return text[0].upper() + text[1:] + "."


def next_token_answer(f: NextTokenFigures, provider_id: str) -> str:
    """The divergence sentence, and how sure the model was at a typical step; or, for a
    provider without logprobs, that it was not inspected and why."""
    if not f.inspected:
        return (
            f"{provider_id} was not inspected: {f.not_inspected_because}, so its candidates "
            "are unknown."
        )
    steps = [s for v in f.variants for reply in v.replies for s in reply]
    text = divergence_sentence(f)
    if steps:
        surest = sum(1 for s in steps if s.candidates and s.candidates[0].p >= 0.9)
        text += (
            f" The top candidate had p >= 0.9 at {surest} of {len(steps)} steps; the others "
            f"are where a sampled reply can turn (top {f.top_k} candidates per step)."
        )
    return text
