"""`vantage` analysis: the same planned requests from several vantage points, paired by
trial, each request's TTFT split into the provider's share (queue + prefill, from the
provider's own account) and the network's and front end's (the rest, less labkit's own),
and each vantage's paired shift against the first.

Records carry `tags.vantage` (its name), `tags.vantage_route`, `tags.vantage_delay_ms` and
`tags.vantage_jitter_ms`, as `labkit.experiments.vantage` plans them.
"""

from __future__ import annotations

from collections.abc import Callable

from labkit.analysis.selection import measured
from labkit.analysis.split import network_front_end_of, prefill_of, queue_of
from labkit.analysis.stats import mean
from labkit.figures.stats import Mean
from labkit.figures.vantage import VantageFigures, VantageRow, VantageShift
from labkit.records import RequestRecord

__all__ = ["provider_share_of", "route_added_of", "vantage_figures"]


def provider_share_of(r: RequestRecord) -> float | None:
    """The provider's share of one request's TTFT: its queue plus its prefill (None: either
    not derivable)."""
    q, p = queue_of(r), prefill_of(r)
    return None if q is None or p is None else q[0] + p[0]


def route_added_of(r: RequestRecord) -> float | None:
    """What the route truly added to one request's TTFT, by the relay's own account (0 on a
    direct route; None: a relay that left no account)."""
    if r.tags.get("vantage_route") == "direct":
        return 0.0
    up, down = r.tags.get("vantage_up_ms"), r.tags.get("vantage_down_ms")
    if isinstance(up, int | float) and isinstance(down, int | float):
        return float(up) + float(down)
    return None


def _ttft(r: RequestRecord) -> float | None:
    return r.client.ttft_ms


def _mean_of(records: list[RequestRecord], get: Callable[[RequestRecord], float | None]) -> Mean:
    return mean([v for v in map(get, records) if v is not None])


def _diff(
    pairs: list[tuple[RequestRecord, RequestRecord]],
    get: Callable[[RequestRecord], float | None],
) -> Mean | None:
    """The mean over pairs of get(other) − get(reference), with its t-interval."""
    values = [
        b - a for a, b in ((get(x), get(y)) for x, y in pairs) if a is not None and b is not None
    ]
    return mean(values) if values else None


def _known(m: Mean) -> Mean | None:
    return m if m.n else None


def _holds(m: Mean | None, value: float) -> bool | None:
    if m is None or m.lo is None or m.hi is None:
        return None
    return m.lo <= value <= m.hi


def _tag_float(r: RequestRecord, key: str) -> float:
    value = r.tags.get(key, 0.0)
    return float(value) if isinstance(value, int | float) else 0.0


def vantage_figures(records: list[RequestRecord], order: list[str]) -> VantageFigures:
    """Each vantage's shares and its paired shift against the first of `order`."""
    ok = [r for r in measured(records) if "vantage" in r.tags]
    by: dict[str, list[RequestRecord]] = {name: [] for name in order}
    for r in ok:
        by.setdefault(str(r.tags["vantage"]), []).append(r)
    rows = []
    for name, rs in by.items():
        first = rs[0] if rs else None
        rows.append(
            VantageRow(
                name=name,
                route=str(first.tags.get("vantage_route", "relay")) if first else "relay",
                delay_ms=_tag_float(first, "vantage_delay_ms") if first else 0.0,
                jitter_ms=_tag_float(first, "vantage_jitter_ms") if first else 0.0,
                n=len(rs),
                ttft_ms=_mean_of(rs, _ttft),
                provider_ms=_mean_of(rs, provider_share_of),
                network_ms=_mean_of(rs, network_front_end_of),
                route_ms=_known(_mean_of(rs, route_added_of)),
            )
        )
    not_derived = []
    if ok and all(provider_share_of(r) is None for r in ok):
        not_derived.append(
            "the provider reports no prefill, or its queue cannot be known, so its share "
            "of TTFT cannot be told from the network's"
        )
    shifts = []
    if rows:
        ref = rows[0]
        ref_by_trial = {r.trial: r for r in by[ref.name]}
        for row in rows[1:]:
            pairs = [(ref_by_trial[r.trial], r) for r in by[row.name] if r.trial in ref_by_trial]
            configured = row.delay_ms - ref.delay_ms
            provider = _diff(pairs, provider_share_of)
            network = _diff(pairs, network_front_end_of)
            shifts.append(
                VantageShift(
                    name=row.name,
                    reference=ref.name,
                    pairs=len(pairs),
                    configured_ms=configured,
                    ttft_ms=_diff(pairs, _ttft),
                    provider_ms=provider,
                    network_ms=network,
                    route_ms=_diff(pairs, route_added_of),
                    provider_unchanged=_holds(provider, 0.0),
                    network_matches=_holds(network, configured),
                )
            )
    verdicts = [(s.provider_unchanged, s.network_matches) for s in shifts]
    proven = (
        all(p is True and n is True for p, n in verdicts)
        if verdicts and all(p is not None and n is not None for p, n in verdicts)
        else None
    )
    return VantageFigures(vantages=rows, shifts=shifts, proven=proven, not_derived=not_derived)
