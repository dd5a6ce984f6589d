"""`conversation` in the report: a table per provider × conversation experiment (a row per
cache variant and turn), and TTFT and cache reuse per turn."""

from __future__ import annotations

from typing import Any

from labkit.figures.conversation import ConversationFigures
from labkit.records import LabResults
from labkit.report.charts import Chart
from labkit.report.kinds import KindReport, register_report
from labkit.report.render import Block, ChartBlock, Heading, Para, Table, fmt_num
from labkit.report.run_charts import PICKED, facet_spec, legend_pick

__all__ = ["conversation_chart", "conversation_section"]


def _conversations(lab: LabResults | None) -> list[tuple[str, str, ConversationFigures]]:
    return [
        (a.provider, a.experiment, a.figures)
        for a in (lab.answers if lab is not None else [])
        if isinstance(a.figures, ConversationFigures) and a.figures.turns
    ]


def conversation_chart(lab: LabResults | None) -> Chart | None:
    """TTFT per turn (left) and prompt vs cached tokens per turn (right), per provider and
    cache variant."""
    found = _conversations(lab)
    values: list[dict[str, Any]] = []
    for provider, experiment, figures in found:
        name = f"{provider} · {experiment} · " if len(found) > 1 else ""
        for t in figures.turns:
            if not t.ok:
                continue
            at = {"series": f"{name}cache {t.cache}", "turn": t.turn + 1}
            for panel, what, v in (
                ("TTFT p50 (ms)", "TTFT", t.ttft_ms_p50),
                ("tokens (p50)", "prompt", t.input_tokens_p50),
                ("tokens (p50)", "cached", t.cached_tokens_p50),
            ):
                if v is not None:
                    values.append({**at, "panel": panel, "what": what, "v": v})
    if not values:
        return None
    layer = [
        {
            "params": [legend_pick("series")],
            "mark": {"type": "line", "point": True},
            "encoding": {
                "x": {"field": "turn", "type": "ordinal", "axis": {"labelAngle": 0}},
                "y": {"field": "v", "type": "quantitative", "title": None},
                "color": {"field": "series", "type": "nominal", "title": None},
                "strokeDash": {"field": "what", "type": "nominal", "title": None},
                "opacity": PICKED,
                "tooltip": [
                    {"field": "series"},
                    {"field": "turn"},
                    {"field": "what"},
                    {"field": "v", "format": ".1f", "title": "p50"},
                ],
            },
        }
    ]
    return Chart(
        "conversation_turns",
        "TTFT per conversation turn",
        facet_spec(values, "panel", ["TTFT p50 (ms)", "tokens (p50)"], layer),
        "Left: client TTFT per turn with the provider's prompt cache on and off. Right: the "
        "prompt each turn sent (the whole history) and the part the provider said it served "
        "from its cache.",
    )


def conversation_section(lab: LabResults | None) -> list[Block]:
    """A table per provider × conversation experiment: a row per cache variant and turn."""
    found = _conversations(lab)
    if not found:
        return []
    blocks: list[Block] = [
        Heading("Conversation turns"),
        Para(
            "Per cache variant and turn: sessions ok, the prompt (the whole history) and the "
            "tokens the provider served from its cache, the reuse that implies (cached / "
            "prompt) beside what a perfect prefix cache could reuse (the previous turn's "
            "prompt and answer), client TTFT and the provider's own prefill time (ms).",
            "note",
        ),
    ]
    labels = ["cache", "turn", "ok", "prompt", "cached", "reuse %", "reusable %"]
    labels += ["TTFT p50", "TTFT p90", "server prefill"]
    for provider, experiment, figures in found:
        blocks.append(Heading(f"{provider} · {experiment}", 3))
        cells = [
            [
                t.cache,
                str(t.turn + 1),
                fmt_num(t.ok, 0),
                fmt_num(t.input_tokens_p50, 0),
                fmt_num(t.cached_tokens_p50, 0),
                fmt_num(None if t.reuse_p50 is None else 100 * t.reuse_p50, 0),
                fmt_num(None if t.reusable_p50 is None else 100 * t.reusable_p50, 0),
                fmt_num(t.ttft_ms_p50),
                fmt_num(t.ttft_ms_p90),
                fmt_num(t.prefill_ms_p50),
            ]
            for t in figures.turns
        ]
        blocks.append(Table(labels, cells, set(range(1, len(labels)))))
    chart = conversation_chart(lab)
    return blocks + ([ChartBlock(chart)] if chart else [])


register_report(
    KindReport("conversation", section=lambda run: conversation_section(run.lab), rank=20)
)
