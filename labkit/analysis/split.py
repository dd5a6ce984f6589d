"""Whose time is it? TTFT split into the provider's queue, its prefill, and the rest.

The one definition (docs/measurement.md, "Attribution"), per request:

    network + front end = client.ttft_ms − provider queue − provider prefill

- the queue: `provider_timings.queue_ms` where the provider reports it; else 0 by
  construction where labkit alone used a managed server and never had more requests in
  flight than its slots (tags `server_slots`, `in_flight_max`); else the wait from the
  headers to the first event of a stream kept alive with comments; else not derivable;
- the prefill: `provider_timings.prefill_ms`, else `provider_timings.server_ttft_ms`.

`ttft_split` is the aggregate (medians with their intervals) that the attribution answer,
its chart, the report's split table and the run summary all render.
"""

from __future__ import annotations

from collections.abc import Iterable

from labkit.analysis.stats import median
from labkit.figures import TTFTSplit
from labkit.records import RequestRecord

__all__ = [
    "NEGATIVE_DECODE_GAP",
    "QUEUE_SOURCES",
    "decode_gap_of",
    "keepalive_wait_of",
    "network_front_end_of",
    "prefill_of",
    "queue_of",
    "ttft_beyond_prefill_of",
    "ttft_split",
]

#: Where each kind of queue value came from, as the answer's table and the report name it.
QUEUE_SOURCES: dict[str, str] = {
    "reported": "provider_timings.queue_ms",
    "idle": "0 by construction: labkit alone used this managed server, with no more "
    "requests in flight than its slots (tags server_slots, in_flight_max)",
    "keepalive": "client.first_event_ms - client.headers_ms while keep-alive comments came",
}

NO_QUEUE = (
    "the provider reports no queue time and labkit cannot rule queueing out "
    "(not a managed server used by labkit alone within its slots)"
)
NO_PREFILL = "the provider reports no prefill time"


def keepalive_wait_of(r: RequestRecord) -> float | None:
    """Headers to first event, for a request the server kept alive with comments."""
    c = r.client
    if not r.provider_timings.keepalive_comments or c.first_event_ms is None:
        return None
    return None if c.headers_ms is None else c.first_event_ms - c.headers_ms


def queue_of(r: RequestRecord) -> tuple[float, str] | None:
    """The provider queue of one request and how it was known (a `QUEUE_SOURCES` key);
    None: not derivable."""
    reported = r.provider_timings.queue_ms
    if reported is not None:
        return reported, "reported"
    slots, in_flight = r.tags.get("server_slots"), r.tags.get("in_flight_max")
    if isinstance(slots, int) and isinstance(in_flight, int) and in_flight <= slots:
        return 0.0, "idle"
    wait = keepalive_wait_of(r)
    return (wait, "keepalive") if wait is not None else None


def prefill_of(r: RequestRecord) -> tuple[float, str] | None:
    """The provider's prefill of one request, and the field it came from."""
    pt = r.provider_timings
    if pt.prefill_ms is not None:
        return pt.prefill_ms, "provider_timings.prefill_ms"
    if pt.server_ttft_ms is not None:
        return pt.server_ttft_ms, "provider_timings.server_ttft_ms"
    return None


def network_front_end_of(r: RequestRecord) -> float | None:
    """TTFT − queue − prefill of one request (None: a term is missing)."""
    ttft, queue, prefill = r.client.ttft_ms, queue_of(r), prefill_of(r)
    if ttft is None or queue is None or prefill is None:
        return None
    return ttft - queue[0] - prefill[0]


def ttft_beyond_prefill_of(r: RequestRecord) -> float | None:
    """TTFT − prefill of one request: queue, network and front end together, for a
    provider that reports no queue (None: no TTFT or no prefill)."""
    ttft, prefill = r.client.ttft_ms, prefill_of(r)
    return None if ttft is None or prefill is None else ttft - prefill[0]


def decode_gap_of(r: RequestRecord) -> float | None:
    """Client minus provider decode ms per output token of one request (None: either
    missing). Below 0 the client's stamps came closer together than the server produced
    the tokens: they were late and bunched (see `NEGATIVE_DECODE_GAP`)."""
    client, server = r.client.decode_ms_per_token, r.provider_timings.decode_ms_per_token
    return None if client is None or server is None else client - server


NEGATIVE_DECODE_GAP = (
    "the client saw tokens come faster than the server says it made them (client − server "
    "decode per token < 0): labkit's stamps were late and bunched, or the two count decode "
    "differently; either way the difference is not the network's"
)


def _joined(values: set[str]) -> str | None:
    """The only value, or a joined list when requests differed."""
    return " / ".join(sorted(values)) if values else None


def ttft_split(records: Iterable[RequestRecord], client_bound: str | None = None) -> TTFTSplit:
    """TTFT split into provider queue, provider prefill, and network + front end: medians
    over the requests that had each term, their sources, and the terms not derivable.

    `records` are the measured ones (no warm-up, no failure); `client_bound` is the
    self-check's reason where it flagged them (carried on the figure, shown marked).
    """
    recs = list(records)
    queues: list[float] = []
    prefills: list[float] = []
    queue_how: set[str] = set()
    prefill_how: set[str] = set()
    for r in recs:
        queue, prefill = queue_of(r), prefill_of(r)
        if queue is not None:
            queues.append(queue[0])
            queue_how.add(queue[1])
        if prefill is not None:
            prefills.append(prefill[0])
            prefill_how.add(prefill[1])
    rest = [v for v in map(network_front_end_of, recs) if v is not None]
    missing = ([] if queues else [NO_QUEUE]) + ([] if prefills else [NO_PREFILL])
    ttfts = [r.client.ttft_ms for r in recs if r.client.ttft_ms is not None]
    return TTFTSplit(
        ttft_ms=median(ttfts),
        provider_queue_ms=median(queues) if queues else None,
        queue_source=_joined(queue_how),
        provider_prefill_ms=median(prefills) if prefills else None,
        prefill_source=_joined(prefill_how),
        network_front_end_ms=median(rest) if rest else None,
        not_derived=missing,
        client_bound=client_bound,
    )
