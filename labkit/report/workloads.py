"""The report's part for workloads: conversations (TTFT and cache reuse per turn) and the
cache hits of shared-prefix and trace levels beside the TTFT they bought.

Drawn from the typed figures in `lab.json` only; a run without such answers adds nothing.
"""

from __future__ import annotations

from typing import Any

from labkit.figures import LoadLevel
from labkit.figures.conversation import ConversationFigures
from labkit.figures.load import LoadFigures
from labkit.figures.trace import TraceFigures
from labkit.records import LabResults
from labkit.report.charts import _SCHEMA, Chart
from labkit.report.render import Block, ChartBlock, Heading, Para, Table, fmt_num
from labkit.report.run_charts import PICKED, facet_spec, legend_pick

__all__ = ["cache_hits_chart", "conversation_chart", "conversation_section"]


def _conversations(lab: LabResults | None) -> list[tuple[str, str, ConversationFigures]]:
    return [
        (a.provider, a.experiment, a.figures)
        for a in (lab.answers if lab is not None else [])
        if isinstance(a.figures, ConversationFigures) and a.figures.turns
    ]


def _cached_levels(lab: LabResults | None) -> list[tuple[str, str, LoadLevel]]:
    """(provider, experiment, level) of every load level and trace replay with cache counts."""
    found: list[tuple[str, str, LoadLevel]] = []
    for a in lab.answers if lab is not None else []:
        if isinstance(a.figures, LoadFigures):
            rows = a.figures.levels
        elif isinstance(a.figures, TraceFigures):
            rows = [a.figures.replay]
        else:
            continue
        found += [
            (a.provider, a.experiment, row)
            for row in rows
            if row.cache is not None and row.cache.cached_share is not None and row.ok
        ]
    return found


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


def cache_hits_chart(lab: LabResults | None) -> Chart | None:
    """Per load level with cache counts: the cached share of prompt tokens against TTFT,
    with the TTFT of hits and misses."""
    values: list[dict[str, Any]] = []
    for provider, experiment, row in _cached_levels(lab):
        cache = row.cache
        assert cache is not None and cache.cached_share is not None  # _cached_levels keeps these
        at = {"level": f"{provider} · {experiment} · {row.display_title}"}
        for what, v in (
            ("level", row.ttft_ms_p50),
            ("hits", cache.ttft_ms_p50_hit),
            ("misses", cache.ttft_ms_p50_miss),
        ):
            if v is not None:
                values.append({**at, "share": 100 * cache.cached_share, "what": what, "v": v})
    if not values:
        return None
    spec = {
        "$schema": _SCHEMA,
        "data": {"values": values},
        "width": 500,
        "height": 260,
        "mark": {"type": "point", "filled": True, "size": 80},
        "encoding": {
            "x": {
                "field": "share",
                "type": "quantitative",
                "title": "prompt tokens served from the provider's cache (%)",
                "scale": {"domain": [0, 100]},
            },
            "y": {"field": "v", "type": "quantitative", "title": "TTFT p50 (ms)"},
            "color": {"field": "level", "type": "nominal", "legend": {"labelLimit": 360}},
            "shape": {
                "field": "what",
                "type": "nominal",
                "title": None,
                "scale": {
                    "domain": ["level", "hits", "misses"],
                    "range": ["circle", "triangle-down", "triangle-up"],
                },
            },
            "tooltip": [
                {"field": "level"},
                {"field": "what"},
                {"field": "share", "format": ".0f", "title": "cached %"},
                {"field": "v", "format": ".1f", "title": "TTFT p50"},
            ],
        },
    }
    return Chart(
        "cache_hits",
        "Cache hits vs TTFT per level",
        spec,
        "Each load or trace level whose provider counted cached prompt tokens: the share it "
        "served from its cache against the level's TTFT p50 (circle); ▼ the TTFT p50 of its "
        "hits (at least half the prompt cached), ▲ of the rest.",
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
