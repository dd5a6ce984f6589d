"""Records of a prompt-cache probe → its figures (`labkit.figures.prompt_cache`).

Each probe is a priming request (a fresh nonce opens its prefix, so nothing before it can
have cached it) and one or more repeats of the same prompt, tagged ``phase``, ``setting``,
``probe`` and ``role`` (``prime``, ``repeat``, ``filler``). A repeat is a hit when the
provider reports at least `hit_share` of its prompt as cached (its cached-token usage:
OpenAI ``prompt_tokens_details.cached_tokens``, Anthropic ``cache_read_input_tokens``,
llama.cpp ``timings.cache_n``), so a chat template's shared opening alone is not a hit.
"""

from __future__ import annotations

from collections.abc import Sequence
from statistics import median as plain_median

from labkit.analysis.stats import mean, median, proportion
from labkit.figures.prompt_cache import (
    CacheLifetime,
    CacheMoney,
    CachePhase,
    CacheProbeRow,
    PromptCacheFigures,
)
from labkit.records import RequestRecord

__all__ = [
    "cached_tokens_of",
    "hit_pairs",
    "is_hit",
    "lifetime_bracket",
    "probe_rows",
    "prompt_cache_figures",
    "start_gap_s",
]


def cached_tokens_of(record: RequestRecord) -> int | None:
    """The prompt tokens the provider says it read from its cache (None: not reported)."""
    if record.usage.cached_input_tokens is not None:
        return record.usage.cached_input_tokens
    return record.provider_timings.cached_tokens


def is_hit(record: RequestRecord, hit_share: float) -> bool | None:
    """Whether at least `hit_share` of the record's prompt was cached (None: no count)."""
    cached = cached_tokens_of(record)
    if cached is None:
        return None
    prompt = record.usage.input_tokens
    if not prompt:
        return cached > 0
    return cached >= hit_share * prompt


def start_gap_s(prime: RequestRecord, repeat: RequestRecord) -> float:
    """Seconds from the prime's start to the repeat's: on the monotonic clock where both
    carry it (one host), else on the wall clock."""
    if prime.t_start_mono_ns is not None and repeat.t_start_mono_ns is not None:
        return (repeat.t_start_mono_ns - prime.t_start_mono_ns) / 1e9
    return (repeat.started_at - prime.started_at).total_seconds()


def _ok(record: RequestRecord) -> bool:
    return record.error is None and not record.warmup


def _probes(records: Sequence[RequestRecord]) -> dict[str, dict[str, list[RequestRecord]]]:
    """Each probe's records by role, probes in the order their primes appear."""
    out: dict[str, dict[str, list[RequestRecord]]] = {}
    for r in records:
        probe = r.tags.get("probe")
        if probe is None:
            continue
        out.setdefault(str(probe), {}).setdefault(str(r.tags.get("role", "")), []).append(r)
    return out


def _row(
    phase: CachePhase,
    setting: float,
    label: str,
    records: Sequence[RequestRecord],
    hit_share: float,
) -> CacheProbeRow:
    probes = _probes(records)
    primes = [p for roles in probes.values() for p in roles.get("prime", []) if _ok(p)]
    judged: list[tuple[RequestRecord, bool]] = []
    unreported = 0
    gaps: list[float] = []
    gap_hits: list[bool] = []
    for roles in probes.values():
        prime = next((p for p in roles.get("prime", []) if _ok(p)), None)
        for rep in roles.get("repeat", []):
            if not _ok(rep) or prime is None:
                continue
            hit = is_hit(rep, hit_share)
            if hit is None:
                unreported += 1
                continue
            judged.append((rep, hit))
            if phase == "gap":
                gaps.append(round(start_gap_s(prime, rep), 6))
                gap_hits.append(hit)
    hits = sum(1 for _, h in judged if h)
    inputs = [float(p.usage.input_tokens) for p in primes if p.usage.input_tokens is not None]
    cached = [float(c) for r, _ in judged if (c := cached_tokens_of(r)) is not None]
    return CacheProbeRow(
        phase=phase,
        setting=setting,
        label=label,
        probes=len(primes),
        repeats=len(judged),
        hits=hits,
        hit_rate=proportion(hits, len(judged)),
        unreported=unreported,
        input_tokens_p50=plain_median(inputs) if inputs else None,
        cached_tokens_p50=plain_median(cached) if cached else None,
        gaps_s=gaps,
        gap_hits=gap_hits,
    )


def probe_rows(
    settings: Sequence[tuple[CachePhase, float, str]],
    records: Sequence[RequestRecord],
    hit_share: float,
) -> list[CacheProbeRow]:
    """One row per (phase, setting, label), from the records tagged with that phase and
    setting, in the order given."""
    rows = []
    for phase, setting, label in settings:
        mine = [
            r
            for r in records
            if r.tags.get("phase") == phase and float(r.tags.get("setting", -1)) == setting
        ]
        rows.append(_row(phase, setting, label, mine, hit_share))
    return rows


def lifetime_bracket(rows: Sequence[CacheProbeRow]) -> CacheLifetime | None:
    """The lifetime between the longest gap that hit and the shortest that missed (see
    `CacheLifetime`); None without a judged gap probe."""
    pairs = [
        (g, h)
        for row in rows
        if row.phase == "gap"
        for g, h in zip(row.gaps_s, row.gap_hits, strict=True)
    ]
    if not pairs:
        return None
    hit_gaps = [g for g, h in pairs if h]
    miss_gaps = [g for g, h in pairs if not h]
    longest_hit = max(hit_gaps) if hit_gaps else None
    shortest_miss = min(miss_gaps) if miss_gaps else None
    consistent = longest_hit is None or shortest_miss is None or longest_hit < shortest_miss
    lo, hi = longest_hit, shortest_miss
    if not consistent and lo is not None and hi is not None:
        lo, hi = hi, lo
    value = (lo + hi) / 2 if lo is not None and hi is not None else (lo if lo is not None else hi)
    return CacheLifetime(lo_s=lo, hi_s=hi, value_s=value, consistent=consistent, trials=len(pairs))


def hit_pairs(
    records: Sequence[RequestRecord], hit_share: float
) -> list[tuple[RequestRecord, RequestRecord]]:
    """(cold prime, hit repeat) of every probe whose prime found its prompt uncached and
    whose first repeat hit; concurrency probes left out (their repeats share a server)."""
    out = []
    for roles in _probes(records).values():
        prime = next((p for p in roles.get("prime", []) if _ok(p)), None)
        repeats = [r for r in roles.get("repeat", []) if _ok(r)]
        if prime is None or not repeats or prime.tags.get("phase") == "concurrency":
            continue
        if is_hit(prime, hit_share) is not False or is_hit(repeats[0], hit_share) is not True:
            continue
        out.append((prime, repeats[0]))
    return out


def prompt_cache_figures(
    settings: Sequence[tuple[CachePhase, float, str]],
    records: Sequence[RequestRecord],
    *,
    hit_share: float,
    min_tokens: int | None,
    prices: tuple[float, float] | None = None,
    server_slots: int | None = None,
    context_tokens: int | None = None,
) -> PromptCacheFigures:
    """The probe's figures: its rows, the lifetime bracket, TTFT cold and hit and the
    paired saving, and the money saved at `prices` (input, cached input; USD per million
    tokens) where given."""
    measured = [r for r in records if _ok(r)]
    rows = probe_rows(settings, measured, hit_share)
    pairs = hit_pairs(measured, hit_share)
    cold = [
        r.client.ttft_ms
        for r in measured
        if r.tags.get("role") == "prime" and is_hit(r, hit_share) is False
    ]
    hot = [
        r.client.ttft_ms
        for r in measured
        if r.tags.get("role") == "repeat"
        and r.tags.get("phase") != "concurrency"
        and is_hit(r, hit_share) is True
    ]
    saved = [
        p.client.ttft_ms - h.client.ttft_ms
        for p, h in pairs
        if p.client.ttft_ms is not None and h.client.ttft_ms is not None
    ]
    money = None
    if prices is not None:
        full, read = prices
        hits = [
            r for r in measured if r.tags.get("role") == "repeat" and is_hit(r, hit_share) is True
        ]
        per_hit = [(cached_tokens_of(r) or 0) * (full - read) / 1e6 for r in hits]
        uncached = sum((r.usage.input_tokens or 0) * full / 1e6 for r in hits)
        money = CacheMoney(
            input_per_mtok=full,
            cached_input_per_mtok=read,
            saved_per_hit_usd=mean(per_hit),
            saved_share=sum(per_hit) / uncached if uncached > 0 else None,
        )
    return PromptCacheFigures(
        min_tokens=min_tokens,
        hit_share=hit_share,
        cached_reported=any(cached_tokens_of(r) is not None for r in measured),
        rows=rows,
        lifetime=lifetime_bracket(rows),
        ttft_cold=median([t for t in cold if t is not None]) if cold else None,
        ttft_hit=median([t for t in hot if t is not None]) if hot else None,
        ttft_saved=mean(saved) if saved else None,
        money=money,
        server_slots=server_slots,
        context_tokens=context_tokens,
    )
