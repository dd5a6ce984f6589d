"""`trace`: one replay of a trace file, measured as one load level."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from labkit.figures.base import _Figures, register_figures
from labkit.figures.levels import LoadLevel, RunsLevels

__all__ = ["TraceFigures"]


@register_figures
class TraceFigures(_Figures, RunsLevels):
    """`trace`: one replay of a trace file, measured as one load level."""

    kind: Literal["trace"] = "trace"
    trace: str = Field(description="The trace file's name.")
    speedup: float = Field(description="How many times faster than recorded it was replayed.")
    replay: LoadLevel = Field(description="The replay as a load level (target: the trace's rate).")

    def levels_run(self) -> list[LoadLevel]:
        """The replay: one level."""
        return [self.replay]
