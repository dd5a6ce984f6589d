"""Request statistics per provider × experiment × model × client path, computed once.

Rules (docs/measurement.md): warm-up requests are stored but never in statistics; failed
requests are left out of the latency statistics and counted by error kind. Each metric's
p50, p90 and p99 carry their distribution-free interval (`labkit.analysis.stats`). A group
the self-check flags (`labkit.selfcheck`: stamps late by labkit's own doing) carries the
reason, and every renderer marks its numbers.

The runner stores the result in lab.json (`LabResults.requests`); the run summary, the
report and summary.csv render it, and the report computes it here, from records.jsonl,
for a run whose lab.json predates it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable

from labkit.analysis.split import NEGATIVE_DECODE_GAP, decode_gap_of, ttft_split
from labkit.analysis.stats import median, quantiles
from labkit.figures import Percentiles, RequestStats
from labkit.records import RequestRecord
from labkit.selfcheck import client_bound_note, level_lag

__all__ = ["GROUP_KEYS", "client_bound_reason", "group_key", "request_stats", "stats_of"]

#: The group of a record: provider, experiment, model, client path.
GROUP_KEYS: tuple[str, ...] = ("provider", "experiment", "model", "client_path")

_Get = Callable[[RequestRecord], float | int | None]


def group_key(r: RequestRecord) -> tuple[str, str, str, str]:
    """(provider, experiment, model, client path) of one record."""
    return r.provider, r.experiment, r.model or "", r.app.client_path or "wire"


def _values(records: Iterable[RequestRecord], get: _Get) -> list[float]:
    return [float(v) for v in map(get, records) if v is not None]


def _percentiles(records: list[RequestRecord], get: _Get) -> Percentiles:
    p50, p90, p99 = quantiles(_values(records, get), (0.5, 0.9, 0.99))
    return Percentiles(p50=p50, p90=p90, p99=p99)


def client_bound_reason(records: Iterable[RequestRecord]) -> str | None:
    """The self-check's reason where it flags these records (warm-ups left out), judged per
    load level where they carry one, as the load table judges them; None: not flagged."""
    by_level: dict[str, list[RequestRecord]] = {}
    for r in records:
        if not r.warmup:
            by_level.setdefault(str(r.tags.get("level", "")), []).append(r)
    notes = []
    for level, recs in by_level.items():
        lag = level_lag(recs)
        if lag.client_bound:
            note = client_bound_note(level, lag)  # `c8: client-bound (...)`
            notes.append(note if level else note.removeprefix(": "))
    return "; ".join(notes) or None


def stats_of(records: list[RequestRecord]) -> RequestStats:
    """The statistics of one group's records (all of one `group_key`)."""
    provider, experiment, model, path = group_key(records[0])
    measured = [r for r in records if not r.warmup]
    ok = [r for r in measured if r.error is None]
    failed = [r for r in measured if r.error is not None]
    bound = client_bound_reason(measured)
    gap = median(_values(ok, decode_gap_of))
    tokens_in = _values(ok, lambda r: r.usage.input_tokens)
    tokens_out = _values(ok, lambda r: r.usage.output_tokens)
    return RequestStats(
        provider=provider,
        experiment=experiment,
        model=model or None,
        client_path=path,
        levels=sorted({str(r.tags["level"]) for r in records if "level" in r.tags}),
        records=len(records),
        warmup_excluded=len(records) - len(measured),
        errors=len(failed),
        error_kinds=dict(Counter(str(r.error.kind) for r in failed if r.error is not None)),
        n=len(ok),
        ttft_ms=_percentiles(ok, lambda r: r.client.ttft_ms),
        decode_ms_per_token=_percentiles(ok, lambda r: r.client.decode_ms_per_token),
        e2e_ms=_percentiles(ok, lambda r: r.client.e2e_ms),
        output_tokens_per_s=_percentiles(ok, lambda r: r.client.output_tokens_per_s),
        input_tokens_p50=median(tokens_in).value,
        output_tokens_p50=median(tokens_out).value,
        stop_reasons=dict(Counter(str(r.stop_reason) for r in ok if r.stop_reason)),
        provider_decode_ms_per_token=median(
            _values(ok, lambda r: r.provider_timings.decode_ms_per_token)
        ),
        decode_gap_ms_per_token=gap,
        decode_gap_client_bound=(
            NEGATIVE_DECODE_GAP if gap.value is not None and gap.value < 0 else None
        ),
        ttft_split=ttft_split(ok, bound),
        client_bound=bound,
    )


def request_stats(records: Iterable[RequestRecord]) -> list[RequestStats]:
    """One `RequestStats` per provider × experiment × model × client path, in that order."""
    groups: dict[tuple[str, str, str, str], list[RequestRecord]] = {}
    for r in records:
        groups.setdefault(group_key(r), []).append(r)
    return [stats_of(groups[key]) for key in sorted(groups)]
