"""`load`: a row per load level, in the order they ran."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from labkit.figures.base import register_figures
from labkit.figures.levels import LoadLevel, RunsLevels
from labkit.figures.slo import _ExperimentFigures

__all__ = ["LoadFigures"]


@register_figures
class LoadFigures(_ExperimentFigures, RunsLevels):
    """`load`: a row per level, in the order they ran."""

    kind: Literal["load"] = "load"
    levels: list[LoadLevel] = Field(default_factory=list)
    mode: Literal["concurrency", "rate"]

    def levels_run(self) -> list[LoadLevel]:
        """The levels, in the order they ran."""
        return self.levels
