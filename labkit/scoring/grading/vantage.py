"""Grading `vantage`: each vantage's shares and each paired shift against the truth.

The truth server knows each request's queue and prefill (the provider's share) and when it
sent the first event (the rest up to there, less labkit's send, is the network's share, the
up-route's delay included); the down-route's hold it cannot see is the relay's own account
of the chunk that brought the first event (`vantage_down_ms`: the relay stamps each chunk's
read and write on the clock labkit and the server share), else the configured half of the
round trip (`vantage_delay_ms` / 2; its jitter has mean 0).
"""

from __future__ import annotations

from labkit.analysis.vantage import route_added_of
from labkit.figures.vantage import VantageFigures
from labkit.records import LabAnswer, RequestRecord
from labkit.scoring.grading.base import (
    TOLERANCE,
    Check,
    Truth,
    fact,
    figure,
    register_grader,
    true_outside_ms,
)
from labkit.truth.log import TruthRequest

__all__ = ["grade_vantage"]


def _down(r: RequestRecord) -> float:
    """The down-route's hold of the first event: the relay's account, else half the
    configured round trip."""
    held = r.tags.get("vantage_down_ms")
    if isinstance(held, int | float):
        return float(held)
    value = r.tags.get("vantage_delay_ms", 0.0)
    return float(value) / 2 if isinstance(value, int | float) else 0.0


def _provider(t: TruthRequest) -> float | None:
    return None if t.prefill_ms is None else t.queue_ms + t.prefill_ms


def _network(r: RequestRecord, t: TruthRequest) -> float | None:
    """The true network and front end: up to the server's first send (`true_outside_ms`:
    the up-route's delay and the front end the server did not report), plus the
    down-route's delay."""
    outside = true_outside_ms(r, t)
    return None if outside is None else outside + _down(r)


def _mean(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


@register_grader("vantage")
def grade_vantage(answer: LabAnswer, records: list[RequestRecord], truth: Truth) -> list[Check]:
    """Per vantage its provider and network shares; per shift the paired differences and
    the proof's two claims: the provider's share unchanged (a fact: its true paired
    difference within the loopback's tolerance of 0) and the network's shift holding the
    added delay (a figure whose truth is what the routes added by the relay's account,
    else their configured difference)."""
    f = answer.figures
    if not isinstance(f, VantageFigures):
        return []
    who = f"vantage · {answer.provider}"
    by: dict[str, list[tuple[RequestRecord, TruthRequest]]] = {}
    for r, t in truth.pairs(records):
        by.setdefault(str(r.tags.get("vantage")), []).append((r, t))
    checks: list[Check] = []
    for v in f.vantages:
        pairs = by.get(v.name, [])
        provider = _mean([_provider(t) for _, t in pairs])
        network = _mean([_network(r, t) for r, t in pairs])
        checks.append(
            figure(who, f"{v.name}: provider share (mean)", v.provider_ms, provider, "ms")
        )
        # a relay vantage's own hand-over (a second loopback hop and a thread's wake-up)
        # is network the server cannot see: twice the loopback's tolerance
        name = f"{v.name}: network share (mean)"
        checks.append(figure(who, name, v.network_ms, network, "ms", 2 * TOLERANCE["ms"]))
    for s in f.shifts:
        ref = {r.trial: (r, t) for r, t in by.get(s.reference, [])}
        paired = [(ref[r.trial], (r, t)) for r, t in by.get(s.name, []) if r.trial in ref]
        provider_diff = _mean(
            [
                (pb - pa)
                if (pa := _provider(a[1])) is not None and (pb := _provider(b[1])) is not None
                else None
                for a, b in paired
            ]
        )
        network_diff = _mean(
            [
                (nb - na)
                if (na := _network(*a)) is not None and (nb := _network(*b)) is not None
                else None
                for a, b in paired
            ]
        )
        name = f"{s.name} − {s.reference}"
        checks.append(
            figure(who, f"{name}: provider share (paired)", s.provider_ms, provider_diff, "ms")
        )
        checks.append(
            figure(who, f"{name}: network share (paired)", s.network_ms, network_diff, "ms")
        )
        tol = TOLERANCE["ms"]
        if s.provider_unchanged is not None and provider_diff is not None:
            true = abs(provider_diff) <= tol
            checks.append(
                fact(who, f"{name}: provider share unchanged", s.provider_unchanged, true)
            )
        # the proof's claim: the network's shift holds the delay the routes added, by the
        # relay's own account where it has one (a starved host's relay holds longer than
        # configured), else as configured
        routes = [
            (rb - ra)
            if (ra := route_added_of(a[0])) is not None and (rb := route_added_of(b[0])) is not None
            else None
            for a, b in paired
        ]
        added_true = _mean(routes) if any(v is not None for v in routes) else s.configured_ms
        added = f"{name}: network share shift against what the routes added"
        # the relay's account is stamped in a thread of labkit's process: each read stamp
        # trails its bytes by that thread's wake-up and its wait for the GIL, unseen by the
        # truth server as a relay vantage's hand-over is: twice the loopback's tolerance
        checks.append(figure(who, added, s.network_ms, added_true, "ms", 2 * TOLERANCE["ms"]))
    return checks
