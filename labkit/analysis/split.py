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

import math
from collections.abc import Iterable

import numpy as np

from labkit.analysis.columns import Columns
from labkit.analysis.stats import median
from labkit.figures import TTFTSplit
from labkit.records import RequestRecord

__all__ = [
    "NEGATIVE_DECODE_GAP",
    "QUEUE_SOURCES",
    "decode_gap_of",
    "decode_gaps",
    "keepalive_wait_of",
    "keepalive_waits",
    "network_front_end_of",
    "network_front_ends",
    "prefill_of",
    "prefills",
    "queue_of",
    "queues",
    "ttft_beyond_prefill_of",
    "ttft_split",
    "ttft_split_of",
    "ttfts_beyond_prefill",
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


def keepalive_waits(cols: Columns) -> np.ndarray:
    """Headers to first event, for requests the server kept alive with comments (NaN:
    none)."""
    kept_alive = cols.num("provider_timings.keepalive_comments") > 0
    wait = cols.num("client.first_event_ms") - cols.num("client.headers_ms")
    return np.where(kept_alive, wait, np.nan)


def queues(cols: Columns) -> tuple[np.ndarray, np.ndarray]:
    """Each request's provider queue (NaN: not derivable) and how it was known (a
    `QUEUE_SOURCES` key, None where not derivable)."""
    reported = cols.num("provider_timings.queue_ms")
    slots, in_flight = cols.num("tags.server_slots"), cols.num("tags.in_flight_max")
    whole = (np.floor(slots) == slots) & (np.floor(in_flight) == in_flight)
    idle = whole & (in_flight <= slots)
    wait = keepalive_waits(cols)
    has_reported = ~np.isnan(reported)
    value = np.where(has_reported, reported, np.where(idle, 0.0, wait))
    how = np.select(
        [has_reported, idle, ~np.isnan(wait)], ["reported", "idle", "keepalive"], ""
    ).astype(object)
    how[how == ""] = None
    return value, how


def prefills(cols: Columns) -> tuple[np.ndarray, np.ndarray]:
    """Each request's provider prefill (NaN: not reported) and the field it came from."""
    prefill = cols.num("provider_timings.prefill_ms")
    server_ttft = cols.num("provider_timings.server_ttft_ms")
    has_prefill, has_ttft = ~np.isnan(prefill), ~np.isnan(server_ttft)
    value = np.where(has_prefill, prefill, server_ttft)
    how = np.select(
        [has_prefill, has_ttft],
        ["provider_timings.prefill_ms", "provider_timings.server_ttft_ms"],
        "",
    ).astype(object)
    how[how == ""] = None
    return value, how


def network_front_ends(cols: Columns) -> np.ndarray:
    """TTFT − queue − prefill of each request (NaN: a term is missing)."""
    result: np.ndarray = cols.num("client.ttft_ms") - queues(cols)[0] - prefills(cols)[0]
    return result


def ttfts_beyond_prefill(cols: Columns) -> np.ndarray:
    """TTFT − prefill of each request: queue, network and front end together, for a
    provider that reports no queue (NaN: no TTFT or no prefill)."""
    result: np.ndarray = cols.num("client.ttft_ms") - prefills(cols)[0]
    return result


def decode_gaps(cols: Columns) -> np.ndarray:
    """Client minus provider decode ms per output token of each request (NaN: either
    missing). Below 0 the client's stamps came closer together than the server produced
    the tokens: they were late and bunched (see `NEGATIVE_DECODE_GAP`)."""
    result: np.ndarray = cols.num("client.decode_ms_per_token") - cols.num(
        "provider_timings.decode_ms_per_token"
    )
    return result


def _one(values: np.ndarray) -> float | None:
    value = float(values[0])
    return None if math.isnan(value) else value


def keepalive_wait_of(r: RequestRecord) -> float | None:
    """`keepalive_waits` of one request (None: not kept alive, or a stamp missing)."""
    return _one(keepalive_waits(Columns.of_records([r])))


def queue_of(r: RequestRecord) -> tuple[float, str] | None:
    """`queues` of one request: its queue and how it was known; None: not derivable."""
    value, how = queues(Columns.of_records([r]))
    return None if how[0] is None else (float(value[0]), str(how[0]))


def prefill_of(r: RequestRecord) -> tuple[float, str] | None:
    """`prefills` of one request: its prefill and the field it came from."""
    value, how = prefills(Columns.of_records([r]))
    return None if how[0] is None else (float(value[0]), str(how[0]))


def network_front_end_of(r: RequestRecord) -> float | None:
    """`network_front_ends` of one request (None: a term is missing)."""
    return _one(network_front_ends(Columns.of_records([r])))


def ttft_beyond_prefill_of(r: RequestRecord) -> float | None:
    """`ttfts_beyond_prefill` of one request (None: no TTFT or no prefill)."""
    return _one(ttfts_beyond_prefill(Columns.of_records([r])))


def decode_gap_of(r: RequestRecord) -> float | None:
    """`decode_gaps` of one request (None: either decode missing)."""
    return _one(decode_gaps(Columns.of_records([r])))


NEGATIVE_DECODE_GAP = (
    "the client saw tokens come faster than the server says it made them (client − server "
    "decode per token < 0): labkit's stamps were late and bunched, or the two count decode "
    "differently; either way the difference is not the network's"
)


def _joined(values: set[str]) -> str | None:
    """The only value, or a joined list when requests differed."""
    return " / ".join(sorted(values)) if values else None


def ttft_split(records: Iterable[RequestRecord], client_bound: str | None = None) -> TTFTSplit:
    """`ttft_split_of` the records (the measured ones: no warm-up, no failure)."""
    return ttft_split_of(Columns.of_records(list(records)), client_bound)


def _present(values: np.ndarray) -> np.ndarray:
    kept: np.ndarray = values[~np.isnan(values)]
    return kept


def ttft_split_of(cols: Columns, client_bound: str | None = None) -> TTFTSplit:
    """TTFT split into provider queue, provider prefill, and network + front end: medians
    over the requests that had each term, their sources, and the terms not derivable.

    `cols` are the measured requests (no warm-up, no failure); `client_bound` is the
    self-check's reason where it flagged them (carried on the figure, shown marked).
    """
    queue, queue_how = queues(cols)
    prefill, prefill_how = prefills(cols)
    queue_values, prefill_values = _present(queue), _present(prefill)
    rest = _present(cols.num("client.ttft_ms") - queue - prefill)
    missing = ([] if queue_values.size else [NO_QUEUE]) + (
        [] if prefill_values.size else [NO_PREFILL]
    )
    send = _present(cols.num("client.send_ms"))
    return TTFTSplit(
        ttft_ms=median(_present(cols.num("client.ttft_ms"))),
        provider_queue_ms=median(queue_values) if queue_values.size else None,
        queue_source=_joined({str(h) for h in queue_how if h is not None}),
        provider_prefill_ms=median(prefill_values) if prefill_values.size else None,
        prefill_source=_joined({str(h) for h in prefill_how if h is not None}),
        network_front_end_ms=median(rest) if rest.size else None,
        not_derived=missing,
        client_bound=client_bound,
        client_send_ms=median(send) if send.size else None,
    )
