"""Each request's trace ids and the headers that carry them.

A run is one trace: its id is derived from `run_id`, and so are the span ids of the run,
each experiment (per provider) and each load level, so every request's parent is known from
the record alone and a run exported after the fact gives the same spans. A request's own
span id is random. All of it is computed before the request's clock starts.
"""

from __future__ import annotations

import functools
import hashlib
import os
from collections.abc import Mapping

from labkit.records import RequestTrace

__all__ = [
    "level_key",
    "request_trace",
    "span_id_of",
    "trace_headers",
    "trace_id_of",
]

Tags = Mapping[str, str | int | float | bool]


def _digest(*parts: str) -> bytes:
    return hashlib.sha256("\0".join(("labkit", *parts)).encode()).digest()


def _nonzero(value: bytes) -> str:
    # An all-zero id is invalid in W3C trace context; a digest that is all zero is not
    # expected, but the id must be valid whatever it is.
    return value.hex() if any(value) else "0" * (2 * len(value) - 1) + "1"


@functools.lru_cache(maxsize=64)
def trace_id_of(run_id: str) -> str:
    """The run's trace id (32 hex digits)."""
    return _nonzero(_digest("trace", run_id)[:16])


@functools.lru_cache(maxsize=1024)
def span_id_of(run_id: str, *path: str) -> str:
    """The span id (16 hex digits) of the run (`path` empty), of an experiment of a
    provider (`provider, experiment`) or of a level of it (`provider, experiment, level`);
    kept for the next request of the same level (a digest per request otherwise)."""
    return _nonzero(_digest("span", run_id, *path)[:8])


def level_key(tags: Tags) -> str | None:
    """Which load level a request belongs to (its pass `level_run`, or its `level`); None
    outside levels."""
    key = tags.get("level_run", tags.get("level"))
    return None if key is None else str(key)


def parent_span_id(run_id: str, provider: str, experiment: str, tags: Tags) -> str:
    """The span a request's span belongs to: its level's, or its experiment's."""
    level = level_key(tags)
    if level is None:
        return span_id_of(run_id, provider, experiment)
    return span_id_of(run_id, provider, experiment, level)


def request_trace(
    run_id: str, provider: str, experiment: str, tags: Tags, record_id: str, *, propagate: bool
) -> RequestTrace:
    """A new request's trace context: a random span id under its level or experiment."""
    return RequestTrace(
        trace_id=trace_id_of(run_id),
        span_id=_nonzero(os.urandom(8)),
        parent_span_id=parent_span_id(run_id, provider, experiment, tags),
        propagated=propagate,
        request_id_sent=record_id if propagate else None,
    )


def trace_headers(trace: RequestTrace) -> dict[str, str]:
    """The headers that carry `trace`: W3C `traceparent` (sampled) and `x-request-id`;
    empty when it is not propagated."""
    if not trace.propagated:
        return {}
    headers = {"traceparent": f"00-{trace.trace_id}-{trace.span_id}-01"}
    if trace.request_id_sent is not None:
        headers["x-request-id"] = trace.request_id_sent
    return headers
