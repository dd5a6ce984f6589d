"""`determinism_load` in the report: each level's distinct replies aligned token by token,
the first token that differs from the level's first reply marked."""

from __future__ import annotations

from typing import Any

from labkit.figures.determinism_load import DeterminismLoadFigures
from labkit.records import LabResults
from labkit.report.charts import Chart, _by_kind, aligned_cells, aligned_replies
from labkit.report.kinds import KindReport, Picture, register_report

__all__ = ["determinism_load_chart"]

_MAX_TOKENS_SHOWN = 64


def _distinct(outputs: list[list[str]]) -> list[tuple[list[str], int]]:
    """Each distinct reply once, in order of first appearance, with how many gave it."""
    seen: dict[tuple[str, ...], int] = {}
    for out in outputs:
        seen[tuple(out)] = seen.get(tuple(out), 0) + 1
    return [(list(out), n) for out, n in seen.items()]


def determinism_load_chart(lab: LabResults | None) -> Chart | None:
    """Per provider and level, each distinct reply as a row of tokens."""
    values: list[dict[str, Any]] = []
    for ans, fig in _by_kind(lab, DeterminismLoadFigures):
        for level in fig.levels:
            rows = [
                (
                    f"{ans.provider} · concurrency {level.concurrency} · reply {k + 1} "
                    f"({n} of {level.n})",
                    out,
                )
                for k, (out, n) in enumerate(_distinct(level.outputs))
            ]
            values += aligned_cells(ans.provider, rows, _MAX_TOKENS_SHOWN)
    if not values:
        return None
    rows_shown = len({v["row"] for v in values})
    return aligned_replies(
        "determinism_load",
        "Determinism under load: each level's distinct replies aligned token by token",
        "Determinism under load",
        f"{rows_shown} rows: each level's distinct replies",
        values,
        "One row per distinct reply of each concurrency level (how many of the level's "
        f"replies gave it in brackets); a cell per output token (the first {_MAX_TOKENS_SHOWN}). "
        "Red: the first token that differs from the level's first reply; orange: everything "
        "after it. One row for a level: every reply there was the same.",
    )


def _pictures(lab: LabResults | None) -> list[Picture]:
    return [determinism_load_chart(lab) or "determinism_load: no replies to align."]


register_report(KindReport("determinism_load", pictures=_pictures))
