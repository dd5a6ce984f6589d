"""The report's part for agent sessions: one timeline per session (turns, tool gaps and
sub-agents side by side) and the critical-path breakdown per provider.

Drawn from the typed `SessionFigures` in `lab.json` only; a run without them adds nothing.
"""

from __future__ import annotations

from typing import Any

from labkit.figures.session import SessionFigures
from labkit.records import LabResults
from labkit.report.charts import _SCHEMA, Chart
from labkit.report.kinds import KindReport, register_report
from labkit.report.render import Block, ChartBlock, Heading, Para, Table, fmt_num

__all__ = ["critical_path_chart", "session_section", "session_timeline_chart"]

_TERMS = ("provider queue", "prefill", "decode", "tool", "labkit")


def _sessions(lab: LabResults | None) -> list[tuple[str, str, SessionFigures]]:
    return [
        (a.provider, a.experiment, a.figures)
        for a in (lab.answers if lab is not None else [])
        if isinstance(a.figures, SessionFigures) and a.figures.sessions
    ]


def session_timeline_chart(lab: LabResults | None) -> Chart | None:
    """Per session a row per agent: each turn a bar from send to stream end, the tool gap
    before it a thin bar, sub-agents on their own rows beside their parent."""
    values: list[dict[str, Any]] = []
    for provider, _, figures in _sessions(lab):
        for s in figures.steps:
            row = f"{provider} · s{s.session} · agent {s.agent}"
            values.append(
                {"row": row, "what": "turn" if s.ok else "failed turn", "start": s.start_ms,
                 "end": s.end_ms, "step": s.step, "calls": s.tool_calls}
            )  # fmt: skip
            if s.tool_ms > 0:
                what = "waiting for sub-agents" if s.subagents else "tool"
                values.append(
                    {"row": row, "what": what, "start": s.start_ms - s.tool_ms,
                     "end": s.start_ms, "step": s.step, "calls": 0}
                )  # fmt: skip
    if not values:
        return None
    spec = {
        "$schema": _SCHEMA,
        "width": 640,
        "data": {"values": values},
        "mark": {"type": "bar", "height": 10},
        "encoding": {
            "y": {"field": "row", "type": "nominal", "title": None},
            "x": {"field": "start", "type": "quantitative", "title": "ms from the session's start"},
            "x2": {"field": "end"},
            "color": {"field": "what", "type": "nominal", "title": None},
            "tooltip": [{"field": "what"}, {"field": "step"}, {"field": "calls"},
                        {"field": "start", "format": ".1f"}, {"field": "end", "format": ".1f"}],
        },
    }  # fmt: skip
    return Chart(
        "session_timeline",
        "Session timelines",
        spec,
        "Each session's turns (send to stream end) and the tool time before each; sub-agents "
        "run on their own rows.",
    )


def _terms(figures: SessionFigures) -> list[float]:
    c = figures.critical
    return [c.provider_queue_ms, c.prefill_ms, c.decode_ms, c.tool_ms, c.labkit_ms]


def critical_path_chart(lab: LabResults | None) -> Chart | None:
    """The critical path's five terms stacked, one bar per provider × experiment."""
    values = [
        {"series": f"{p} · {e}", "term": term, "ms": ms, "i": i}
        for p, e, f in _sessions(lab)
        for i, (term, ms) in enumerate(zip(_TERMS, _terms(f), strict=True))
    ]
    if not values:
        return None
    spec = {
        "$schema": _SCHEMA,
        "width": 560,
        "data": {"values": values},
        "mark": "bar",
        "encoding": {
            "y": {"field": "series", "type": "nominal", "title": None},
            "x": {"field": "ms", "type": "quantitative", "stack": "normalize",
                  "title": "share of the sessions' time"},
            "color": {"field": "term", "type": "nominal", "sort": list(_TERMS)},
            "order": {"field": "i", "type": "quantitative"},  # stacked as the legend reads
            "tooltip": [{"field": "term"}, {"field": "ms", "format": ".1f"}],
        },
    }  # fmt: skip
    return Chart(
        "session_critical_path",
        "Where the sessions' time went",
        spec,
        "The critical path summed over the sessions: provider queue, prefill, decode, tools "
        "and labkit's own time.",
    )


def session_section(lab: LabResults | None) -> list[Block]:
    """Per provider × session experiment: the critical-path table and each session's row."""
    found = _sessions(lab)
    if not found:
        return []
    blocks: list[Block] = [
        Heading("Agent sessions"),
        Para(
            "Each session measured as a job: its completion time and the split of that time "
            "along its critical path (ms). The terms add up to the completion time; where a "
            "provider reports no queue (—), any queueing is inside its prefill. A session is "
            "complete only when it ended with an answer; otherwise the table says how it "
            "ended (length: its last turn cut by max_tokens; step_limit: still calling tools "
            "at max_steps; failed; refused).",
            "note",
        ),
    ]
    labels = ["session", "complete", "steps", "failed", "agents", "tool calls", "time"]
    labels += [*_TERMS]
    for provider, experiment, figures in found:
        blocks.append(Heading(f"{provider} · {experiment}", 3))
        cells = [
            [
                str(r.session),
                "yes" if r.complete else f"no: {r.ended}" if r.ended else "no",
                str(r.steps),
                str(r.failed_steps),
                str(r.agents),
                str(r.tool_calls),
                fmt_num(r.duration_ms),
                fmt_num(r.critical.provider_queue_ms if figures.queue_reported else None),
                fmt_num(r.critical.prefill_ms),
                fmt_num(r.critical.decode_ms),
                fmt_num(r.critical.tool_ms),
                fmt_num(r.critical.labkit_ms),
            ]
            for r in figures.sessions
        ]
        blocks.append(Table(labels, cells, set(range(2, len(labels)))))
    charts = [critical_path_chart(lab), session_timeline_chart(lab)]
    return blocks + [ChartBlock(c) for c in charts if c is not None]


register_report(KindReport("session", section=lambda run: session_section(run.lab), rank=30))
