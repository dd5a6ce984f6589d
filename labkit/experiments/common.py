"""Small helpers the experiments share: record selection, medians, number formatting.

The least-squares fit lives with its result, `labkit.figures.LinearFit.least_squares`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from labkit.records import RequestRecord

__all__ = [
    "Prompt",
    "fmt_ms",
    "latest_pass",
    "measured",
    "prompt_list",
    "stop_counts",
]


class Prompt(BaseModel):
    """A prompt with a stable id (used in records, resume keys and reports)."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1)
    text: str = Field(min_length=1)


def prompt_list(items: Iterable[str | Prompt]) -> list[Prompt]:
    """Plain strings get ids p0, p1, ... by position."""
    return [
        it if isinstance(it, Prompt) else Prompt(id=f"p{i}", text=it) for i, it in enumerate(items)
    ]


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


def fmt_ms(value: Any, digits: int = 1, signed: bool = False) -> str:
    """`12.3 ms` (`+12.3 ms` when `signed`), or `n/a` for a missing value."""
    if value is None:
        return "n/a"
    return f"{float(value):{'+' if signed else ''}.{digits}f} ms"
