"""Throttled, not failed: which errors are a provider's rate limit or quota.

A request refused because the caller went over a rate limit or a quota says nothing about
the provider's speed or health, so a watch counts it apart (a round with one is
``throttled``) and backs off. The record keeps the error as measured (``error.kind`` is
``http_status`` with ``error.status`` 429, or the provider's own rate-limit error); this
module is the one place that reads it so (docs/watch.md, "Throttled, not failed").
"""

from __future__ import annotations

import re

from labkit.records import ErrorKind, RecordError, RequestRecord

__all__ = ["THROTTLE_STATUS", "is_throttled", "retry_after_s", "throttled_error"]

#: HTTP 429 Too Many Requests: a rate limit or a quota, by any provider.
THROTTLE_STATUS = 429
#: Words a provider's rate-limit or quota error says (OpenAI `rate_limit_exceeded`,
#: `insufficient_quota`; Anthropic `rate_limit_error`; Google `RESOURCE_EXHAUSTED`).
_WORDS = re.compile(
    r"rate[ _-]?limit|quota|too many requests|resource[ _-]?exhausted|tokens per min",
    re.IGNORECASE,
)
#: Statuses a quota error may come with where the body says so (402 Payment Required, 403).
_QUOTA_STATUSES = frozenset({402, 403})


def throttled_error(error: RecordError | None) -> bool:
    """Whether `error` is a rate limit or quota: HTTP 429; a 402/403, or an error inside
    the stream, whose message names a rate limit or quota."""
    if error is None:
        return False
    if error.kind == ErrorKind.HTTP_STATUS:
        if error.status == THROTTLE_STATUS:
            return True
        return error.status in _QUOTA_STATUSES and bool(_WORDS.search(error.message))
    if error.kind == ErrorKind.STREAM_ERROR:
        return bool(_WORDS.search(error.message))
    return False


def is_throttled(record: RequestRecord) -> bool:
    """Whether `record`'s request was refused by a rate limit or quota."""
    return throttled_error(record.error)


def retry_after_s(records: list[RequestRecord]) -> float | None:
    """The longest `retry-after` the throttled records were given (None: none said)."""
    waits = [
        r.error.retry_after_s
        for r in records
        if r.error is not None and r.error.retry_after_s is not None and is_throttled(r)
    ]
    return max(waits) if waits else None
