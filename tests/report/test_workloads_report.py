"""The report's workload part: conversation turns and cache hits, drawn from lab.json's
typed figures (and nothing when a run has neither)."""

from __future__ import annotations

import pytest

from labkit.figures import (
    ConversationFigures,
    ConversationTurn,
    ConversationVariant,
    LoadFigures,
    LoadLevel,
    LoadLevelCache,
    TraceFigures,
)
from labkit.records import LabAnswer, LabResults
from labkit.report.kinds.conversation import conversation_chart, conversation_section
from labkit.report.kinds.load import cache_hits_chart
from labkit.report.render import ChartBlock, Table

pytestmark = pytest.mark.unit

PNG = b"\x89PNG"


def _answer(
    experiment: str, figures: ConversationFigures | LoadFigures | TraceFigures
) -> LabAnswer:
    return LabAnswer(
        experiment=experiment, provider="local", question="q", answer="a", figures=figures
    )


def _conversation() -> ConversationFigures:
    turns = [
        ConversationTurn(
            cache=cache,
            turn=t,
            ok=2,
            input_tokens_p50=100.0 + 80 * t,
            cached_tokens_p50=(80.0 * t) if cache == "on" else 0.0,
            reuse_p50=(80.0 * t / (100 + 80 * t)) if cache == "on" else 0.0,
            ttft_ms_p50=50.0 if cache == "on" else 50.0 + 40 * t,
        )
        for cache in ("on", "off")
        for t in range(3)
    ]
    return ConversationFigures(turns=turns, variants=[ConversationVariant(cache="on", sessions=2)])


def test_conversation_and_cache_hit_figures_are_drawn_with_a_turn_table() -> None:
    level = LoadLevel(
        level="c2",
        title="concurrency 2",
        mode="concurrency",
        target=2,
        ok=8,
        ttft_ms_p50=40.0,
        cache=LoadLevelCache(
            counted=8, hits=7, cached_share=0.8, ttft_ms_p50_hit=30.0, ttft_ms_p50_miss=90.0
        ),
    )
    lab = LabResults(
        run_id="r",
        answers=[
            _answer("conversation", _conversation()),
            _answer("load", LoadFigures(levels=[level], mode="concurrency")),
            _answer("trace", TraceFigures(trace="t.jsonl", speedup=1.0, replay=level)),
        ],
    )
    turns, hits = conversation_chart(lab), cache_hits_chart(lab)
    assert turns is not None and hits is not None
    assert turns.png.startswith(PNG) and hits.png.startswith(PNG)
    # The charts draw the figures' own medians, never a value of their own.
    ttft = {(v["series"], v["turn"], v["what"]): v["v"] for v in turns.spec["data"]["values"]}
    assert ttft[("cache off", 3, "TTFT")] == 130.0 and ttft[("cache on", 3, "cached")] == 160.0
    shown = {(v["level"], v["what"]): v["v"] for v in hits.spec["data"]["values"]}
    assert shown[("local · trace · concurrency 2", "hits")] == 30.0
    assert shown[("local · load · concurrency 2", "misses")] == 90.0
    section = conversation_section(lab)
    assert [b.chart.name for b in section if isinstance(b, ChartBlock)] == ["conversation_turns"]
    tables = [b for b in section if isinstance(b, Table)]
    assert len(tables) == 1 and len(tables[0].rows) == 6
    on_last = tables[0].rows[2]
    assert on_last[:2] == ["on", "3"] and on_last[5] == "62"  # 160 of 260 tokens cached


def test_a_run_without_workloads_adds_nothing() -> None:
    level = LoadLevel(level="c1", title="concurrency 1", mode="concurrency", target=1, ok=3)
    lab = LabResults(
        run_id="r", answers=[_answer("load", LoadFigures(levels=[level], mode="concurrency"))]
    )
    assert cache_hits_chart(lab) is None and conversation_section(lab) == []
    assert conversation_chart(None) is None and conversation_section(None) == []
