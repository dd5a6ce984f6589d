"""`determinism` in the report: each repeat's output aligned token by token (and, with
`top_logprobs`, the next-token pictures, `labkit.report.kinds.next_token`)."""

from __future__ import annotations

from typing import Any

from labkit.figures.determinism import DeterminismFigures
from labkit.records import LabResults
from labkit.report.charts import Chart, _by_kind, aligned_cells, aligned_replies
from labkit.report.kinds import KindReport, Picture, register_report

__all__ = ["determinism_chart"]

_MAX_TOKENS_SHOWN = 48


def determinism_chart(lab: LabResults | None) -> Chart | None:
    """Each variant's repeats aligned token by token, the first divergent token marked."""
    values: list[dict[str, Any]] = []
    for ans, fig in _by_kind(lab, DeterminismFigures):
        for v in fig.variants:
            rows = [
                (f"{ans.provider} · {v.variant} · repeat {k + 1}", out)
                for k, out in enumerate(v.outputs)
            ]
            values += aligned_cells(ans.provider, rows, _MAX_TOKENS_SHOWN)
    if not values:
        return None
    rows_shown = len({v["row"] for v in values})
    return aligned_replies(
        "q3_determinism",
        "3. Determinism: each repeat's output aligned token by token",
        "Determinism",
        f"{rows_shown} outputs",
        values,
        "One row per repeat of each variant (temperature, seed); a cell per output token "
        f"(the first {_MAX_TOKENS_SHOWN}). Red: the first token that differs from repeat 1; "
        "orange: everything after it. Hover a cell for its token.",
    )


def _pictures(lab: LabResults | None) -> list[Picture]:
    return [determinism_chart(lab) or "determinism: no outputs to align."]


register_report(
    KindReport("determinism", question=3, pictures=_pictures, shows_charts_of=("next_token",))
)
