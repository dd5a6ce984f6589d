"""Small helpers the experiments share: prompts with ids and number formatting.

Which records a statistic may use is `labkit.analysis.selection`.

The least-squares fit lives with its result, `labkit.figures.LinearFit.least_squares`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "Prompt",
    "fmt_ms",
    "prompt_list",
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


def fmt_ms(value: Any, digits: int = 1, signed: bool = False) -> str:
    """`12.3 ms` (`+12.3 ms` when `signed`), or `n/a` for a missing value."""
    if value is None:
        return "n/a"
    return f"{float(value):{'+' if signed else ''}.{digits}f} ms"
