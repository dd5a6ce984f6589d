"""Request statistics per provider × experiment × model × client path, computed once.

Rules (docs/measurement.md): warm-up requests are stored but never in statistics; failed
requests are left out of the latency statistics and counted by error kind. Each metric's p50,
p90 and p99 carry their distribution-free interval (`labkit.analysis.stats`). A group the
self-check flags (`labkit.analysis.selfcheck`: stamps late by labkit's own doing) carries the
reason, and every renderer marks its numbers. The runner stores the result in lab.json
(`LabResults.requests`); the run summary, the report and summary.csv render it, and the report
computes it here, from records.jsonl, for a run whose lab.json predates it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

import numpy as np

from labkit.analysis.columns import Columns
from labkit.analysis.selfcheck import Cause, client_bound_note, level_lag_of
from labkit.analysis.split import NEGATIVE_DECODE_GAP, decode_gaps, prefills, ttft_split_of
from labkit.analysis.stats import median, quantiles
from labkit.figures import Percentiles, RequestStats
from labkit.records import RequestRecord

__all__ = [
    "FIELDS",
    "GROUP_KEYS",
    "cached_tokens",
    "client_bound_reason",
    "client_bound_reason_of",
    "group_key",
    "request_stats",
    "request_stats_of",
    "stats_of",
]


def cached_tokens(record: RequestRecord) -> int | None:
    """Prompt tokens the provider served from its cache, as it counts them."""
    if record.usage.cached_input_tokens is not None:
        return record.usage.cached_input_tokens
    return record.provider_timings.cached_tokens


#: The group of a record: provider, experiment, model, client path.
GROUP_KEYS: tuple[str, ...] = ("provider", "experiment", "model", "client_path")

#: Every field `request_stats_of` reads (a run read for it needs only these).
FIELDS: tuple[str, ...] = (
    "provider",
    "experiment",
    "model",
    "app.client_path",
    "warmup",
    "ok",
    "error.kind",
    "stop_reason",
    "tags.level",
    "tags.server_slots",
    "tags.in_flight_max",
    "client.ttft_ms",
    "client.decode_ms_per_token",
    "client.e2e_ms",
    "client.output_tokens_per_s",
    "client.headers_ms",
    "client.first_event_ms",
    "client.itl_ms_p50",
    "client.loop_lag_ms",
    "client.n_events",
    "client.stamp_lateness_ms_p50",
    "client.stamp_lateness_ms_p99",
    "client.stamp_lateness_ms_max",
    "client.stamp_lateness_ms",
    "client.ttft_lateness_ms",
    "usage.input_tokens",
    "usage.output_tokens",
    "provider_timings.decode_ms_per_token",
    "provider_timings.queue_ms",
    "provider_timings.prefill_ms",
    "provider_timings.server_ttft_ms",
    "provider_timings.keepalive_comments",
    "provider_timings.keepalive_gateway",
    "app.cpu_ms",
    "client.send_ms",
)


def group_key(r: RequestRecord) -> tuple[str, str, str, str]:
    """(provider, experiment, model, client path) of one record."""
    return r.provider, r.experiment, r.model or "", r.app.client_path or "wire"


def _present(values: np.ndarray) -> np.ndarray:
    kept: np.ndarray = values[~np.isnan(values)]
    return kept


def _percentiles(cols: Columns, name: str) -> Percentiles:
    p50, p90, p99 = quantiles(_present(cols.num(name)), (0.5, 0.9, 0.99))
    return Percentiles(p50=p50, p90=p90, p99=p99)


def client_bound_reason(records: Iterable[RequestRecord]) -> str | None:
    """`client_bound_reason_of` the records."""
    return client_bound_reason_of(Columns.of_records(list(records)))


def client_bound_reason_of(cols: Columns) -> str | None:
    """The self-check's reason where it flags these records (warm-ups left out), judged per
    load level where they carry one, as the load table judges them; None: not flagged."""
    return _client_bound_of(cols)[0]


def _client_bound_of(cols: Columns) -> tuple[str | None, list[Cause]]:
    """`client_bound_reason_of`, and the causes of the flagged levels (distinct, in order)."""
    measured = cols.take(~cols.flag("warmup"))
    levels = _or(measured.text("tags.level"), "")
    notes: list[str] = []
    causes: list[Cause] = []
    for level in dict.fromkeys(levels.tolist()):  # in the order the levels first appear
        lag = level_lag_of(measured.take(levels == level))
        if lag.client_bound:
            note = client_bound_note(level, lag)  # `c8: client-bound: ...`
            notes.append(note if level else note.removeprefix(": "))
            if lag.cause is not None and lag.cause not in causes:
                causes.append(lag.cause)
    return "; ".join(notes) or None, causes


def _counts(values: np.ndarray) -> dict[str, int]:
    """How often each text occurs (None and "" left out), in the order they first come."""
    import pyarrow as pa  # counted in C: a group may hold millions of records
    import pyarrow.compute as pc

    nothing: Any = None
    present = values[np.not_equal(values, nothing)]  # texts (`Columns.text`) or None
    counted = pc.value_counts(pa.array(present, pa.string()))
    texts = counted.field("values").to_pylist()
    counts = counted.field("counts").to_pylist()
    return {str(v): int(n) for v, n in zip(texts, counts, strict=True) if v}


def stats_of(records: list[RequestRecord]) -> RequestStats:
    """The statistics of one group's records (all of one `group_key`)."""
    return _stats_of(Columns.of_records(records))


def _stats_of(cols: Columns) -> RequestStats:
    """`stats_of` one group's records, as columns."""
    warmup = cols.flag("warmup")
    measured = cols.take(~warmup)
    is_ok = measured.flag("ok")
    ok, failed = measured.take(is_ok), measured.take(~is_ok)
    bound, causes = _client_bound_of(measured)
    gap = median(_present(decode_gaps(ok)))
    levels = {str(v) for v in cols.text("tags.level") if v is not None}
    return RequestStats(
        provider=str(cols.first_text("provider")),
        experiment=str(cols.first_text("experiment")),
        model=cols.first_text("model") or None,
        client_path=cols.first_text("app.client_path") or "wire",
        levels=sorted(levels),
        records=len(cols),
        warmup_excluded=int(warmup.sum()),
        errors=len(failed),
        error_kinds=dict(Counter(str(k) for k in failed.text("error.kind"))),
        n=len(ok),
        ttft_ms=_percentiles(ok, "client.ttft_ms"),
        decode_ms_per_token=_percentiles(ok, "client.decode_ms_per_token"),
        e2e_ms=_percentiles(ok, "client.e2e_ms"),
        output_tokens_per_s=_percentiles(ok, "client.output_tokens_per_s"),
        input_tokens_p50=median(_present(ok.num("usage.input_tokens"))).value,
        output_tokens_p50=median(_present(ok.num("usage.output_tokens"))).value,
        stop_reasons=_counts(ok.text("stop_reason")),
        provider_prefill_ms=median(_present(prefills(ok)[0])),
        provider_decode_ms_per_token=median(
            _present(ok.num("provider_timings.decode_ms_per_token"))
        ),
        decode_gap_ms_per_token=gap,
        decode_gap_client_bound=(
            NEGATIVE_DECODE_GAP if gap.value is not None and gap.value < 0 else None
        ),
        ttft_split=ttft_split_of(ok, bound),
        client_bound=bound,
        client_bound_causes=causes,
    )


def request_stats(records: Iterable[RequestRecord]) -> list[RequestStats]:
    """One `RequestStats` per provider × experiment × model × client path, in that order."""
    return request_stats_of(Columns.of_records(list(records)))


def _or(values: np.ndarray, default: str) -> np.ndarray:
    """Texts with `default` where missing."""
    nothing: Any = None
    missing = np.equal(values, nothing)  # item by item: for texts, `is None`
    filled: np.ndarray = np.where(missing, default, values).astype(object)
    return filled


def _ranks(values: np.ndarray) -> tuple[np.ndarray, int]:
    """Each value's rank among the distinct values (sorted as strings), and their number."""
    items = [str(v) for v in values] if values.dtype != object else values.tolist()
    rank = {v: i for i, v in enumerate(sorted(set(items)))}
    return np.fromiter(map(rank.__getitem__, items), dtype=np.int64, count=len(items)), len(rank)


def request_stats_of(cols: Columns) -> list[RequestStats]:
    """`request_stats` of records given as columns (a run read into columns)."""
    if not len(cols):
        return []
    keys = [
        cols.text("provider"),
        cols.text("experiment"),
        _or(cols.text("model"), ""),
        _or(cols.text("app.client_path"), "wire"),
    ]
    # Each key as its rank among the key's values, so one integer per group sorts as the
    # tuple (provider, experiment, model, path) does.
    code = np.zeros(len(cols), dtype=np.int64)
    for values in keys:
        ranks, distinct = _ranks(values)
        code = code * distinct + ranks
    order = np.argsort(code, kind="stable")
    bounds = np.flatnonzero(np.diff(code[order])) + 1
    return [_stats_of(cols.take(rows)) for rows in np.split(order, bounds)]
