"""Each experiment kind's part of the report: one module per kind here, found by `kind_reports`.

A kind's module registers a `KindReport`: its number among the lab's questions, the
pictures beside its answers, and its own section of the report. `labkit.report.build` lays
them out and names no kind, so a new kind's part of the report is one file here (a kind
with nothing of its own to show needs none).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Literal, TypeAlias

from labkit.records import LabResults
from labkit.report.charts import Chart, TokenSpans
from labkit.report.load import RunData
from labkit.report.render import Block

__all__ = [
    "KindReport",
    "Picture",
    "Place",
    "kind_reports",
    "kind_sections",
    "lab_questions",
    "question_charts",
    "register_report",
]

#: What stands beside a kind's answers: a chart, texts cut into their tokens, or a sentence
#: saying why a picture could not be drawn.
Picture: TypeAlias = Chart | TokenSpans | str

#: Where a kind's section stands: after the run and its server's queue (`after_run`: load
#: levels, conversations, sessions, sweeps), or after the TTFT split (`after_split`: the
#: attribution's every measurement).
Place: TypeAlias = Literal["after_run", "after_split"]


@dataclass(frozen=True)
class KindReport:
    """What the report shows of one experiment kind."""

    kind: str
    question: int | None = None
    """Its number among the lab's questions, answered first in this order; None: its
    answers come after them, by experiment name."""
    pictures: Callable[[LabResults | None], list[Picture]] | None = None
    """The pictures beside its answers, from every answer in lab.json."""
    shows_charts_of: tuple[str, ...] = ()
    """Kinds whose charts (not their sentences) its answers show after its own."""
    section: Callable[[RunData], list[Block]] | None = None
    """Its own section of the report (empty: nothing to show in this run)."""
    place: Place = "after_run"
    rank: int = 0
    """Its order among the sections at its place (load 10, conversation 20, session 30,
    sweep 40)."""


_REPORTS: dict[str, KindReport] = {}


def register_report(report: KindReport) -> KindReport:
    """Make `report` the report's part for its kind (its module calls this once)."""
    if report.kind in _REPORTS and _REPORTS[report.kind] is not report:
        raise ValueError(f"the report of kind {report.kind!r} registered twice")
    _REPORTS[report.kind] = report
    return report


@cache
def _import_kind_modules() -> None:
    for module in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{module.name}")


def kind_reports() -> list[KindReport]:
    """Every kind's part of the report, by kind (the modules here, imported on first use)."""
    _import_kind_modules()
    return [_REPORTS[kind] for kind in sorted(_REPORTS)]


def lab_questions() -> list[str]:
    """The kinds the lab's questions ask, in the order the report answers them."""
    asked = [(r.question, r.kind) for r in kind_reports() if r.question is not None]
    return [kind for _, kind in sorted(asked)]


def question_charts(lab: LabResults | None) -> dict[str, list[Picture]]:
    """Per experiment kind, its pictures in order, and sentences for what is missing."""
    reports = kind_reports()
    own = {r.kind: r.pictures(lab) for r in reports if r.pictures is not None}
    return {
        r.kind: own[r.kind]
        + [p for other in r.shows_charts_of for p in own.get(other, []) if isinstance(p, Chart)]
        for r in reports
        if r.pictures is not None
    }


def kind_sections(run: RunData, place: Place) -> list[Block]:
    """The kinds' own sections at `place`, in their rank order."""
    at = sorted(
        (r for r in kind_reports() if r.section is not None and r.place == place),
        key=lambda r: (r.rank, r.kind),
    )
    return [block for r in at if r.section is not None for block in r.section(run)]
