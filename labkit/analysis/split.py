"""Whose time is it? TTFT split into labkit's own time, the provider's queue and prefill,
and the rest.

The one definition, per request, with where each term comes from (docs/measurement.md,
"Attribution"):

    network + front end = client.ttft_ms − labkit's own − provider queue − provider prefill

`ttft_split` is the aggregate that the attribution answer, its chart and the report's split
table render: each part's mean, so the parts add up to the mean TTFT exactly (medians do not).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np

from labkit.analysis.columns import Columns
from labkit.analysis.stats import mean
from labkit.figures import TTFTSplit
from labkit.records import RequestRecord

__all__ = [
    "NEGATIVE_DECODE_GAP",
    "QUEUE_SOURCES",
    "behind_gateway_words",
    "decode_gap_of",
    "decode_gaps",
    "gateway_wait_of",
    "gateway_waits",
    "gateways",
    "keepalive_wait_of",
    "keepalive_waits",
    "labkit_owns",
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
    "keepalive": "client.first_event_ms - client.headers_ms while the server's own "
    "keep-alive comments came (never a gateway's: provider_timings.keepalive_gateway)",
}

NO_QUEUE = (
    "the provider reports no queue time and labkit cannot rule queueing out "
    "(not a managed server used by labkit alone within its slots)"
)
NO_PREFILL = "the provider reports no prefill time"
NO_LABKIT_SEND = (
    "labkit's own send was not observed (a transport without trace events): it is inside "
    "network and front end"
)


def gateways(cols: Columns) -> np.ndarray:
    """The gateway each request's keep-alive comments came from (None: none, or the
    server's own)."""
    return cols.text("provider_timings.keepalive_gateway")


def behind_gateway_words(names: Iterable[str]) -> str:
    """Why the queue is not derivable behind the gateways `names`, in one clause."""
    which = " / ".join(sorted(set(names)))
    return (
        f"behind the gateway ({which}) the wait before the first event is the gateway's "
        "own, holding the upstream provider's queue and its prefill together: labkit cannot "
        "separate them, so it is no provider queue"
    )


def keepalive_waits(cols: Columns) -> np.ndarray:
    """Headers to first event, for requests the server itself kept alive with comments
    (NaN: none, or a gateway's processing comments, whose wait is no queue)."""
    kept_alive = cols.num("provider_timings.keepalive_comments") > 0
    own = np.array([g is None for g in gateways(cols)], dtype=bool)
    wait = cols.num("client.first_event_ms") - cols.num("client.headers_ms")
    return np.where(kept_alive & own, wait, np.nan)


def gateway_waits(cols: Columns) -> np.ndarray:
    """Headers to first event, for requests a gateway kept alive with its processing
    comments (NaN: none): the upstream's queue and prefill together, with the gateway's."""
    kept_alive = cols.num("provider_timings.keepalive_comments") > 0
    behind = np.array([g is not None for g in gateways(cols)], dtype=bool)
    wait = cols.num("client.first_event_ms") - cols.num("client.headers_ms")
    return np.where(kept_alive & behind, wait, np.nan)


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


def labkit_owns(cols: Columns) -> np.ndarray:
    """labkit's own time inside each request's TTFT: its send (`client.send_ms`) plus the
    first token's stamp lateness where estimated (NaN: the send not observed)."""
    late = cols.num("client.ttft_lateness_ms")
    result: np.ndarray = cols.num("client.send_ms") + np.where(np.isnan(late), 0.0, late)
    return result


def network_front_ends(cols: Columns) -> np.ndarray:
    """TTFT − labkit's own − queue − prefill of each request (NaN: a term is missing); where
    labkit's own time was not observed, it stays inside (as `ttft_split_of` says)."""
    own = labkit_owns(cols)
    result: np.ndarray = (
        cols.num("client.ttft_ms")
        - np.where(np.isnan(own), 0.0, own)
        - queues(cols)[0]
        - prefills(cols)[0]
    )
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


def gateway_wait_of(r: RequestRecord) -> float | None:
    """`gateway_waits` of one request (None: no gateway's comments, or a stamp missing)."""
    return _one(gateway_waits(Columns.of_records([r])))


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


def ttft_split_of(cols: Columns, client_bound: str | None = None) -> TTFTSplit:
    """TTFT split into labkit's own time, the provider's queue and prefill, and network +
    front end: each part's mean over the requests that had every part (so they add up to
    those requests' mean TTFT), their sources, and the terms not derivable.

    `cols` are the measured requests (no warm-up, no failure); `client_bound` is the
    self-check's reason where it flagged them (carried on the figure, shown marked).
    """
    ttft = cols.num("client.ttft_ms")
    own = labkit_owns(cols)
    queue, queue_how = queues(cols)
    prefill, prefill_how = prefills(cols)
    has_ttft = ~np.isnan(ttft)
    # A term enters the split where some request has it; the split is over the requests
    # that have every term that entered, so its parts add up to their mean TTFT.
    terms = {
        name: values
        for name, values in (("labkit_ms", own), ("queue", queue), ("prefill", prefill))
        if (has_ttft & ~np.isnan(values)).any()
    }
    behind = sorted({str(g) for g in gateways(cols)[has_ttft] if g is not None})
    no_queue = behind_gateway_words(behind) if behind else NO_QUEUE
    missing = ([] if "labkit_ms" in terms else [NO_LABKIT_SEND]) + (
        ([] if "queue" in terms else [no_queue]) + ([] if "prefill" in terms else [NO_PREFILL])
    )
    rows = has_ttft.copy()
    for values in terms.values():
        rows &= ~np.isnan(values)
    split = TTFTSplit(
        n_requests=len(cols),
        not_derived=missing,
        client_bound=client_bound,
        queue_source=_joined({str(h) for h in queue_how[rows] if h is not None}),
        behind_gateway=_joined(set(behind)),
        prefill_source=_joined({str(h) for h in prefill_how[rows] if h is not None}),
    )
    if not rows.any():
        return split
    rest = ttft[rows] - sum((values[rows] for values in terms.values()), np.zeros(rows.sum()))
    whole = "queue" in terms and "prefill" in terms
    return split.model_copy(
        update={
            "ttft_ms": mean(ttft[rows]),
            "labkit_ms": mean(own[rows]) if "labkit_ms" in terms else None,
            "provider_queue_ms": mean(queue[rows]) if "queue" in terms else None,
            "provider_prefill_ms": mean(prefill[rows]) if "prefill" in terms else None,
            "network_front_end_ms": mean(rest) if whole else None,
            "unsplit_ms": None if whole else mean(rest),
        }
    )
