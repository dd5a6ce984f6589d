"""`thinking` in the report: each provider's time to the last token as waiting, thinking
(estimated: a colour of its own, and named so in the legend) and answering, the mean of the requests
with hidden reasoning and each request beside it."""

from __future__ import annotations

from typing import Any

from labkit.figures.thinking import ESTIMATED, ThinkingFigures
from labkit.records import LabResults
from labkit.report.charts import Chart, _base, _by_kind
from labkit.report.kinds import KindReport, Picture, register_report

__all__ = ["thinking_chart"]

_WAITING, _THINKING, _ANSWERING = "waiting", f"thinking ({ESTIMATED})", "answering"
_PARTS = [_WAITING, _THINKING, _ANSWERING]
_COLORS = ["#8c959f", "#bf8700", "#0969da"]
#: Requests drawn one by one under each provider's mean (the rest are in the figures).
_MAX_REQUESTS = 40


def thinking_chart(lab: LabResults | None) -> Chart | None:
    """One stacked bar per provider (the means) and per request: waiting, thinking
    (estimated) and answering, in ms from the request's start."""
    values: list[dict[str, Any]] = []
    for ans, fig in _by_kind(lab, ThinkingFigures):
        if fig.thinking_ms is None or fig.waiting_ms is None or fig.answering_ms is None:
            continue
        rows: list[tuple[str, float | None, float | None, float | None]] = [
            (
                f"{ans.provider} · mean of {len(fig.requests)}",
                fig.waiting_ms.value,
                fig.thinking_ms.value,
                fig.answering_ms.value,
            )
        ]
        rows += [
            (f"{ans.provider} · request {k + 1}", r.waiting_ms, r.thinking_ms, r.answering_ms)
            for k, r in enumerate(fig.requests[:_MAX_REQUESTS])
        ]
        for row, waiting, thinking, answering in rows:
            values += _bar(ans.provider, row, waiting or 0.0, thinking or 0.0, answering or 0.0)
    if not values:
        return None
    spec = _base(f"Time to the last token: waiting, thinking ({ESTIMATED}), answering", values)
    spec["height"] = {"step": 18}
    spec["mark"] = {"type": "bar"}
    spec["encoding"] = {
        "y": {"field": "row", "type": "nominal", "sort": None, "title": None,
              "axis": {"labelLimit": 320}},
        "x": {"field": "start_ms", "type": "quantitative", "title": "ms from the request's start"},
        "x2": {"field": "end_ms"},
        "color": {"field": "part", "type": "nominal", "title": "part",
                  "scale": {"domain": _PARTS, "range": _COLORS}},
        "tooltip": [
            {"field": "row"},
            {"field": "part"},
            {"field": "ms", "format": ".1f", "title": "ms"},
        ],
    }  # fmt: skip
    return Chart(
        "thinking",
        f"Hidden reasoning: each TTFT split into waiting, thinking ({ESTIMATED}) and answering",
        spec,
        f"One bar per request with hidden reasoning, the providers' means first. Grey: waiting "
        f"(TTFT − thinking: network, queue, prefill); amber: thinking, {ESTIMATED} as the "
        "hidden reasoning tokens × the visible decode pace (never measured: the tokens were "
        "not streamed); blue: the visible answer, measured. Grey and amber make the TTFT.",
    )


def _bar(
    provider: str, row: str, waiting: float, thinking: float, answering: float
) -> list[dict[str, Any]]:
    """A row's three segments, laid end to end (a negative waiting drawn as none)."""
    start = max(waiting, 0.0)
    return [
        {"provider": provider, "row": row, "part": _WAITING, "start_ms": 0.0,
         "end_ms": start, "ms": waiting},
        {"provider": provider, "row": row, "part": _THINKING, "start_ms": start,
         "end_ms": start + thinking, "ms": thinking},
        {"provider": provider, "row": row, "part": _ANSWERING, "start_ms": start + thinking,
         "end_ms": start + thinking + answering, "ms": answering},
    ]  # fmt: skip


def _pictures(lab: LabResults | None) -> list[Picture]:
    return [thinking_chart(lab) or "thinking: no reply with hidden reasoning to split."]


register_report(KindReport("thinking", pictures=_pictures))
