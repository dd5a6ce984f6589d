"""Which records a statistic may use: measured ones, the latest pass, stop reasons counted.

Every experiment's analysis selects its records through these, so a warm-up, a failed
request or a resumed run's earlier pass never enters a figure.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from labkit.records import RequestRecord

__all__ = ["latest_pass", "measured", "stop_counts"]


def measured(records: Iterable[RequestRecord]) -> list[RequestRecord]:
    """The records statistics may use: not warm-ups, not failed."""
    return [r for r in records if not r.warmup and r.error is None]


def latest_pass(records: list[RequestRecord], tag: str = "level_run") -> list[RequestRecord]:
    """The records of the latest pass, told apart by `tag` (a resumed run may have run a
    level, a replay or a session again under a new tag value); the latest pass is the one
    that started last."""
    if not records:
        return []
    first_seen: dict[str, Any] = {}
    for r in records:
        run = str(r.tags.get(tag, ""))
        if run not in first_seen or r.started_at < first_seen[run]:
            first_seen[run] = r.started_at
    latest = max(first_seen, key=lambda k: first_seen[k])
    return [r for r in records if str(r.tags.get(tag, "")) == latest]


def stop_counts(records: Iterable[RequestRecord]) -> dict[str, int]:
    """How often each normalised stop reason occurred."""
    return dict(Counter(str(r.stop_reason) if r.stop_reason else "none" for r in records))
